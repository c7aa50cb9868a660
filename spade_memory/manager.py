"""MemoryManager: one agent's memory — its stores, its retriever and its tools.

Open one per agent with ``await MemoryManager.open(jid, config)`` (or
``async with``). The manager owns the agent's SQLite base memory, its JSON
interaction memory, the background vector indexer and the retriever; it refuses
use after :meth:`aclose`.

It is the one public face of the memory; the work lives beside it: opening in
:mod:`~spade_memory.opening`, checking what callers give in
:mod:`~spade_memory.memory_input`, export and import in
:mod:`~spade_memory.transfer`, access statistics in
:mod:`~spade_memory.access_counts`; the atom methods come from
:class:`~spade_memory.recall.RecallMixin`, the upkeep ones (archive, check,
backup, rebuild, flush, stats) from :class:`~spade_memory.upkeep.UpkeepMixin`.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .access_counts import AccessRecorder
from .atoms import AtomBook
from .config import MemoryConfig
from .errors import InvalidToolInput, MemoryNotFound, StoreClosedError
from .identity import AgentIdentity
from .indexing import VectorIndexer
from .maintenance.service import Maintenance, MaintenanceStatus
from .memory_input import MemoryInput
from .models import InteractionNote, Memory, SearchResult
from .opening import build_retriever, open_manager
from .recall import RecallMixin
from .retrieval.entities import get_extractor
from .retrieval.retriever import SearchTimings
from .retrieval.tokenizer import get_tokenizer
from .storage.base import BaseMemoryStore
from .storage.graph import MemoryGraph
from .storage.graph_store import GraphStore
from .storage.interaction import InteractionStore
from .transfer import EXPORT_FORMAT, export_memory, import_memory
from .upkeep import UpkeepMixin
from .validation import check_category, check_id, check_limit, check_text

if TYPE_CHECKING:
    from .tools import MemoryTool

__all__ = ["EXPORT_FORMAT", "MemoryManager"]

logger = logging.getLogger(__name__)

_MAX_QUERY_CHARS = 2_000
_MAX_SEARCH_LIMIT = 100
_MAX_LIST_LIMIT = 1_000


class MemoryManager(RecallMixin, UpkeepMixin):
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
        self._retriever = build_retriever(
            base,
            self._tokenizer,
            config=config,
            indexer=indexer,
            graph=self._graph,
            extractor=self._extractor,
            atoms=self._atoms,
            clock=clock,
        )
        self._input = MemoryInput(config, self._extractor)
        self._closed = False
        self._access = AccessRecorder(
            base, jid=identity.jid, clock=clock, closed=lambda: self._closed
        )
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
        return await open_manager(cls, identity, config, clock)

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
        await self._access.aclose()
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
        return self._input.graph_of(memory)

    def notify_changed(self) -> None:
        """Tell the memory that maintenance changed it: drop cached searches, embed anew."""
        self._after_write()

    # -- base memory ---------------------------------------------------------

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
        new, text = self._input.new_memory(
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
        graph = (await self._input.graphs_of([new], [(entities, relations)]))[0]
        memory = await self._base.insert(new, text, graph=graph)
        self._after_write()
        return memory

    async def store_many(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[Memory]:
        """Store many memories in one transaction (all or none).

        Each item is a mapping of :meth:`store`'s arguments (``content`` required).
        """
        self._check_open()
        now = self._clock()
        prepared, explicit = self._input.items(items, now)
        graphs = await self._input.graphs_of([new for new, _ in prepared], explicit)
        memories = await self._base.insert_many(prepared, graphs=graphs)
        if memories:
            self._after_write()
        return memories

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
        changes = self._input.changes(
            content=content,
            category=category,
            context=context,
            confidence=confidence,
            importance=importance,
            metadata=metadata,
        )
        if not changes:
            return current
        text, graph = self._input.updated_index(current, changes)
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

    # -- access statistics (coalesced) ------------------------------------------

    @property
    def _touch_task(self) -> asyncio.Task[None] | None:
        """The pending write of access statistics (the coalescing timer or a retry)."""
        return self._access.task

    def _note_access(self, memory_ids: Iterable[int]) -> None:
        self._access.note(memory_ids)

    async def _write_touches(self) -> None:
        await self._access.write()

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
        return await export_memory(self._base, self._interactions, jid=self.jid)

    async def import_data(self, data: Mapping[str, Any]) -> tuple[int, int]:
        """Add memories and notes from :meth:`export` output of any agent.

        Memories whose ``uid`` already exists are skipped, so importing twice
        changes nothing. Returns ``(memories added, notes added)``.

        Raises:
            InvalidToolInput: the data is not an export; nothing was written.
        """
        self._check_open()
        return await import_memory(
            data,
            base=self._base,
            interactions=self._interactions,
            memory_input=self._input,
            clock=self._clock,
            after_write=self._after_write,
        )

    # -- tools -----------------------------------------------------------------

    def tools(self) -> builtins.list[MemoryTool]:
        """The LLM memory tools bound to this manager's categories."""
        if self._tools is None:
            from .tools import build_memory_tools

            self._tools = build_memory_tools(self.categories)
        return list(self._tools)
