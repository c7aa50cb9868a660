"""MemoryManager: one agent's memory — its stores, its retriever and its tools.

Open one per agent with ``await MemoryManager.open(jid, config)`` (or
``async with``). The manager is the memory's public face: it checks what callers
give, hands the work to the memory's :class:`~spade_memory.engine.Engine` (the
wired stores, indexer and retriever) and to its
:class:`~spade_memory.maintenance.service.Maintenance`, and refuses use after
:meth:`aclose`. Atoms (:mod:`spade_memory.text.atoms`) are recalled here too: a
memory's text is cut into short facts, each with a lifetime, so a lapsed or
superseded sentence is left out of what a prompt is given.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import logging
import random
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .config import MemoryConfig
from .disclosure import Disclosure
from .engine import (
    Engine,
    graph_outdated,
    index_text_outdated,
    mark_index_text_current,
    open_engine,
)
from .engine.derivation import live_parts
from .engine.indexer import VectorIndexer
from .engine.loop_exit import LoopExitClose
from .errors import (
    ConfigError,
    InvalidAgentId,
    InvalidToolInput,
    MemoryNotFound,
    ScopeDenied,
    StorageError,
)
from .formation.history import ConversationHistory
from .formation.service import Formation, FormationReport
from .identity import AgentIdentity, normalize_jid
from .limits import LIMITS
from .maintenance.consistency import ConsistencyReport
from .maintenance.service import Maintenance, MaintenanceStatus
from .maintenance.transfer import EXPORT_FORMAT, export_memory, import_memory
from .models import (
    InteractionNote,
    Memory,
    MemoryRecovery,
    MemoryStats,
    Scope,
    SearchResult,
    Viewer,
)
from .retrieval.retriever import SearchTimings
from .storage import memory_reads
from .storage.base import BaseMemoryStore
from .storage.graph_overview import (
    GraphNodeRow,
    GraphOverview,
    MemoryNeighbours,
    graph_overview,
    memory_neighbours,
    node_memory_ids,
    node_types,
)
from .storage.memory_writes import StaleRead
from .text.atoms import Atom
from .text.graph import MemoryGraph
from .tools import MemoryTool, build_memory_tools
from .validation import (
    check_category,
    check_id,
    check_limit,
    check_page,
    check_text,
    check_unit,
)

__all__ = ["EXPORT_FORMAT", "MemoryManager"]

logger = logging.getLogger(__name__)

MEMORY_STATUSES: tuple[str, ...] = ("active", "archived")
"""The statuses of a memory: searched and listed, or archived (kept, restorable)."""

_MAX_QUERY_CHARS = LIMITS.query_chars
_MAX_SEARCH_LIMIT = LIMITS.search_limit
_UPDATE_TRIES = 5  # an update computed from a read another update overtook is made again


class MemoryManager:
    """The long-term memory of one agent. Create it with :meth:`open`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._config = engine.config
        # per memory: its lock and how many updates use it (see update)
        self._update_locks: dict[int, tuple[asyncio.Lock, int]] = {}
        self._tools: builtins.list[MemoryTool] | None = None
        self._maintenance = Maintenance(engine, engine.config.maintenance)
        self._formation = Formation(
            engine, engine.config.formation, Disclosure(engine.config).scope_for
        )
        self._history = ConversationHistory(engine, self._formation)
        # Closes this memory if its owner leaves the event loop without doing so.
        self._loop_exit = LoopExitClose(self, MemoryManager.aclose, f"the memory of {self.jid}")

    def __repr__(self) -> str:
        state = "closed" if self._engine.closed else "open"
        return f"<MemoryManager {self.jid} ({state})>"

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        engine: Engine | None = getattr(self, "_engine", None)
        if engine is not None and not engine.closed:
            _warn(
                f"{self!r} was deleted before being closed; close it with "
                "'async with' or 'await aclose()'",
                ResourceWarning,
                source=self,
            )

    # -- lifecycle -------------------------------------------------------

    @classmethod
    async def open(
        cls,
        jid: Any,
        config: MemoryConfig | None = None,
        *,
        clock: Callable[[], float] | None = None,
        start_empty: bool = False,
    ) -> MemoryManager:
        """Open the memory of agent ``jid``.

        A known agent whose database or notes file is gone (deleted, or moved
        aside as damaged by an earlier open) never starts silently empty: the
        newest good backup is restored (``config.on_damage="restore"``, the
        default; :attr:`recoveries` and a WARNING say what was lost), or the
        open is refused with :class:`~spade_memory.errors.MemoryLost`.

        Args:
            jid: the agent's JID (a resource is ignored).
            config: where and how to keep the memory; default ``MemoryConfig()``.
            clock: the time source (Unix seconds), injectable for tests.
            start_empty: accept an empty memory if the agent's memory is gone,
                instead of restoring or refusing (a WARNING says so).

        Raises:
            InvalidAgentId: ``jid`` is not a valid ``local@domain``; nothing was touched.
            ConfigError: ``config`` is no :class:`MemoryConfig`; nothing was touched.
            StorageError: the memory root is a file, or cannot be made or written.
            PathEscapeError: a storage path would leave the root (e.g. a symlink).
            StorageCorrupted: a file was damaged; it was quarantined (the next open
                restores a backup or refuses, as above).
            MemoryLost: the agent's memory is gone and was not restored.
        """
        identity = AgentIdentity.of(jid)
        if config is None:
            config = MemoryConfig()
        elif not isinstance(config, MemoryConfig):
            raise ConfigError(
                f"config must be a MemoryConfig, got {type(config).__name__} "
                "(build one: MemoryConfig(root=...))"
            )
        engine = await open_engine(identity, config, clock or time.time, start_empty=start_empty)
        manager = cls(engine)
        try:
            await manager._loop_exit.arm()
            if await graph_outdated(engine):
                await manager.rebuild_graph()
            if await index_text_outdated(engine):
                # keyword rows of an older index text (before date terms, say)
                refreshed = await manager._maintenance.refresh_keyword_rows()
                await mark_index_text_current(engine)
                if refreshed:
                    logger.info("rewrote %d keyword rows of %s", refreshed, jid)
            if not engine.base.created:
                # windows left pending when the agent last stopped (or closed by
                # a silence since) are formed in the background
                await manager._formation.resume()
        except BaseException:
            await manager.aclose()
            raise
        # A database this open created holds nothing to check (built in one
        # transaction); opening many new agents in a row skips as many checks.
        switching = engine.indexer is not None and engine.indexer.target is not None
        if (config.maintenance.check_on_open and not engine.base.created) or switching:
            # the memory is usable meanwhile (a changed embedder: with the old vectors)
            manager.maintenance.start_background(check=config.maintenance.check_on_open)
        return manager

    async def __aenter__(self) -> MemoryManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Finish what is pending and close every store; idempotent.

        Conversation windows are formed (``FormationConfig.form_on_close``, within
        ``llm_timeout``), the graphs and atoms of memories stored a moment ago are
        derived (within two seconds), and the memories not embedded yet are embedded
        (within ``StorageConfig.embed_on_close_seconds``; an embedder that is
        unavailable is not waited for). Nothing acknowledged is lost either way: what
        is left is done on the next open (the keyword route finds it meanwhile).
        A close cancelled (the end of the event loop cancels one under way) or
        failing stops finishing and still closes every store.
        """
        if self._engine.closed:
            return
        try:
            try:
                await self._formation.aclose(finish=True)
                await self._maintenance.aclose()
            except BaseException:
                await self._maintenance.aclose()
                await self._engine.aclose(finish=False)
                raise
            await self._engine.aclose()
        finally:
            await self._loop_exit.disarm()

    # -- properties --------------------------------------------------------

    @property
    def jid(self) -> str:
        """The agent's normalised bare JID."""
        return self._engine.identity.jid

    @property
    def identity(self) -> AgentIdentity:
        return self._engine.identity

    @property
    def config(self) -> MemoryConfig:
        return self._config

    @property
    def closed(self) -> bool:
        return self._engine.closed

    @property
    def engine(self) -> Engine:
        """The wired parts of this memory (for maintenance, tools and integrations)."""
        return self._engine

    @property
    def categories(self) -> tuple[str, ...]:
        return self._config.categories

    @property
    def root(self) -> Path | None:
        """The memory root folder, or ``None`` in in-memory mode."""
        return self._engine.root

    @property
    def last_search_timings(self) -> SearchTimings:
        """Where the time of the search that finished last went.

        Deprecated: searches side by side overwrite it; use
        :meth:`search_with_timings`, which returns each search's own timings.
        """
        warnings.warn(
            "MemoryManager.last_search_timings is deprecated (concurrent searches "
            "overwrite it); use MemoryManager.search_with_timings()",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._engine.retriever.last_timings

    @property
    def base_store(self) -> BaseMemoryStore:
        """The underlying SQLite store (for maintenance tools)."""
        return self._engine.base

    @property
    def indexer(self) -> VectorIndexer | None:
        return self._engine.indexer

    @property
    def history(self) -> ConversationHistory:
        """The agent's kept conversations: append, read, reset, forget, sources
        (:class:`~spade_memory.formation.history.ConversationHistory`)."""
        return self._history

    @property
    def maintenance(self) -> Maintenance:
        """Checks, repairs, rebuilds, backups, decay and consolidation of this memory."""
        return self._maintenance

    @property
    def recoveries(self) -> tuple[MemoryRecovery, ...]:
        """What this open did about a lost database or notes file (empty: nothing was lost).

        Each says whether the file was restored from a backup (which one, and since
        when changes are lost) or started empty.
        """
        return self._engine.recoveries

    @property
    def maintenance_status(self) -> MaintenanceStatus:
        """What maintenance is doing or did last (state, progress, last check report)."""
        return self._maintenance.status

    def now(self) -> float:
        """The memory's clock (Unix seconds; injectable through :meth:`open`)."""
        return self._engine.now()

    def graph_for(self, memory: Memory) -> MemoryGraph:
        """The graph and atoms a memory's text yields (for maintenance rebuilds)."""
        return self._engine.input.graph_of(memory)

    def notify_changed(self) -> None:
        """Tell the memory that maintenance changed it: drop cached searches, embed anew."""
        self._engine.notify_changed()

    # -- base memory ---------------------------------------------------------

    async def store(
        self,
        content: str,
        *,
        category: str = "fact",
        context: str | None = None,
        confidence: float = 1.0,
        importance: float = 0.5,
        source_conversation: str | None = None,
        source_sender: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        entities: Sequence[str] | None = None,
        relations: Sequence[Mapping[str, str]] | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
        dedupe: bool = True,
    ) -> Memory:
        """Store one memory; returns once it is durably committed.

        It is found by keywords at once and by meaning once embedded (in the
        background; :meth:`flush` waits for that). Its entities, relations and
        atoms are derived in the background too, right after (``flush`` waits;
        with ``StorageConfig(derive_in_background=False)``, in the same
        transaction); ``entities``
        (names) and ``relations`` (``{"source", "relation", "target"}``) add
        ones the text does not show. ``scope`` (a :class:`Scope` or its dict;
        default global, the agent's own) says who may see it besides the agent.
        ``source_sender``, who told it, is kept as its normalised bare JID, as a
        scope's owner is.

        A copy of an active memory (same category and scope, the same content and
        context once case, width, punctuation and spacing are set aside) is not
        stored again: that memory is reinforced instead (one more access, the
        higher importance and confidence of the two, its atoms' lives lengthened)
        and returned, with its own id, ``created_at`` and an ``updated_at`` of now.
        ``dedupe=False`` stores the copy anyway.

        Raises:
            InvalidToolInput: a value is invalid (also a private scope without
                owner, a shared one without readers, a conversation one without
                ``source_conversation``, a JID that is not one); nothing was written.
        """
        self._engine.check_open()
        new, text = self._engine.input.new_memory(
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
            now=self._engine.now(),
        )
        graph = (await self._engine.input.graphs_for([new], [(entities, relations)]))[0]
        memory = await self._engine.base.insert(new, text, graph=graph)
        self._engine.notify_changed(marked=True)
        return memory

    async def store_many(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[Memory]:
        """Store many memories in one transaction (all or none).

        Each item is a mapping of :meth:`store`'s arguments (``content`` required;
        ``scope`` a :class:`Scope` or its dict). A copy, of a stored memory or of
        an earlier item, reinforces that memory as in :meth:`store` (unless the
        item says ``"dedupe": False``); its place in the result holds that memory.
        """
        self._engine.check_open()
        now = self._engine.now()
        prepared, explicit = self._engine.input.items(items, now)
        graphs = await self._engine.input.graphs_for([new for new, _ in prepared], explicit)
        memories = await self._engine.base.insert_many(prepared, graphs=graphs)
        if memories:
            self._engine.notify_changed(marked=True)
        return memories

    async def search(
        self,
        query: str,
        *,
        limit: int = 5,
        category: str | None = None,
        categories: Sequence[str] | None = None,
        explain: bool = False,
        record_access: bool = True,
        viewer: Viewer | None = None,
        min_score: float = 0.0,
    ) -> builtins.list[SearchResult]:
        """The memories that best match ``query``, best first.

        With ``RetrievalConfig.relevance_floor``, only memories with evidence of
        matching the query are returned (a query term, a vector similarity clearly
        above the embedder's chance level, an entity of the query, or a turn next
        to such a memory), so a query about nothing stored returns an empty list.

        Args:
            query: natural-language text, in any language.
            limit: how many results at most (1 to ``LIMITS.search_limit``, 100).
            category: only memories of this category.
            categories: only memories of these categories (ranked in one search, so
                their scores compare); not together with ``category``.
            explain: attach a :class:`ScoreExplanation` to every result.
            record_access: count this search in the agent's stats and one access of
                each result (which importance decay and ranking read); ``False``
                for a look that must not change what it looks at (an inspector).
            viewer: only memories this conversation partner sees
                (:meth:`Viewer.sees`, applied inside every route's query);
                ``None``: the agent itself, which sees all.
            min_score: only results whose score (:attr:`SearchResult.score`, in
                [0, 1]) is at least this.
        """
        results, _ = await self.search_with_timings(
            query,
            limit=limit,
            category=category,
            categories=categories,
            explain=explain,
            record_access=record_access,
            viewer=viewer,
            min_score=min_score,
        )
        return results

    async def search_with_timings(
        self,
        query: str,
        *,
        limit: int = 5,
        category: str | None = None,
        categories: Sequence[str] | None = None,
        explain: bool = False,
        record_access: bool = True,
        viewer: Viewer | None = None,
        min_score: float = 0.0,
    ) -> tuple[builtins.list[SearchResult], SearchTimings]:
        """Like :meth:`search`, with where the time of this search went.

        Each call gets its own :class:`~spade_memory.retrieval.retriever.SearchTimings`
        (seconds per stage: embedding, keyword, vector, fusion and the named stages
        in ``extra``; ``cached`` when answered from the cache), so searches running
        side by side each see their own.

        Returns:
            ``(results, timings)``; the arguments are those of :meth:`search`.
        """
        self._engine.check_open()
        query = check_text("query", query, max_chars=_MAX_QUERY_CHARS)
        limit = check_limit("limit", limit, low=1, high=_MAX_SEARCH_LIMIT)
        categories = self._check_categories(category, categories)
        viewer = _check_viewer(viewer)
        min_score = check_unit("min_score", min_score)
        results, timings = await self._engine.retriever.search_with_timings(
            query,
            limit=limit,
            categories=categories,
            explain=explain,
            viewer=viewer,
            min_score=min_score,
        )
        merged = self._engine.access.merged_all(result.memory for result in results)
        results = [
            result if memory is result.memory else dataclasses.replace(result, memory=memory)
            for result, memory in zip(results, merged, strict=True)
        ]
        if record_access:
            self._engine.access.note((result.memory.id for result in results), search=True)
        return results, timings

    def _check_categories(
        self, category: str | None, categories: Sequence[str] | None
    ) -> tuple[str, ...] | None:
        if category is not None and categories is not None:
            raise InvalidToolInput("give category or categories, not both")
        if category is not None:
            return (check_category(category, self.categories),)
        if categories is None:
            return None
        if isinstance(categories, str) or not isinstance(categories, Sequence) or not categories:
            raise InvalidToolInput(
                f"categories must be a non-empty list of category names, got {categories!r}"
            )
        return tuple(dict.fromkeys(check_category(c, self.categories) for c in categories))

    async def list(
        self,
        category: str | None = None,
        *,
        limit: int = 20,
        offset: int = 0,
        viewer: Viewer | None = None,
        status: str | None = "active",
        created_from: float | None = None,
        created_to: float | None = None,
    ) -> builtins.list[Memory]:
        """Memories, newest first, optionally of one category; with a ``viewer``, those
        it sees. Access counts include the accesses not yet written.

        Args:
            status: ``"active"`` (default), ``"archived"``, or ``None`` for both.
            created_from, created_to: only memories stored in ``[created_from,
                created_to)`` (Unix seconds; either may be left out).
        """
        self._engine.check_open()
        categories = None if category is None else [check_category(category, self.categories)]
        limit, offset = check_page(limit, offset)
        if status is not None and status not in MEMORY_STATUSES:
            raise InvalidToolInput(
                f"status must be one of {', '.join(MEMORY_STATUSES)} (or None for all), "
                f"got {status!r}"
            )
        created_from = _check_time("created_from", created_from)
        created_to = _check_time("created_to", created_to)
        memories = await self._engine.base.list(
            categories=categories,
            statuses=None if status is None else (status,),
            limit=limit,
            offset=offset,
            viewer=_check_viewer(viewer),
            created_from=created_from,
            created_to=created_to,
        )
        return self._engine.access.merged_all(memories)

    async def recent(
        self, limit: int = 10, *, viewer: Viewer | None = None
    ) -> builtins.list[Memory]:
        """The newest active memories (that ``viewer`` sees)."""
        return await self.list(limit=limit, viewer=viewer)

    async def get(self, memory_id: int, *, viewer: Viewer | None = None) -> Memory:
        """One memory by id (its access count includes the accesses not yet written).

        Raises:
            MemoryNotFound: no memory has that id, or ``viewer`` does not see it
                (the same message either way: nothing tells one from the other).
        """
        self._engine.check_open()
        memory = await self._engine.base.get(check_id(memory_id), viewer=_check_viewer(viewer))
        if memory is None:
            raise MemoryNotFound(f"{self.jid} has no memory with id {memory_id}")
        return self._engine.access.merged(memory)

    async def _changeable(self, memory_id: int, viewer: Viewer | None, verb: str) -> Memory:
        """The memory ``viewer`` asks to change. Raises MemoryNotFound (it does not
        see it) or ScopeDenied (it sees it but may not change it)."""
        memory = await self.get(memory_id, viewer=viewer)
        if viewer is not None and not viewer.may_change(memory):
            raise ScopeDenied(_denial(memory, verb))
        return memory

    async def update(
        self,
        memory_id: int,
        *,
        content: str | None = None,
        category: str | None = None,
        context: str | None = None,
        confidence: float | None = None,
        importance: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
        viewer: Viewer | None = None,
    ) -> Memory:
        """Change some fields of a memory; a new content is re-indexed and re-embedded.

        ``scope`` re-scopes it (see :meth:`store`). With a ``viewer``, only what it
        :meth:`Viewer.may_change`; it may re-scope only what it told, keeping itself
        as the owner.

        Raises:
            MemoryNotFound: no such memory, or ``viewer`` does not see it.
            ScopeDenied: ``viewer`` sees it but may not change it; nothing changed.
            InvalidToolInput: a value is invalid; nothing changed.
            StorageError: other processes changed the memory again and again while
                this change was made (it was tried five times); nothing changed.
        """
        self._engine.check_open()
        viewer = _check_viewer(viewer)
        # Updates of one memory by this process take turns: each is made from a read
        # no other of them overtakes. Another process's update can still come between
        # a read and its write; the write then changes nothing, and the update is made
        # again from a new read.
        fields: dict[str, Any] = {
            "content": content,
            "category": category,
            "context": context,
            "confidence": confidence,
            "importance": importance,
            "metadata": metadata,
            "scope": scope,
        }
        lock, users = self._update_locks.get(memory_id, (asyncio.Lock(), 0))
        self._update_locks[memory_id] = (lock, users + 1)
        try:
            async with lock:
                for attempt in range(_UPDATE_TRIES):
                    with contextlib.suppress(StaleRead):
                        return await self._update_once(memory_id, viewer, fields)
                    await asyncio.sleep(random.uniform(0.0, 0.01 * 2**attempt))
        finally:
            lock, users = self._update_locks[memory_id]
            if users > 1:
                self._update_locks[memory_id] = (lock, users - 1)
            else:
                del self._update_locks[memory_id]
        raise StorageError(
            f"memory {memory_id} of {self.jid} was changed by other processes again and "
            f"again while this change was made ({_UPDATE_TRIES} tries); nothing was changed, "
            "try again"
        )

    async def _update_once(
        self, memory_id: int, viewer: Viewer | None, fields: Mapping[str, Any]
    ) -> Memory:
        """One try of :meth:`update` with its ``fields``: read, check, write;
        :class:`StaleRead` when the memory's text or scope changed between the read
        and the write (nothing written)."""
        current = await self._changeable(memory_id, viewer, "change")
        changes = self._engine.input.changes(
            **fields, source_conversation=current.source_conversation
        )
        if (
            viewer is not None
            and "scope" in changes
            and (current.scope.owner != viewer.jid or changes["scope"].owner != viewer.jid)
        ):
            raise ScopeDenied(
                f"memory {current.id} can be re-scoped by {viewer.jid} only if it told it, "
                "keeping itself as the scope's owner"
            )
        if not changes:
            return current
        given = (await self._engine.base.given([current.id])).get(current.id)
        text, graph = self._engine.input.updated_index(current, changes, given)
        updated = await self._engine.base.update(
            current.id, changes, text=text, now=self._engine.now(), graph=graph, read=current
        )
        if updated is None:
            raise MemoryNotFound(f"{self.jid} has no memory with id {memory_id}")
        if "content" in changes and self._engine.indexer is not None:
            self._engine.indexer.remove([current.id])
        self._engine.notify_changed()
        return updated

    async def forget(self, memory_id: int, *, viewer: Viewer | None = None) -> None:
        """Delete a memory, its index entries and its vector.

        Raises:
            MemoryNotFound: no such memory, or ``viewer`` does not see it.
            ScopeDenied: ``viewer`` sees it but may not forget it; nothing changed.
        """
        viewer = _check_viewer(viewer)
        if viewer is not None:
            self._engine.check_open()
            await self._changeable(memory_id, viewer, "forget")
        await self._engine.forget(memory_id)

    # -- access statistics (coalesced) ------------------------------------------

    @property
    def _touch_task(self) -> asyncio.Task[None] | None:
        """The pending write of access statistics (the coalescing timer or a retry)."""
        return self._engine.access.task

    async def _write_touches(self) -> None:
        await self._engine.access.write()

    # -- interaction memory -----------------------------------------------------

    async def add_note(
        self, conversation_id: str, content: str, *, author: str | None = None
    ) -> InteractionNote:
        """Add a note about a conversation; returns once it is durable."""
        self._engine.check_open()
        return await self._engine.interactions.add(conversation_id, content, author=author)

    async def notes(
        self, conversation_id: str, *, limit: int | None = None
    ) -> builtins.list[InteractionNote]:
        """The notes of a conversation, oldest first (``limit`` keeps the newest)."""
        self._engine.check_open()
        return await self._engine.interactions.get(conversation_id, limit=limit)

    async def clear_notes(self, conversation_id: str) -> int:
        """Remove every note of a conversation; returns how many were removed."""
        self._engine.check_open()
        return await self._engine.interactions.clear(conversation_id)

    async def conversations(self) -> builtins.list[str]:
        """The ids of the conversations that have notes."""
        self._engine.check_open()
        return await self._engine.interactions.conversations()

    # -- export and import -------------------------------------------------------

    async def export(self) -> dict[str, Any]:
        """Everything this agent remembers, as a JSON-ready dict."""
        self._engine.check_open()
        return await export_memory(self._engine)

    async def import_data(
        self,
        data: Mapping[str, Any],
        *,
        progress: Callable[[int, int], object] | None = None,
    ) -> tuple[int, int]:
        """Add memories, notes and kept conversations from :meth:`export` output of
        any agent.

        Memories whose ``uid`` already exists are skipped, and messages kept already
        (the same XMPP id in the same conversation), so importing twice changes
        nothing. Messages formed into memories where they were exported are not
        formed again; the others are formed here as kept messages are.

        A memory that copies one held here (see :meth:`store`) reinforces it instead;
        copies within the export that carry their uid stay apart, as they were where
        it was made, and an archived memory is imported as it is, never as a copy.
        Returns ``(memories added, notes added)``, the new ones only (not those
        skipped, nor those that reinforced a memory). ``progress`` is called with
        ``(memories read, memories in the export)`` as they are checked (embedding
        follows in the background: :meth:`flush` waits for it).

        Raises:
            InvalidToolInput: the data is not an export, or a memory, note or
                conversation in it is invalid (naming it); nothing was written.
        """
        self._engine.check_open()
        added = await import_memory(data, self._engine, progress=progress)
        await self._formation.resume()  # imported messages not formed yet
        return added

    # -- memory formation --------------------------------------------------------

    async def form_memories(self) -> FormationReport:
        """Form every kept message not yet formed into memories, now, in every
        conversation (the open windows too; the background forms only closed ones).

        Returns:
            What was formed: windows, new memories, memories told again, windows
            discarded because their conversation was reset or forgotten meanwhile;
            also what the background formed since the memory was opened or this
            was last called (its runs under way are waited for first).
        """
        self._engine.check_open()
        return await self._formation.form_pending()

    # -- atoms -----------------------------------------------------------------

    async def live_atoms(
        self, memory_id: int, *, viewer: Viewer | None = None
    ) -> builtins.list[Atom]:
        """The atoms of a memory that are live now, in order (what to recall of it).

        A memory stored before atoms existed has none; recall its whole content.
        With a ``viewer``, MemoryNotFound unless it sees the memory.
        """
        self._engine.check_open()
        memory_id = await self._seen_id(memory_id, viewer)
        return await self._engine.atoms.live(memory_id, self._engine.now())

    async def _seen_id(self, memory_id: int, viewer: Viewer | None) -> int:
        """``memory_id`` checked; with a viewer, MemoryNotFound unless it sees it."""
        if viewer is None:
            return check_id(memory_id)
        return (await self.get(memory_id, viewer=viewer)).id

    async def recall(
        self,
        query: str,
        *,
        limit: int = 5,
        category: str | None = None,
        categories: Sequence[str] | None = None,
        viewer: Viewer | None = None,
        min_score: float = 0.0,
    ) -> builtins.list[SearchResult]:
        """:meth:`search` for prompt assembly: each memory carries only its live atoms.

        A memory whose atoms are all live comes back as stored; one with some atoms
        no longer live comes back with the text of its live ones as content, in
        order (a superseded or lapsed sentence is left out, and a memory with none
        live is left out); one stored before atoms existed comes back whole.
        """
        results, _ = await self.recall_with_timings(
            query,
            limit=limit,
            category=category,
            categories=categories,
            viewer=viewer,
            min_score=min_score,
        )
        return results

    async def recall_with_timings(
        self,
        query: str,
        *,
        limit: int = 5,
        category: str | None = None,
        categories: Sequence[str] | None = None,
        viewer: Viewer | None = None,
        min_score: float = 0.0,
    ) -> tuple[builtins.list[SearchResult], SearchTimings]:
        """Like :meth:`recall`, with where the time of its search went
        (:meth:`search_with_timings`).

        Returns:
            ``(results, timings)``; the arguments are those of :meth:`recall`.
        """
        results, timings = await self.search_with_timings(
            query,
            limit=limit,
            category=category,
            categories=categories,
            viewer=viewer,
            min_score=min_score,
        )
        parts = await self._live_parts([r.memory for r in results])
        recalled: builtins.list[SearchResult] = []
        for result in results:
            memory = _live_view(result.memory, parts.get(result.memory.id))
            if memory is result.memory:
                recalled.append(result)
            elif memory is not None:
                recalled.append(dataclasses.replace(result, memory=memory))
        return recalled, timings

    async def recall_memory(self, memory_id: int, *, viewer: Viewer | None = None) -> Memory | None:
        """One memory as :meth:`recall` would give it: only its live atoms, and
        ``None`` when it is not active or nothing of it is live. Raises MemoryNotFound
        (also when ``viewer`` does not see it)."""
        memory = await self.get(memory_id, viewer=viewer)
        if memory.status != "active":
            return None
        return _live_view(memory, (await self._live_parts([memory])).get(memory.id))

    async def _live_parts(
        self, memories: Sequence[Memory]
    ) -> dict[int, builtins.list[tuple[str, bool]]]:
        """The parts of each memory to recall, with whether each is live now (none for
        a memory without atoms); memories still to be derived count as their claims
        (:func:`~spade_memory.engine.derivation.live_parts`)."""
        ids = [memory.id for memory in memories]
        now = self._engine.now()
        found = await self._engine.atoms.atoms(ids, now)
        claims = await self._engine.deriver.pending_claims(ids)
        parts: dict[int, builtins.list[tuple[str, bool]]] = {}
        held = [(m, found[m.id]) for m in memories if m.id in found] if claims else []
        for memory in memories:
            own = live_parts(memory, found.get(memory.id), claims, now=now, held=held)
            if own is not None:
                parts[memory.id] = own
        return parts

    async def atoms(self, memory_id: int, *, viewer: Viewer | None = None) -> builtins.list[Atom]:
        """Every atom of a memory with its status now (active, dormant, superseded, ...).
        With a ``viewer``, MemoryNotFound unless it sees the memory.

        Waits for the derivation of what was stored so far (atoms are derived behind
        the acknowledgement), so a memory stored a moment ago shows its atoms.
        """
        self._engine.check_open()
        memory_id = await self._seen_id(memory_id, viewer)
        await self._engine.derived()
        found = await self._engine.atoms.atoms([memory_id], self._engine.now())
        return found.get(memory_id, [])

    async def forget_atom(self, atom_id: int, *, viewer: Viewer | None = None) -> Atom:
        """Mark one atom forgotten, keeping its memory.

        Raises:
            MemoryNotFound: no such atom, or ``viewer`` does not see its memory.
            ScopeDenied: ``viewer`` sees its memory but may not change it.
        """
        self._engine.check_open()
        atom_id = check_id(atom_id)
        viewer = _check_viewer(viewer)
        if viewer is not None:
            found = await self._engine.atoms.atom(atom_id, self._engine.now())
            try:
                if found is None:
                    raise MemoryNotFound
                await self._changeable(found.memory_id, viewer, "forget")
            except MemoryNotFound:
                raise MemoryNotFound(f"there is no memory atom with id {atom_id}") from None
        atom = await self._engine.atoms.forget(atom_id)
        self._engine.notify_changed()
        return atom

    async def refresh_atoms(self) -> dict[str, int]:
        """Record atoms whose lifetime lapsed as dormant or expired; returns the counts."""
        return await self._engine.refresh_atoms()

    # -- lifecycle of memories ---------------------------------------------------

    async def archive(self, memory_id: int) -> Memory:
        """Archive a memory: kept and restorable, no longer searched or listed.

        Raises:
            MemoryNotFound: no memory with that id.
        """
        memory = await self.get(memory_id)
        await self._maintenance.archive([memory.id])
        return await self.get(memory.id)

    async def restore_archived(self, memory_id: int) -> Memory:
        """Make an archived memory active again. Raises MemoryNotFound."""
        memory = await self.get(memory_id)
        await self._maintenance.restore_archived([memory.id])
        return await self.get(memory.id)

    async def check(self, *, repair: bool = False, deep: bool = False) -> ConsistencyReport:
        """Check this memory's indexes against its memories; ``repair`` mends what is off.

        ``deep`` compares every keyword row and vector with its memory; ``deep`` or
        ``repair`` also runs SQLite's own checks (``PRAGMA integrity_check``, the
        full-text indexes' checks), and ``repair`` builds damaged indexes again.
        """
        self._engine.check_open()
        return await self._maintenance.check(repair=repair, deep=deep, structure=deep or repair)

    async def backup(self) -> Path:
        """Back up this memory into ``backup/`` under the root; returns the file.

        Raises:
            ConfigError: the memory is in-memory.
        """
        self._engine.check_open()
        return await self._maintenance.backup()

    # -- graph, background work and counts ------------------------------------------

    async def rebuild_graph(self, *, batch: int = 200) -> int:
        """Extract the graph and atoms of every memory again; returns how many.

        Runs on open when the stored graph was made by another extraction version
        (or before graphs existed). Builds into a shadow that replaces the live
        graph once complete (see :mod:`spade_memory.maintenance.graph_rebuild`):
        forgotten atoms stay forgotten, unchanged graph vectors are kept, and an
        interrupted rebuild resumes.
        """
        self._engine.check_open()
        (result,) = await self._maintenance.rebuild("graph", batch=batch)
        if result.processed:
            logger.info("rebuilt the graph of %d memories of %s", result.processed, self.jid)
        return result.processed

    async def graph_overview(
        self,
        *,
        max_nodes: int = 150,
        conversation: str | None = None,
        node_type: str | None = None,
    ) -> GraphOverview:
        """The entities named by the most active memories and the relations between them.

        As the agent sees its memory (every scope): a view for its operator. Like the
        other views of the graph, it waits for the derivation of what was just stored.

        Args:
            max_nodes: how many entities at most (1 to ``LIMITS.graph_view_nodes``).
            conversation: only what memories formed in this conversation name.
            node_type: only entities of this type (see :meth:`graph_node_types`).
        """
        self._engine.check_open()
        max_nodes = check_limit("max_nodes", max_nodes, low=1, high=LIMITS.graph_view_nodes)
        if conversation is not None:
            conversation = check_text(
                "conversation", conversation, max_chars=LIMITS.conversation_id_chars
            )
        if node_type is not None:
            node_type = check_text("node_type", node_type, max_chars=LIMITS.category_chars)
        await self._engine.derived()
        return await graph_overview(
            self._engine.base.fetchall,
            max_nodes=max_nodes,
            conversation=conversation,
            node_type=node_type,
        )

    async def graph_node_types(self) -> builtins.list[str]:
        """The types of the entities in the graph (``person``, ``date``, ...), sorted."""
        await self._engine.derived()
        return await node_types(self._engine.base.fetchall)

    async def neighbours(self, memory_id: int, *, limit: int = 10) -> MemoryNeighbours:
        """A memory's entities and relations, and the active memories sharing the most
        entities with it (at most ``limit``). Raises MemoryNotFound."""
        memory = await self.get(memory_id)
        limit = check_limit("limit", limit, low=1, high=LIMITS.search_limit)
        await self._engine.derived()
        return await memory_neighbours(self._engine.base.fetchall, memory.id, limit=limit)

    async def node_memories(
        self, node_id: int, *, limit: int = 50
    ) -> tuple[GraphNodeRow, builtins.list[Memory]]:
        """An entity of the graph and the newest active memories naming it.

        Raises:
            MemoryNotFound: the graph has no entity with that id.
        """
        self._engine.check_open()
        limit = check_limit("limit", limit, low=1, high=LIMITS.search_limit)
        await self._engine.derived()
        fetch = self._engine.base.fetchall
        node, ids = await node_memory_ids(fetch, check_id(node_id), limit=limit)
        if node is None:
            raise MemoryNotFound(f"the graph of {self.jid} has no entity with id {node_id}")
        found = await self._engine.base.get_many(ids)
        return node, self._engine.access.merged_all(found[i] for i in ids if i in found)

    async def activity(self) -> dict[str, Any]:
        """How often the memory was written and searched, and when last
        (``stores``, ``updates``, ``forgets``, ``searches``, ``last_store_at``,
        ``last_search_at``)."""
        self._engine.check_open()
        return await self._engine.base.agent_stats()

    async def flush(self) -> None:
        """Wait until background work has caught up: the conversation windows closed
        so far are formed into memories (:meth:`form_memories` forms the open ones
        too), and the derivation of graph rows and atoms, embedding and access
        statistics are done."""
        self._engine.check_open()
        await self._formation.settle()
        await self._engine.flush()

    async def stats(self) -> MemoryStats:
        """Counts of this agent's memories, notes and vectors, and of the memories whose
        embedding or derivation (graph and atoms) is still to be done."""
        self._engine.check_open()
        fingerprint = None
        if self._engine.indexer is not None:
            fingerprint = self._engine.indexer.embedder.fingerprint
        return await memory_reads.memory_stats(
            self._engine.base.fetchall,
            self.jid,
            fingerprint=fingerprint,
            notes=await self._engine.interactions.counts(),
            in_memory=self._config.in_memory,
        )

    # -- tools -----------------------------------------------------------------

    def tools(self) -> builtins.list[MemoryTool]:
        """The LLM memory tools bound to this manager's categories."""
        if self._tools is None:
            self._tools = build_memory_tools(self.categories)
        return list(self._tools)


def _check_viewer(viewer: Viewer | None) -> Viewer | None:
    """``viewer`` with its JID normalised and its categories a frozenset.

    Raises:
        InvalidToolInput: it is no Viewer, or a field of it is invalid.
    """
    if viewer is None:
        return None
    if not isinstance(viewer, Viewer):
        raise InvalidToolInput(f"viewer must be a Viewer, got {type(viewer).__name__}")
    try:
        jid = normalize_jid(viewer.jid)
    except InvalidAgentId as exc:
        raise InvalidToolInput(f"viewer: {exc}") from None
    if viewer.conversation_id is not None and not isinstance(viewer.conversation_id, str):
        raise InvalidToolInput("viewer: conversation_id must be a string or None")
    categories = viewer.categories
    if categories is not None:
        try:  # a set, list or tuple of names (a generator is read once)
            names = None if isinstance(categories, str | bytes) else tuple(categories)
        except TypeError:
            names = None
        if names is None or not all(isinstance(c, str) for c in names):
            raise InvalidToolInput("viewer: categories must be a set of category names or None")
        categories = frozenset(names)
    if jid == viewer.jid and categories is viewer.categories:
        return viewer
    return dataclasses.replace(viewer, jid=jid, categories=categories)


def _check_time(name: str, value: float | None) -> float | None:
    """``value`` as Unix seconds, or ``None``. Raises InvalidToolInput."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise InvalidToolInput(f"{name} must be a time in Unix seconds, got {value!r}")
    return float(value)


def _denial(memory: Memory, verb: str) -> str:
    """Why a viewer who sees ``memory`` may not ``verb`` it."""
    if memory.scope.visibility == "global" and memory.scope.owner is None:
        return f"memory {memory.id} is the agent's own; you may {verb} only what you told me"
    return f"memory {memory.id} was told by someone else; you may {verb} only what you told me"


def _live_view(memory: Memory, parts: list[tuple[str, bool]] | None) -> Memory | None:
    """``memory`` with only its live atoms as content; itself when all are live (or it
    has none: stored before atoms existed); ``None`` when none is."""
    if parts is None:
        return memory
    live = [text for text, is_live in parts if is_live]
    if len(live) == len(parts):
        return memory  # the text as it was stored
    return dataclasses.replace(memory, content=" ".join(live)) if live else None
