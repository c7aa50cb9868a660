"""What callers give, checked and turned into rows and graphs to write.

:class:`MemoryInput` validates the arguments of ``store``, ``store_many`` and
``update`` (and the memories of an import), builds the pre-tokenised index text
and extracts each memory's graph and atoms. It writes nothing: the manager hands
its results to the base memory in one transaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..config import MemoryConfig
from ..errors import InvalidAgentId, InvalidToolInput
from ..identity import normalize_jid
from ..limits import LIMITS
from ..models import GLOBAL_SCOPE, VISIBILITIES, Memory, Scope
from ..storage.base import IndexedText, NewMemory
from ..storage.derivation import Deferred
from ..text.atoms import memory_graph
from ..text.extraction import EntityExtractor, check_graph_input, needs_segmenter
from ..text.graph import MemoryGraph
from ..validation import (
    check_category,
    check_metadata,
    check_optional_text,
    check_text,
    check_unit,
)

__all__ = [
    "MemoryInput",
    "check_jid",
    "check_scope",
    "check_sender",
    "time_ordered_uid",
]

_MAX_CONTEXT_CHARS = LIMITS.context_chars
_EXTRACT_IN_THREAD = 8  # store_many batches larger than this extract in a worker thread
_STORE_FIELDS = frozenset(
    {
        "content",
        "category",
        "context",
        "confidence",
        "importance",
        "source_conversation",
        "source_sender",
        "metadata",
        "entities",
        "relations",
        "scope",
        "dedupe",
    }
)
_SCOPE_FIELDS = frozenset({"owner", "visibility", "shared_with"})


def time_ordered_uid() -> str:
    """A new memory's uid: a version 7 UUID (RFC 9562) in hex, 32 characters.

    Its first 48 bits are the Unix time in milliseconds and 74 of the rest are
    random, so uids made later sort later: the unique index on ``uid`` grows at its
    end instead of at a random leaf, and a group of stores committed together
    writes one or two of its pages rather than one for each store (a fifth of the
    bytes a store adds to the write-ahead log).
    """
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # the RFC's variant
    return f"{value:032x}"


def check_jid(name: str, value: Any) -> str:
    """``value`` as a normalised bare JID; ``InvalidToolInput`` naming ``name`` otherwise."""
    if not isinstance(value, str):
        raise InvalidToolInput(f"{name} must be a bare JID string, got {type(value).__name__}")
    try:
        return normalize_jid(value)
    except InvalidAgentId as exc:
        raise InvalidToolInput(f"{name}: {exc}") from None


def check_sender(value: Any) -> str | None:
    """The checked ``source_sender`` of a memory: a normalised bare JID, as a scope's
    owner is (``None`` or a blank text: no sender).

    Raises:
        InvalidToolInput: it is not a JID.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return check_jid("source_sender", value)


def check_scope(value: Any, source_conversation: str | None) -> Scope:
    """The checked :class:`Scope` of a memory, its JIDs normalised (bare, prepped).

    Args:
        value: a :class:`Scope`, a mapping of its fields (``owner``, ``visibility``,
            ``shared_with``: an export's or a caller's dict) or ``None`` (global).
        source_conversation: the memory's conversation (a conversation scope needs one).

    Raises:
        InvalidToolInput: an unknown visibility or field, a JID that is not one, a
            private scope without owner, a shared one without readers, a
            conversation one without ``source_conversation``.
    """
    if value is None:
        return GLOBAL_SCOPE
    readers: Any
    if isinstance(value, Scope):
        owner, visibility, readers = value.owner, value.visibility, value.shared_with
    elif isinstance(value, Mapping):
        unknown = set(value) - _SCOPE_FIELDS
        if unknown:
            raise InvalidToolInput(f"scope has unknown fields {sorted(map(str, unknown))}")
        owner = value.get("owner")
        visibility = value.get("visibility", "global")
        readers = value.get("shared_with") or ()
    else:
        raise InvalidToolInput(f"scope must be a Scope or a mapping, got {type(value).__name__}")
    if visibility not in VISIBILITIES:
        raise InvalidToolInput(
            f"scope visibility must be one of {', '.join(VISIBILITIES)}, got {visibility!r}"
        )
    if isinstance(readers, str) or not isinstance(readers, Iterable):
        raise InvalidToolInput("scope shared_with must be a list of bare JIDs")
    listed = list(readers)
    if len(listed) > LIMITS.scope_readers:
        raise InvalidToolInput(
            f"a memory may be shared with at most {LIMITS.scope_readers} readers, got {len(listed)}"
        )
    owner = None if owner is None else check_jid("scope owner", owner)
    shared = frozenset(check_jid("scope reader", reader) for reader in listed)
    if visibility == "private" and owner is None:
        raise InvalidToolInput("a private memory needs an owner (who told it)")
    if visibility == "shared" and not shared:
        raise InvalidToolInput("a shared memory needs at least one reader in shared_with")
    if visibility != "shared" and shared:
        raise InvalidToolInput(f"only a shared memory has readers, not a {visibility} one")
    if visibility == "conversation" and source_conversation is None:
        raise InvalidToolInput("a conversation memory needs its source_conversation")
    if owner is None and visibility == "global":
        return GLOBAL_SCOPE
    return Scope(owner=owner, visibility=visibility, shared_with=shared)


