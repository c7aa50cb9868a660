"""MemoryManager: one agent's memory — its stores, its retriever and its tools.

Open one per agent with ``await MemoryManager.open(jid, config)`` (or
``async with``). The manager owns the agent's SQLite base memory, its JSON
interaction memory, the background vector indexer and the retriever; it refuses
use after :meth:`aclose`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import glob
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .atoms import Atom, AtomBook, memory_graph
from .config import MemoryConfig
from .errors import InvalidToolInput, MemoryNotFound, StorageError, StoreClosedError
from .identity import AgentIdentity, resolve_inside
from .indexing import VectorIndexer
from .maintenance.consistency import ConsistencyReport
from .maintenance.service import Maintenance, MaintenanceStatus
from .models import InteractionNote, Memory, MemoryStats, SearchResult
from .retrieval.embedders import resolve_embedder
from .retrieval.entities import (
    GRAPH_VERSION,
    check_graph_input,
    get_extractor,
    needs_segmenter,
)
from .retrieval.graph import GraphRetriever
from .retrieval.retriever import Retriever, SearchTimings
from .retrieval.tokenizer import get_tokenizer
from .storage.base import BaseMemoryStore, IndexedText, NewMemory
from .storage.graph import MemoryGraph
from .storage.graph_store import GraphStore
from .storage.interaction import InteractionStore
from .storage.registry import Registry
from .validation import (
    check_category,
    check_id,
    check_limit,
    check_metadata,
    check_optional_text,
    check_text,
    check_unit,
)

if TYPE_CHECKING:
    from .tools import MemoryTool

__all__ = ["EXPORT_FORMAT", "MemoryManager"]

logger = logging.getLogger(__name__)

EXPORT_FORMAT = "spade_memory.export"
_EXPORT_VERSION = 1
_MAX_CONTEXT_CHARS = 2_000
_MAX_QUERY_CHARS = 2_000
_MAX_SEARCH_LIMIT = 100
_MAX_LIST_LIMIT = 1_000
_TOUCH_INTERVAL = 3.0
_MAX_PENDING_TOUCHES = 10_000  # accesses kept for a retry while another process holds the lock
_GRAPH_VERSION_KEY = "graph_version"
_EXTRACT_IN_THREAD = 8  # store_many batches larger than this extract in a worker thread


class MemoryManager:
    """The long-term memory of one agent. Create it with :meth:`open`."""

    def __init__(
        self,
        identity: AgentIdentity,
        config: MemoryConfig,
        *,
        base: BaseMemoryStore,
        interactions: InteractionStore,
        indexer: VectorIndexer | None,
        root: Path | None,
        clock: Callable[[], float],
    ) -> None:
        self._identity = identity
        self._config = config
        self._base = base
        self._interactions = interactions
        self._indexer = indexer
        self._root = root
        self._clock = clock
        self._tokenizer = get_tokenizer()
        self._extractor = get_extractor()
        self._graph = GraphStore(base)
        self._atoms = AtomBook(base, config.atoms)
        embedder = indexer.embedder if indexer is not None else None
        self._retriever = Retriever(
            base,
            self._tokenizer,
            config=config.retrieval,
            vectors=indexer,
            fingerprint=embedder.fingerprint if embedder is not None else None,
            dim=embedder.dim if embedder is not None else 0,
            clock=clock,
            graph=GraphRetriever(
                self._graph, self._extractor, config=config.retrieval, vectors=indexer
            ),
            hidden=self._atoms.hidden if config.atoms.hide_expired else None,
        )
        self._closed = False
        self._touches: builtins.list[int] = []
        self._touch_task: asyncio.Task[None] | None = None
        self._tools: builtins.list[MemoryTool] | None = None
        self._maintenance = Maintenance(self, config.maintenance)

    # -- lifecycle -------------------------------------------------------

    @classmethod
    async def open(
        cls,
        jid: Any,
        config: MemoryConfig | None = None,
        *,
        clock: Callable[[], float] | None = None,
    ) -> MemoryManager:
        """Open the memory of agent ``jid``.

        Args:
            jid: the agent's JID (a resource is ignored).
            config: where and how to keep the memory; default ``MemoryConfig()``.
            clock: the time source (Unix seconds), injectable for tests.

        Raises:
            InvalidAgentId: ``jid`` is not a valid ``local@domain``; nothing was touched.
            PathEscapeError: a storage path would leave the root (e.g. a symlink).
            StorageCorrupted: a file was damaged; it was quarantined.
        """
        identity = AgentIdentity.of(jid)
        config = config or MemoryConfig()
        clock = clock or time.time
        root: Path | None = None
        db_path = json_path = snapshot_path = backup_dir = None
        registry: Registry | None = None
        registered = False
        if not config.in_memory:
            root = config.resolved_root()
            await asyncio.to_thread(_make_root, root)
            db_path = resolve_inside(root, identity.database_name)
            json_path = resolve_inside(root, identity.interactions_name)
            snapshot_path = resolve_inside(root, identity.snapshot_name)
            backup_dir = resolve_inside(root, "backup")
            # files opened by name beside these (by SQLite, by the notes' lock)
            for side in ("-wal", "-shm", "-journal"):
                resolve_inside(root, identity.database_name + side)
            resolve_inside(root, f".{identity.interactions_name}.lock")
            registry = Registry(root, clock=clock)
            # Read only: a stem registered to another JID is refused before any file
            # is touched; the entry is written once the database exists (below).
            registered = await asyncio.to_thread(registry.registered, identity)
        closers: builtins.list[Callable[[], Any]] = []
        try:
            base = await BaseMemoryStore.open(
                db_path,
                agent=identity.jid,
                storage=config.storage,
                categories=config.categories,
                backup_dir=backup_dir,
                now=clock(),
                expect_existing=root is not None
                and await asyncio.to_thread(_memory_existed, root, identity, registered),
                # an empty memory's graph is up to date: no rebuild on first open
                initial_meta={_GRAPH_VERSION_KEY: str(GRAPH_VERSION)},
            )
            closers.append(base.aclose)
            if registry is not None and not registered:
                # After the database: a registered agent's memory exists (the mark
                # that tells a lost or emptied database from a new agent).
                await asyncio.to_thread(registry.register, identity)
            interactions = await InteractionStore.open(
                json_path, agent=identity.jid, clock=clock, max_note_chars=config.max_note_chars
            )
            closers.append(interactions.aclose)
            embedder = resolve_embedder(config.embedder)
            indexer = None
            if embedder is not None:
                indexer = await VectorIndexer.open(
                    base,
                    embedder,
                    snapshot_path=snapshot_path,
                    storage=config.storage,
                    graph=GraphStore(base),
                )
        except BaseException:
            for close in reversed(closers):
                with contextlib.suppress(Exception):
                    await close()
            raise
        manager = cls(
            identity,
            config,
            base=base,
            interactions=interactions,
            indexer=indexer,
            root=root,
            clock=clock,
        )
        try:
            if await base.meta_get(_GRAPH_VERSION_KEY) != str(GRAPH_VERSION):
                await manager.rebuild_graph()
        except BaseException:
            await manager.aclose()
            raise
        # A database this open created holds nothing to check (built in one
        # transaction); opening many new agents in a row skips as many checks.
        if config.maintenance.check_on_open and not base.created:
            manager._maintenance.start_background()  # the memory is usable meanwhile
        logger.debug("opened memory of %s (%s)", identity.jid, root or "in memory")
        return manager

    async def __aenter__(self) -> MemoryManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Finish pending work and close every store; idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._maintenance.aclose()
        if self._touch_task is not None:
            self._touch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._touch_task
        await self._write_touches()
        if self._indexer is not None:
            await self._indexer.aclose()
        await self._interactions.aclose()
        await self._base.aclose()
        logger.debug("closed memory of %s", self._identity.jid)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(
                f"the memory of {self._identity.jid} is closed; open a new MemoryManager"
            )

    # -- properties --------------------------------------------------------

    @property
    def jid(self) -> str:
        """The agent's normalised bare JID."""
        return self._identity.jid

    @property
    def identity(self) -> AgentIdentity:
        return self._identity

    @property
    def config(self) -> MemoryConfig:
        return self._config

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def categories(self) -> tuple[str, ...]:
        return self._config.categories

    @property
    def root(self) -> Path | None:
        """The memory root folder, or ``None`` in in-memory mode."""
        return self._root

    @property
    def last_search_timings(self) -> SearchTimings:
        """Where the time of the last search went (embedding, keyword, vector, fusion)."""
        return self._retriever.last_timings

    @property
    def base_store(self) -> BaseMemoryStore:
        """The underlying SQLite store (for maintenance tools)."""
        return self._base

    @property
    def indexer(self) -> VectorIndexer | None:
        return self._indexer

    @property
    def maintenance(self) -> Maintenance:
        """Checks, repairs, rebuilds, backups, decay and consolidation of this memory."""
        return self._maintenance

    @property
    def maintenance_status(self) -> MaintenanceStatus:
        """What maintenance is doing or did last (state, progress, last check report)."""
        return self._maintenance.status

    def now(self) -> float:
        """The memory's clock (Unix seconds; injectable through :meth:`open`)."""
        return self._clock()

    def graph_for(self, memory: Memory) -> MemoryGraph:
        """The graph and atoms a memory's text yields (for maintenance rebuilds)."""
        return self._graph_of(memory)

    def notify_changed(self) -> None:
        """Tell the memory that maintenance changed it: drop cached searches, embed anew."""
        self._after_write()

    # -- base memory ---------------------------------------------------------

    def _index_text(self, content: str, context: str | None) -> IndexedText:
        return IndexedText.of(content, context)

    def _new_memory(
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
        now: float,
    ) -> tuple[NewMemory, IndexedText]:
        content = check_text("content", content, max_chars=self._config.max_content_chars)
        context = check_optional_text("context", context, max_chars=_MAX_CONTEXT_CHARS)
        new = NewMemory(
            uid=uuid.uuid4().hex,
            category=check_category(category, self.categories),
            content=content,
            context=context,
            confidence=check_unit("confidence", confidence),
            importance=check_unit("importance", importance),
            created_at=now,
            source_conversation=check_optional_text(
                "source_conversation", source_conversation, max_chars=512
            ),
            source_sender=check_optional_text("source_sender", source_sender, max_chars=3071),
            metadata=check_metadata(metadata),
        )
        return new, self._index_text(content, context)

    def _graph_of(
        self,
        new: NewMemory | Memory,
        entities: Any = None,
        relations: Any = None,
    ) -> MemoryGraph:
        names, links = check_graph_input(entities, relations)
        extraction = self._extractor.extract(new.content, entities=names, relations=links)
        return memory_graph(
            new.content,
            extraction,
            category=new.category,
            importance=new.importance,
            config=self._config.atoms,
        )

    def _after_write(self) -> None:
        self._retriever.invalidate()
        if self._indexer is not None:
            self._indexer.notify()

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
    ) -> Memory:
        """Store one memory; returns once it is durably committed.

        It is found by keywords at once and by meaning once embedded (in the
        background; :meth:`flush` waits for that). Its entities, relations and
        atoms are extracted and written in the same transaction; ``entities``
        (names) and ``relations`` (``{"source", "relation", "target"}``) add
        ones the text does not show.

        Raises:
            InvalidToolInput: a value is invalid; nothing was written.
        """
        self._check_open()
        new, text = self._new_memory(
            content,
            category=category,
            context=context,
            confidence=confidence,
            importance=importance,
            source_conversation=source_conversation,
            source_sender=source_sender,
            metadata=metadata,
            now=self._clock(),
        )
        graph = (await self._graphs_of([new], [(entities, relations)]))[0]
        memory = await self._base.insert(new, text, graph=graph)
        self._after_write()
        return memory

    async def store_many(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[Memory]:
        """Store many memories in one transaction (all or none).

        Each item is a mapping of :meth:`store`'s arguments (``content`` required).
        """
        self._check_open()
        now = self._clock()
        prepared: builtins.list[tuple[NewMemory, IndexedText]] = []
        allowed = {
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
        }
        explicit: builtins.list[tuple[Any, Any]] = []
        for position, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidToolInput(f"item {position} must be a mapping of store() arguments")
            unknown = set(item) - allowed
            if unknown:
                raise InvalidToolInput(f"item {position} has unknown fields {sorted(unknown)}")
            if "content" not in item:
                raise InvalidToolInput(f"item {position} has no content")
            fields = dict(item)
            content = fields.pop("content")
            explicit.append((fields.pop("entities", None), fields.pop("relations", None)))
            try:
                prepared.append(self._new_memory(content, now=now, **fields))
                check_graph_input(*explicit[-1])
            except InvalidToolInput as exc:
                raise InvalidToolInput(f"item {position}: {exc}") from None
        graphs = await self._graphs_of([new for new, _ in prepared], explicit)
        memories = await self._base.insert_many(prepared, graphs=graphs)
        if memories:
            self._after_write()
        return memories

    async def _graphs_of(
        self, news: Sequence[NewMemory | Memory], explicit: Sequence[tuple[Any, Any]]
    ) -> builtins.list[MemoryGraph | None]:
        def build() -> builtins.list[MemoryGraph | None]:
            return [self._graph_of(new, *extra) for new, extra in zip(news, explicit, strict=True)]

        # Chinese text is cut by jieba (loaded on first use): off the event loop.
        if len(news) > _EXTRACT_IN_THREAD or any(needs_segmenter(new.content) for new in news):
            return await asyncio.to_thread(build)
        return build()

    async def search(
        self,
        query: str,
        *,
        limit: int = 5,
        category: str | None = None,
        categories: Sequence[str] | None = None,
        explain: bool = False,
    ) -> builtins.list[SearchResult]:
        """The memories that best match ``query``, best first.

        Args:
            query: natural-language text, in any language.
            limit: how many results at most (1 to 100).
            category: only memories of this category.
            categories: only memories of these categories (ranked in one search, so
                their scores compare); not together with ``category``.
            explain: attach a :class:`ScoreExplanation` to every result.
        """
        self._check_open()
        query = check_text("query", query, max_chars=_MAX_QUERY_CHARS)
        limit = check_limit("limit", limit, low=1, high=_MAX_SEARCH_LIMIT)
        categories = self._check_categories(category, categories)
        results = await self._retriever.search(
            query, limit=limit, categories=categories, explain=explain
        )
        self._note_access(result.memory.id for result in results)
        return results

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
        self, category: str | None = None, *, limit: int = 20, offset: int = 0
    ) -> builtins.list[Memory]:
        """Active memories, newest first, optionally of one category."""
        self._check_open()
        categories = None if category is None else [check_category(category, self.categories)]
        limit = check_limit("limit", limit, low=1, high=_MAX_LIST_LIMIT)
        offset = check_limit("offset", offset, low=0, high=2**62)
        return await self._base.list(categories=categories, limit=limit, offset=offset)

    async def recent(self, limit: int = 10) -> builtins.list[Memory]:
        """The newest active memories."""
        return await self.list(limit=limit)

    async def get(self, memory_id: int) -> Memory:
        """One memory by id. Raises MemoryNotFound."""
        self._check_open()
        memory = await self._base.get(check_id(memory_id))
        if memory is None:
            raise MemoryNotFound(f"{self.jid} has no memory with id {memory_id}")
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
    ) -> Memory:
        """Change some fields of a memory; a new content is re-indexed and re-embedded."""
        self._check_open()
        current = await self.get(memory_id)
        changes: dict[str, Any] = {}
        if content is not None:
            changes["content"] = check_text(
                "content", content, max_chars=self._config.max_content_chars
            )
        if category is not None:
            changes["category"] = check_category(category, self.categories)
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
        if not changes:
            return current
        text = None
        if "content" in changes or "context" in changes:
            text = self._index_text(
                changes.get("content", current.content), changes.get("context", current.context)
            )
        graph = None
        if "content" in changes:
            graph = self._graph_of(
                NewMemory(
                    uid=current.uid,
                    category=changes.get("category", current.category),
                    content=changes["content"],
                    context=None,
                    confidence=current.confidence,
                    importance=changes.get("importance", current.importance),
                    created_at=current.created_at,
                )
            )
        updated = await self._base.update(
            current.id, changes, text=text, now=self._clock(), graph=graph
        )
        if updated is None:
            raise MemoryNotFound(f"{self.jid} has no memory with id {memory_id}")
        if "content" in changes and self._indexer is not None:
            self._indexer.remove([current.id])
        self._after_write()
        return updated

    async def forget(self, memory_id: int) -> None:
        """Delete a memory, its index entries and its vector. Raises MemoryNotFound."""
        self._check_open()
        memory_id = check_id(memory_id)
        if not await self._base.delete(memory_id):
            raise MemoryNotFound(f"{self.jid} has no memory with id {memory_id}")
        if self._indexer is not None:
            self._indexer.remove([memory_id])
        self._after_write()

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
        """Check this memory's indexes against its memories; ``repair`` mends what is off."""
        self._check_open()
        return await self._maintenance.check(repair=repair, deep=deep)

    async def backup(self) -> Path:
        """Back up this memory into ``backup/`` under the root; returns the file.

        Raises:
            ConfigError: the memory is in-memory.
        """
        self._check_open()
        return await self._maintenance.backup()

    # -- graph and atoms ----------------------------------------------------------

    async def live_atoms(self, memory_id: int) -> builtins.list[Atom]:
        """The atoms of a memory that are live now, in order (what to recall of it).

        A memory stored before atoms existed has none; recall its whole content.
        """
        self._check_open()
        return await self._atoms.live(check_id(memory_id), self._clock())

    async def recall(
        self,
        query: str,
        *,
        limit: int = 5,
        category: str | None = None,
        categories: Sequence[str] | None = None,
    ) -> builtins.list[SearchResult]:
        """:meth:`search` for prompt assembly: each memory carries only its live atoms.

        A memory whose atoms are all live comes back as stored; one with some atoms
        no longer live comes back with the text of its live ones as content, in
        order (a superseded or lapsed sentence is left out, and a memory with none
        live is left out); one stored before atoms existed comes back whole.
        """
        results = await self.search(query, limit=limit, category=category, categories=categories)
        found = await self._atoms.atoms([r.memory.id for r in results], self._clock())
        recalled: builtins.list[SearchResult] = []
        for result in results:
            memory = _live_view(result.memory, found.get(result.memory.id))
            if memory is result.memory:
                recalled.append(result)
            elif memory is not None:
                recalled.append(dataclasses.replace(result, memory=memory))
        return recalled

    async def recall_memory(self, memory_id: int) -> Memory | None:
        """One memory as :meth:`recall` would give it: only its live atoms, and
        ``None`` when it is not active or nothing of it is live. Raises MemoryNotFound."""
        memory = await self.get(memory_id)
        if memory.status != "active":
            return None
        found = await self._atoms.atoms([memory.id], self._clock())
        return _live_view(memory, found.get(memory.id))

    async def atoms(self, memory_id: int) -> builtins.list[Atom]:
        """Every atom of a memory with its status now (active, dormant, superseded, ...)."""
        self._check_open()
        found = await self._atoms.atoms([check_id(memory_id)], self._clock())
        return found.get(memory_id, [])

    async def forget_atom(self, atom_id: int) -> Atom:
        """Mark one atom forgotten, keeping its memory. Raises MemoryNotFound."""
        self._check_open()
        atom = await self._atoms.forget(check_id(atom_id))
        self._after_write()
        return atom

    async def refresh_atoms(self) -> dict[str, int]:
        """Record atoms whose lifetime lapsed as dormant or expired; returns the counts."""
        self._check_open()
        changed = await self._atoms.refresh(self._clock())
        if any(changed.values()):
            self._retriever.invalidate()
        return changed

    async def rebuild_graph(self, *, batch: int = 200) -> int:
        """Extract the graph and atoms of every memory again; returns how many.

        Runs on open when the stored graph was made by another extraction version
        (or before graphs existed). Builds into a shadow that replaces the live
        graph once complete (see :mod:`spade_memory.maintenance.graph_rebuild`):
        forgotten atoms stay forgotten, unchanged graph vectors are kept, and an
        interrupted rebuild resumes.
        """
        self._check_open()
        (result,) = await self._maintenance.rebuild("graph", batch=batch)
        if result.processed:
            logger.info("rebuilt the graph of %d memories of %s", result.processed, self.jid)
        return result.processed

    async def flush(self) -> None:
        """Wait until background work (embedding, access statistics) has caught up."""
        self._check_open()
        if self._indexer is not None:
            await self._indexer.flush()
        await self._write_touches()

    async def stats(self) -> MemoryStats:
        """Counts of this agent's memories, notes and vectors."""
        self._check_open()
        by_category = await self._base.counts_by("category")
        by_status = await self._base.counts_by("status")
        embedded = pending = 0
        if self._indexer is not None:
            fingerprint = self._indexer.embedder.fingerprint
            embedded = len(await self._base.embedding_ids(fingerprint))
            pending = await self._base.count_pending_embeddings(fingerprint)
        conversations, notes = await self._interactions.counts()
        return MemoryStats(
            agent=self.jid,
            total=sum(by_status.values()),
            by_category=by_category,
            by_status=by_status,
            embedded=embedded,
            pending_embeddings=pending,
            conversations=conversations,
            notes=notes,
            in_memory=self._config.in_memory,
        )

    # -- access statistics (coalesced) ------------------------------------------

    def _note_access(self, memory_ids: Iterable[int]) -> None:
        self._touches.extend(memory_ids)
        if self._touches and (self._touch_task is None or self._touch_task.done()):
            self._touch_task = asyncio.create_task(self._touch_later())

    async def _touch_later(self) -> None:
        await asyncio.sleep(_TOUCH_INTERVAL)
        await self._write_touches()

    async def _write_touches(self) -> None:
        if not self._touches or self._base.closed:
            return
        pending, self._touches = self._touches, []
        try:
            await self._base.touch(pending, self._clock())
        except StoreClosedError:
            return
        except asyncio.CancelledError:
            self._touches = [*pending, *self._touches]  # aclose writes them
            raise
        except StorageError as exc:
            # Busy past busy_timeout_ms (other processes writing the same agent): the
            # accesses are kept and tried again after the next interval.
            self._touches = [*pending, *self._touches][-_MAX_PENDING_TOUCHES:]
            logger.warning("could not record memory accesses for %s yet: %s", self.jid, exc)
            if not self._closed:
                self._touch_task = asyncio.create_task(self._touch_later())
        except Exception:
            logger.warning("could not record memory accesses for %s", self.jid, exc_info=True)

    # -- interaction memory -----------------------------------------------------

    async def add_note(
        self, conversation_id: str, content: str, *, author: str | None = None
    ) -> InteractionNote:
        """Add a note about a conversation; returns once it is durable."""
        self._check_open()
        return await self._interactions.add(conversation_id, content, author=author)

    async def notes(
        self, conversation_id: str, *, limit: int | None = None
    ) -> builtins.list[InteractionNote]:
        """The notes of a conversation, oldest first (``limit`` keeps the newest)."""
        self._check_open()
        return await self._interactions.get(conversation_id, limit=limit)

    async def clear_notes(self, conversation_id: str) -> int:
        """Remove every note of a conversation; returns how many were removed."""
        self._check_open()
        return await self._interactions.clear(conversation_id)

    async def conversations(self) -> builtins.list[str]:
        """The ids of the conversations that have notes."""
        self._check_open()
        return await self._interactions.conversations()

    # -- export and import -------------------------------------------------------

    async def export(self) -> dict[str, Any]:
        """Everything this agent remembers, as a JSON-ready dict."""
        self._check_open()
        memories = [memory.to_dict() async for memory in self._base.iter_all()]
        return {
            "format": EXPORT_FORMAT,
            "version": _EXPORT_VERSION,
            "agent": self.jid,
            "memories": memories,
            "notes": await self._interactions.export(),
        }

    async def import_data(self, data: Mapping[str, Any]) -> tuple[int, int]:
        """Add memories and notes from :meth:`export` output of any agent.

        Memories whose ``uid`` already exists are skipped, so importing twice
        changes nothing. Returns ``(memories added, notes added)``.

        Raises:
            InvalidToolInput: the data is not an export; nothing was written.
        """
        self._check_open()
        if not isinstance(data, Mapping) or data.get("format") != EXPORT_FORMAT:
            raise InvalidToolInput(f"not a spade_memory export (format must be {EXPORT_FORMAT!r})")
        if data.get("version") != _EXPORT_VERSION:
            raise InvalidToolInput(f"unsupported export version {data.get('version')!r}")
        raw_memories = data.get("memories", [])
        raw_notes = data.get("notes", {})
        if not isinstance(raw_memories, list) or not isinstance(raw_notes, Mapping):
            raise InvalidToolInput("an export holds a list of memories and a mapping of notes")
        prepared: builtins.list[tuple[NewMemory, IndexedText]] = []
        seen: set[str] = set()
        for position, raw in enumerate(raw_memories):
            try:
                new, text = self._imported(raw)
            except (InvalidToolInput, KeyError, TypeError, ValueError) as exc:
                raise InvalidToolInput(
                    f"memory {position} of the export is invalid: {exc}"
                ) from None
            if new.uid in seen or await self._base.get_by_uid(new.uid) is not None:
                continue
            seen.add(new.uid)
            prepared.append((new, text))
        graphs = await self._graphs_of([new for new, _ in prepared], [(None, None)] * len(prepared))
        # Atoms start their lives now: an export does not carry them, and an old
        # memory moved to a new host should not arrive already expired.
        added = await self._base.insert_many(prepared, graphs=graphs, graph_time=self._clock())
        if added:
            self._after_write()
        notes = await self._interactions.import_notes(raw_notes) if raw_notes else 0
        return len(added), notes

    def _imported(self, raw: Any) -> tuple[NewMemory, IndexedText]:
        if not isinstance(raw, Mapping):
            raise TypeError("not an object")
        new, text = self._new_memory(
            raw["content"],
            category=raw.get("category", "fact"),
            context=raw.get("context"),
            confidence=raw.get("confidence", 1.0),
            importance=raw.get("importance", 0.5),
            source_conversation=raw.get("source_conversation"),
            source_sender=raw.get("source_sender"),
            metadata=raw.get("metadata") or {},
            now=float(raw.get("created_at", self._clock())),
        )
        uid = raw.get("uid") or new.uid
        if not isinstance(uid, str) or not 1 <= len(uid) <= 64:
            raise ValueError("uid must be a string of 1 to 64 characters")
        status = raw.get("status", "active")
        if status not in ("active", "archived"):
            raise ValueError(f"status must be active or archived, got {status!r}")
        last_accessed = raw.get("last_accessed")
        return (
            NewMemory(
                uid=uid,
                category=new.category,
                content=new.content,
                context=new.context,
                confidence=new.confidence,
                importance=new.importance,
                created_at=new.created_at,
                source_conversation=new.source_conversation,
                source_sender=new.source_sender,
                metadata=new.metadata,
                status=status,
                updated_at=float(raw.get("updated_at", new.created_at)),
                last_accessed=None if last_accessed is None else float(last_accessed),
                access_count=int(raw.get("access_count", 0)),
            ),
            text,
        )

    # -- tools -----------------------------------------------------------------

    def tools(self) -> builtins.list[MemoryTool]:
        """The LLM memory tools bound to this manager's categories."""
        if self._tools is None:
            from .tools import build_memory_tools

            self._tools = build_memory_tools(self.categories)
        return list(self._tools)


def _live_view(memory: Memory, atoms: builtins.list[Atom] | None) -> Memory | None:
    """``memory`` with only its live atoms as content; itself when all are live (or it
    has none: stored before atoms existed); ``None`` when none is."""
    if atoms is None:
        return memory
    live = [atom.text for atom in atoms if atom.live]
    if len(live) == len(atoms):
        return memory  # the text as it was stored
    return dataclasses.replace(memory, content=" ".join(live)) if live else None


def _memory_existed(root: Path, identity: AgentIdentity, registered: bool) -> bool:
    """Whether the agent's memory was created before, so its database must hold a schema.

    An agent is registered in the root's registry right after its new database
    is created (an interaction file, written by the first note, shows it too,
    as it did in earlier versions, which created that file on open). A database
    quarantined before means the agent was already told its memory is gone, and
    may start afresh.
    """
    if not registered and not (root / identity.interactions_name).exists():
        return False
    told = root.glob(glob.escape(identity.database_name) + ".corrupt-*")
    return next(told, None) is None


def _make_root(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not os.access(root, os.W_OK):
        raise PermissionError(f"memory root {root} is not writable")