class MemoryInput:
    """Checks memory fields against a memory's configuration and extracts graphs.

    Args:
        config: the memory's configuration (limits, categories, atom lifetimes).
        extractor: the entity and relation extractor.
    """

    def __init__(self, config: MemoryConfig, extractor: EntityExtractor) -> None:
        self._config = config
        self._extractor = extractor

    def index_text(self, content: str, context: str | None) -> IndexedText:
        """The pre-tokenised text the keyword index keeps for a memory."""
        return IndexedText.of(content, context)

    def new_memory(
        self,
        content: Any,
        *,
        category: Any = "fact",
        context: Any = None,
        confidence: Any = 1.0,
        importance: Any = 0.5,
        source_conversation: Any = None,
        source_sender: Any = None,
        metadata: Any = None,
        scope: Any = None,
        dedupe: Any = True,
        now: float,
    ) -> tuple[NewMemory, IndexedText]:
        """A checked new memory and its index text. Raises InvalidToolInput."""
        new = self.checked_memory(
            content,
            category=category,
            context=context,
            confidence=confidence,
            importance=importance,
            source_conversation=source_conversation,
            source_sender=source_sender,
            metadata=metadata,
            scope=scope,
            dedupe=dedupe,
            now=now,
        )
        return new, self.index_text(new.content, new.context)

    def checked_memory(
        self,
        content: Any,
        *,
        category: Any = "fact",
        context: Any = None,
        confidence: Any = 1.0,
        importance: Any = 0.5,
        source_conversation: Any = None,
        source_sender: Any = None,
        metadata: Any = None,
        scope: Any = None,
        dedupe: Any = True,
        now: float,
    ) -> NewMemory:
        """A checked new memory, without its index text (:meth:`new_memory` makes it).

        Raises:
            InvalidToolInput: a value is invalid.
        """
        if not isinstance(dedupe, bool):
            raise InvalidToolInput(f"dedupe must be true or false, got {dedupe!r}")
        content = check_text("content", content, max_chars=self._config.max_content_chars)
        context = check_optional_text("context", context, max_chars=_MAX_CONTEXT_CHARS)
        source_conversation = check_optional_text(
            "source_conversation", source_conversation, max_chars=LIMITS.conversation_id_chars
        )
        return NewMemory(
            uid=time_ordered_uid(),
            category=check_category(category, self._config.categories),
            content=content,
            context=context,
            confidence=check_unit("confidence", confidence),
            importance=check_unit("importance", importance),
            created_at=now,
            source_conversation=source_conversation,
            source_sender=check_sender(source_sender),
            metadata=check_metadata(metadata),
            scope=check_scope(scope, source_conversation),
            dedupe=dedupe,
        )

    def items(
        self, items: Iterable[Mapping[str, Any]], now: float
    ) -> tuple[list[tuple[NewMemory, IndexedText]], list[tuple[Any, Any]]]:
        """The checked memories of ``store_many`` items and their explicit graph input.

        Raises:
            InvalidToolInput: an item is not a mapping of ``store()`` arguments, or
                one of its values is invalid (the message names the item).
        """
        prepared: list[tuple[NewMemory, IndexedText]] = []
        explicit: list[tuple[Any, Any]] = []
        for position, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidToolInput(f"item {position} must be a mapping of store() arguments")
            unknown = set(item) - _STORE_FIELDS
            if unknown:
                raise InvalidToolInput(f"item {position} has unknown fields {sorted(unknown)}")
            if "content" not in item:
                raise InvalidToolInput(f"item {position} has no content")
            fields = dict(item)
            content = fields.pop("content")
            explicit.append((fields.pop("entities", None), fields.pop("relations", None)))
            try:
                prepared.append(self.new_memory(content, now=now, **fields))
                check_graph_input(*explicit[-1])
            except InvalidToolInput as exc:
                raise InvalidToolInput(f"item {position}: {exc}") from None
        return prepared, explicit

    def changes(
        self,
        *,
        content: str | None,
        category: str | None,
        context: str | None,
        confidence: float | None,
        importance: float | None,
        metadata: Mapping[str, Any] | None,
        scope: Any = None,
        source_conversation: str | None = None,
    ) -> dict[str, Any]:
        """The checked fields an ``update`` changes (those not ``None``);
        ``source_conversation`` is the memory's, for a conversation ``scope``."""
        changes: dict[str, Any] = {}
        if scope is not None:
            changes["scope"] = check_scope(scope, source_conversation)
        if content is not None:
            changes["content"] = check_text(
                "content", content, max_chars=self._config.max_content_chars
            )
        if category is not None:
            changes["category"] = check_category(category, self._config.categories)
        if context is not None:
            changes["context"] = check_optional_text(
                "context", context, max_chars=_MAX_CONTEXT_CHARS
            )
        if confidence is not None:
            changes["confidence"] = check_unit("confidence", confidence)
        if importance is not None:
            changes["importance"] = check_unit("importance", importance)
        if metadata is not None:
            changes["metadata"] = check_metadata(metadata)
        return changes

    def updated_index(
        self, current: Memory, changes: Mapping[str, Any], given: Any = None
    ) -> tuple[IndexedText | None, MemoryGraph | None]:
        """The new index text and graph of ``current`` after ``changes`` (``None``:
        unchanged); ``given``: the entities and relations named for it when stored."""
        text = None
        if "content" in changes or "context" in changes:
            text = self.index_text(
                changes.get("content", current.content), changes.get("context", current.context)
            )
        graph = None
        if "content" in changes:
            graph = self.graph_of(
                NewMemory(
                    uid=current.uid,
                    category=changes.get("category", current.category),
                    content=changes["content"],
                    context=None,
                    confidence=current.confidence,
                    importance=changes.get("importance", current.importance),
                    created_at=current.created_at,
                ),
                *(given if given is not None else (None, None)),
            )
        return text, graph

    def graph_of(
        self,
        new: NewMemory | Memory,
        entities: Any = None,
        relations: Any = None,
    ) -> MemoryGraph:
        """The graph and atoms of one memory's text, with explicit entities and relations."""
        names, links = check_graph_input(entities, relations)
        extraction = self._extractor.extract(new.content, entities=names, relations=links)
        graph = memory_graph(
            new.content,
            extraction,
            category=new.category,
            importance=new.importance,
            config=self._config.atoms,
        )
        if names or links:
            graph = dataclasses.replace(graph, given_entities=names, given_relations=links)
        return graph

    async def graphs_of(
        self, news: Sequence[NewMemory | Memory], explicit: Sequence[tuple[Any, Any]]
    ) -> list[MemoryGraph | None]:
        """The graphs of many memories; large or Chinese batches extract in a thread."""

        def build() -> list[MemoryGraph | None]:
            return [self.graph_of(new, *extra) for new, extra in zip(news, explicit, strict=True)]

        # Chinese text is cut by jieba (loaded on first use): off the event loop.
        if len(news) > _EXTRACT_IN_THREAD or any(needs_segmenter(new.content) for new in news):
            return await asyncio.to_thread(build)
        return build()

    async def graphs_for(
        self, news: Sequence[NewMemory], explicit: Sequence[tuple[Any, Any]]
    ) -> list[MemoryGraph | Deferred | None]:
        """What an insert of ``news`` writes for their graphs: the graphs themselves,
        or, with ``StorageConfig.derive_in_background``, a mark for the derivation
        pipeline holding the checked explicit entities and relations."""
        if not self._config.storage.derive_in_background:
            return list(await self.graphs_of(news, explicit))
        factor = self._config.atoms.reinforcement_factor
        marks: list[MemoryGraph | Deferred | None] = []
        for entities, relations in explicit:
            names, links = check_graph_input(entities, relations)
            marks.append(Deferred(entities=names, relations=links, reinforcement_factor=factor))
        return marks
