"""spade_llm's ``MemoryBackend`` on top of a spade_memory :class:`MemoryManager`.

``AgentBaseMemory(jid, backend=SpadeMemoryBackend(...))`` keeps spade_llm's agent
base memory in spade_memory: stores go through the manager (validation, keyword
index, graph, vectors) and searches through its dual-route retriever, so
``search_memories("database password rotation")`` finds "The staging database
password rotates every 30 days", which a substring match misses.

How spade_llm's ``MemoryEntry`` maps to a spade_memory :class:`Memory`:

=================  ==========================================================
``id`` (str)       ``uid`` (kept as given, 1 to 64 characters)
``agent_id``       the agent whose memory keeps it (see "Agents" below)
``category``       ``category`` (one of the memory's categories)
``content``        ``content``
``context``        ``context``
``confidence``     ``confidence``
``created_at``     ``created_at`` (a naive datetime is local time, as spade_llm
                   makes them; entries come back as naive local datetimes)
``last_accessed``  ``last_accessed`` (never accessed: the creation time, as in
                   spade_llm)
``access_count``   ``access_count``
=================  ==========================================================

Entries come back as :class:`SpadeMemoryEntry`, a ``MemoryEntry`` that also
carries ``memory_id``, ``importance``, ``status``, ``metadata`` and the search
``score``; storing one keeps its importance and metadata.

Where spade_llm's contract cannot be met exactly, the nearest behaviour:

- ``store_memory`` of an id that exists updates that memory (spade_llm replaces
  the row); its creation time is kept, and a ``None`` context does not clear one.
- ``search_memories`` ranks by relevance (spade_llm: substring match, most
  recently accessed first); a blank query gives the recent memories, and only the
  first 2,000 characters of a long one are searched. The search
  itself records one access of each hit, so the ``update_access`` that
  ``AgentBaseMemory`` sends right after for the same hits is not counted twice.
- access counts show at once (as spade_llm's); they are written to the database a
  few seconds later, with the other accesses of that moment, in one transaction.
- ``get_memories_by_category`` lists newest stored first; an unknown category
  gives ``[]``. Limits are capped at 100 (search) and 1000 (listings).
- content is limited to ``MemoryConfig.max_content_chars``: 10,000 characters in
  the memories the backend opens with its default configuration; a given manager
  or configuration keeps its own limit (spade_llm sets none).
- archived memories are neither searched nor listed (they still count in stats).
- nothing is created on disk until the first use (spade_llm makes its folder when
  the backend is constructed).

Agents: a backend built on a manager, or with ``jid``, keeps one agent's memory;
calls for another ``agent_id`` find nothing and storing for it is refused. With
``any_agent=True`` (or spade_llm's ``db_path``) it serves every agent id it is
given, each in its own memory under the same root, opened on first use;
``delete_memory`` and ``update_access`` (which carry no agent id) find the ids of
the agents served since the last ``cleanup()``. ``db_path`` tells where the memories are.

Lifecycle: given an open manager, the backend uses it and never closes it.
Otherwise it opens its memories (in ``initialize()`` for ``jid``, on first use
for ``any_agent``) and closes them all in ``cleanup()``; using it again opens them
again (in in-memory mode that is a new, empty memory).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..config import MemoryConfig, default_root
from ..errors import (
    ConfigError,
    InvalidAgentId,
    InvalidToolInput,
    StoreClosedError,
)
from ..identity import AgentIdentity, normalize_jid
from ..limits import LIMITS
from ..maintenance.transfer import import_export
from ..manager import EXPORT_FORMAT, MemoryManager
from ..models import Memory
from ..storage.spade_llm_files import datetime_of
from ..validation import (
    check_category,
    check_metadata,
    check_optional_text,
    check_text,
    check_unit,
)
from .spade_llm_tools import import_spade_llm, require_spade_llm

__all__ = ["SpadeMemoryBackend", "SpadeMemoryEntry"]

logger = logging.getLogger(__name__)

_IMPORT_VERSION = 1  # the version of spade_memory's export format this module writes
_MAX_SEARCH = LIMITS.search_limit
_MAX_LIST = LIMITS.list_limit
_MAX_CONTEXT_CHARS = LIMITS.context_chars
_MAX_QUERY_CHARS = LIMITS.query_chars
_SPADE_LLM_CONTENT_CHARS = 10_000  # default content limit of the memories opened here
_IN_RAM = ":memory:"

# The memories backends opened and have not closed: held here so that one a program
# left open (spade_llm's agents rarely call cleanup) is closed at the end of its event
# loop, awaited there, and never half-closed by a collection racing the loop's end.
_OPENED: set[MemoryManager] = set()


def _held(manager: MemoryManager) -> MemoryManager:
    """Hold ``manager`` until it closes (the closed ones are let go here)."""
    _OPENED.difference_update({m for m in _OPENED if m.closed})
    _OPENED.add(manager)
    return manager

_EntryBase: Any
_BackendBase: Any
try:
    _backends = import_spade_llm("spade_llm.memory.backends.base")
    _EntryBase, _BackendBase = _backends.MemoryEntry, _backends.MemoryBackend
except ImportError:  # spade_llm is an optional extra; require_spade_llm() explains
    _EntryBase = _BackendBase = object


@dataclass
class SpadeMemoryEntry(_EntryBase):  # type: ignore[misc]
    """A spade_llm ``MemoryEntry`` with the spade_memory fields it has no place for.

    Attributes:
        memory_id: the memory's local id in spade_memory (``id`` is its uid).
        importance: 0 to 1; kept when the entry is stored again.
        status: ``active`` or ``archived``.
        metadata: JSON-ready metadata; kept when the entry is stored again.
        score: the search score (higher is better); ``None`` outside a search.
    """

    agent_id: str
    category: str
    content: str
    context: str | None = None
    confidence: float = 1.0
    id: str | None = None
    created_at: datetime | None = None
    last_accessed: datetime | None = None
    access_count: int = 0
    memory_id: int | None = None
    importance: float = 0.5
    status: str = "active"
    metadata: dict[str, Any] = field(default_factory=dict)
    score: float | None = None


def _timestamp(name: str, value: Any, default: float) -> float:
    """Seconds since the epoch of an entry's time, kept within the times a memory
    may carry (1970 to 9999-12-30: spade_llm takes any ``datetime``)."""
    if value is None:
        return default
    if isinstance(value, datetime):
        try:
            seconds = value.timestamp()
        except (OverflowError, OSError, ValueError):
            seconds = 0.0 if value.year < 1970 else LIMITS.latest_time
    elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        seconds = float(value)
    else:
        raise InvalidToolInput(f"{name} must be a datetime, got {type(value).__name__}")
    return min(max(seconds, 0.0), LIMITS.latest_time)


def _count(limit: Any) -> int:
    """A ``limit`` as spade_llm's SQL takes it (``"5"`` is 5)."""
    try:
        return int(limit)
    except (TypeError, ValueError):
        raise InvalidToolInput(f"limit must be a whole number, got {limit!r}") from None


class SpadeMemoryBackend(_BackendBase):  # type: ignore[misc]
    """spade_llm's ``MemoryBackend`` over spade_memory memories.

    Args:
        manager: an open manager to use (the caller closes it).
        jid: instead of ``manager``: the agent whose memory the backend opens in
            ``initialize()`` and closes in ``cleanup()``.
        root: the memory root of the memories the backend opens (default
            ``config.root``).
        config: the configuration of the memories the backend opens (default
            ``MemoryConfig(max_content_chars=10_000)``, spade_llm's limit; a
            configuration given keeps its own ``max_content_chars``, 8,000 unless
            it sets another; ``MemoryConfig(in_memory=True)`` keeps them in RAM).
        any_agent: instead of ``manager`` and ``jid``: serve every agent id it is
            given, each in its own memory under ``root``, opened on first use and
            all closed by ``cleanup()``.
        db_path: spade_llm's ``SQLiteMemoryBackend(db_path)``: ``any_agent`` with
            the memories in the folder ``db_path`` (``":memory:"``: in RAM).

    Raises:
        ImportError: spade_llm is not installed.
        ConfigError: not exactly one of ``manager``, ``jid``, ``any_agent`` and
            ``db_path`` was given, or ``root`` or ``config`` with ``manager``, or an
            empty ``db_path`` or ``root`` (it would name the working directory).
        InvalidAgentId: ``jid`` is not a valid JID; nothing was touched.
    """

    def __init__(
        self,
        manager: MemoryManager | None = None,
        *,
        jid: str | None = None,
        root: Path | str | None = None,
        config: MemoryConfig | None = None,
        any_agent: bool = False,
        db_path: Path | str | None = None,
    ) -> None:
        require_spade_llm()
        chosen = [manager is not None, jid is not None, any_agent, db_path is not None]
        if sum(chosen) > 1 or (manager is not None and (root is not None or config is not None)):
            raise ConfigError(
                "give one of: an open manager, a jid (with root or config), any_agent=True "
                "or db_path; not both"
            )
        if not any(chosen):
            raise ConfigError(
                "give an open MemoryManager, the jid of the agent to open, any_agent=True "
                "or spade_llm's db_path"
            )
        config = config or MemoryConfig(max_content_chars=_SPADE_LLM_CONTENT_CHARS)
        self._db_path: Path | str | None = None
        if db_path is not None:
            if isinstance(db_path, str) and not db_path.strip():
                raise ConfigError(
                    f"db_path must name a folder (or {_IN_RAM!r}: in RAM), got {db_path!r}"
                )
            if str(db_path) == _IN_RAM:
                self._db_path = _IN_RAM
                config = dataclasses.replace(config, in_memory=True)
            else:
                self._db_path = Path(db_path)
                root = self._db_path
        if root is not None:
            config = dataclasses.replace(config, root=root)
        self._config = config
        self._manager = manager
        self._owns = manager is None
        self._any = any_agent or db_path is not None
        self._jid = (
            manager.jid
            if manager is not None
            else None
            if jid is None
            else AgentIdentity.of(jid).jid
        )
        self._managers: dict[str, MemoryManager] = {}  # of any_agent, by bare JID
        self._lock = asyncio.Lock()
        self._counted: set[str] = set()

    @property
    def jid(self) -> str | None:
        """The agent whose memory this is (normalised bare JID); ``None`` with
        ``any_agent`` or ``db_path``."""
        return self._jid

    @property
    def db_path(self) -> Path | str:
        """Where the memories are: the ``db_path`` given, else the agent's database
        file or, with ``any_agent``, the memory root; ``":memory:"`` in RAM."""
        if self._db_path is not None:
            return self._db_path
        config = self._manager.config if self._manager is not None else self._config
        if config.in_memory:
            return _IN_RAM
        opened = self._manager.root if self._manager is not None else None
        root = Path(opened or config.root or default_root())
        if self._jid is None:
            return root
        return root / AgentIdentity.of(self._jid).database_name

    @property
    def manager(self) -> MemoryManager:
        """The manager in use (of the one agent served).

        Raises:
            StoreClosedError: the backend opens its own and is not initialised.
            ConfigError: the backend serves any agent (see :meth:`manager_of`).
        """
        if self._any:
            raise ConfigError("this backend serves any agent; use manager_of(agent_id)")
        if self._manager is None or self._manager.closed:
            raise StoreClosedError(
                f"the memory of {self._jid} is not open; call initialize() first"
            )
        return self._manager

    def __repr__(self) -> str:
        if self._any:
            return f"<SpadeMemoryBackend any agent, {len(self._managers)} open>"
        state = "open" if self._manager is not None and not self._manager.closed else "closed"
        return f"<SpadeMemoryBackend {self._jid} {state}>"

    # -- lifecycle ------------------------------------------------------------

    async def initialize(self) -> None:
        """Open the memory if this backend owns it; idempotent. With ``any_agent``,
        each agent's memory opens on its first use.

        Raises:
            StoreClosedError: the manager this backend was given is closed.
        """
        if self._any:
            return
        async with self._lock:
            if self._manager is not None and not self._manager.closed:
                return
            if not self._owns:
                raise StoreClosedError(
                    f"the memory of {self._jid} given to this backend was closed; "
                    "open a new MemoryManager and a new backend"
                )
            assert self._jid is not None
            self._manager = _held(await MemoryManager.open(self._jid, self._config))
            self._counted.clear()
            logger.debug("opened the memory of %s for spade_llm", self._jid)

    async def cleanup(self) -> None:
        """Close the memories this backend opened; a given manager stays open."""
        async with self._lock:
            opened, self._managers = list(self._managers.values()), {}
            if self._owns and self._manager is not None:
                opened.append(self._manager)
                self._manager = None
            self._counted.clear()
            for manager in opened:
                await manager.aclose()
                _OPENED.discard(manager)

    async def manager_of(self, agent_id: Any) -> MemoryManager | None:
        """The open memory of ``agent_id`` (opened now if needed); ``None`` when the
        backend does not keep that agent's memory (another agent, or not a JID)."""
        if not self._any:
            if not self._is_mine(agent_id):
                return None
            if self._manager is None or self._manager.closed:
                await self.initialize()
            return self.manager
        try:
            jid = normalize_jid(agent_id)
        except InvalidAgentId:
            return None
        manager = self._managers.get(jid)
        if manager is not None and not manager.closed:
            return manager
        async with self._lock:
            manager = self._managers.get(jid)
            if manager is None or manager.closed:
                manager = _held(await MemoryManager.open(jid, self._config))
                self._managers[jid] = manager
                logger.debug("opened the memory of %s for spade_llm", jid)
            return manager

    async def _holder(self, memory_id: Any) -> tuple[MemoryManager, Memory] | None:
        """The memory of spade_llm id ``memory_id`` and the manager holding it."""
        if not isinstance(memory_id, str) or not memory_id:
            return None
        if not self._any:
            manager = await self.manager_of(self._jid)
            managers = [] if manager is None else [manager]
        else:
            managers = [m for m in self._managers.values() if not m.closed]
        for manager in managers:
            memory = await manager.engine.base.get_by_uid(memory_id)
            if memory is not None:
                return manager, memory
        return None

    # -- mapping ---------------------------------------------------------------

    def _is_mine(self, agent_id: Any) -> bool:
        try:
            return normalize_jid(agent_id) == self._jid
        except InvalidAgentId:
            return False

    def _entry(self, memory: Memory, agent_id: str, score: float | None = None) -> Any:
        accessed = memory.last_accessed if memory.last_accessed is not None else memory.created_at
        return SpadeMemoryEntry(
            agent_id=agent_id,
            category=memory.category,
            content=memory.content,
            context=memory.context,
            confidence=memory.confidence,
            id=memory.uid,
            created_at=datetime_of(memory.created_at),
            last_accessed=datetime_of(accessed),
            access_count=memory.access_count,
            memory_id=memory.id,
            importance=memory.importance,
            status=memory.status,
            metadata=dict(memory.metadata),
            score=score,
        )

    def _record(self, entry: Any, manager: MemoryManager) -> dict[str, Any]:
        """The fields of a spade_llm entry as one memory of spade_memory's export format."""
        uid = entry.id if entry.id is not None else str(uuid.uuid4())
        if not isinstance(uid, str) or not 1 <= len(uid) <= 64 or not uid.strip():
            raise InvalidToolInput(
                f"a memory id must be a string of 1 to 64 characters; got {uid!r}"
            )
        now = manager.now()
        created = _timestamp("created_at", entry.created_at, now)
        accessed = entry.last_accessed
        count = entry.access_count
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidToolInput(f"access_count must be an integer >= 0; got {count!r}")
        return {
            "uid": uid,
            "category": check_category(entry.category, manager.categories),
            "content": check_text(
                "content", entry.content, max_chars=manager.config.max_content_chars
            ),
            "context": check_optional_text("context", entry.context, max_chars=_MAX_CONTEXT_CHARS),
            "confidence": check_unit("confidence", entry.confidence),
            "importance": check_unit("importance", getattr(entry, "importance", 0.5)),
            "metadata": check_metadata(getattr(entry, "metadata", None)),
            "created_at": created,
            "updated_at": created,
            "last_accessed": None if accessed is None else _timestamp("last_accessed", accessed, 0),
            "access_count": count,
        }

    # -- writes ------------------------------------------------------------------

    async def store_memory(self, entry: Any) -> str:
        """Store a spade_llm ``MemoryEntry``; returns its id: the entry's, or, when the
        entry copies an active memory held already (as ``MemoryManager.store``
        compares them), that memory's, which it reinforced instead.

        Raises:
            InvalidToolInput: a field is invalid or the entry is of an agent this
                backend does not keep; nothing was written.
        """
        agent_id = getattr(entry, "agent_id", None)
        manager = await self.manager_of(agent_id)
        if manager is None:
            raise InvalidToolInput(
                f"this backend keeps the memory of {self._jid}, not of {agent_id!r}; give "
                "each agent its own backend, or use SpadeMemoryBackend(any_agent=True)"
                if self._jid is not None
                else f"agent_id must be a JID such as alice@localhost, got {agent_id!r}"
            )
        record = self._record(entry, manager)
        manager.engine.check_open()
        imported = await import_export(  # skips a uid it holds already
            {
                "format": EXPORT_FORMAT,
                "version": _IMPORT_VERSION,
                "agent": manager.jid,
                "memories": [record],
                "notes": {},
            },
            manager.engine,
        )
        uid = imported.held[record["uid"]]
        if not imported.memories and uid == record["uid"]:  # the id was there: update it
            existing = await manager.engine.base.get_by_uid(uid)
            if existing is not None:
                await manager.update(
                    existing.id,
                    content=record["content"],
                    category=record["category"],
                    context=record["context"],
                    confidence=record["confidence"],
                    importance=record["importance"],
                    metadata=record["metadata"] or None,
                )
        # a copy of a memory held already reinforced it: the id is that memory's
        return uid

    async def delete_memory(self, memory_id: str) -> bool:
        """Delete a memory by id; ``False`` when there is none (with ``any_agent``:
        none in the memories of the agents served since the last ``cleanup()``)."""
        self._counted.discard(memory_id)
        found = await self._holder(memory_id)
        if found is None:
            return False
        manager, memory = found
        await manager.forget(memory.id)
        return True

    async def update_access(self, memory_id: str) -> None:
        """Record one access of a memory (unless its search recorded it already);
        the count shows at once, the write is coalesced with the others."""
        if memory_id in self._counted:
            self._counted.discard(memory_id)
            return
        found = await self._holder(memory_id)
        if found is not None:
            manager, memory = found
            manager.engine.access.note([memory.id])

    # -- reads -------------------------------------------------------------------

    async def search_memories(self, agent_id: str, query: str, limit: int = 10) -> list[Any]:
        """The memories that best match ``query``, best first (our retriever).

        Raises:
            InvalidToolInput: the query is not text or is too long.
        """
        limit = _count(limit)
        manager = await self.manager_of(agent_id)
        if manager is None or limit < 1:
            return []
        if isinstance(query, str) and not query.strip():
            return await self.get_recent_memories(agent_id, limit)
        if isinstance(query, str):
            query = query[:_MAX_QUERY_CHARS]  # spade_llm may pass a whole conversation
        results = await manager.search(query, limit=min(int(limit), _MAX_SEARCH))
        self._counted = {result.memory.uid for result in results}
        return [self._entry(r.memory, agent_id, score=r.score) for r in results]

    async def get_memories_by_category(
        self, agent_id: str, category: str, limit: int = 50
    ) -> list[Any]:
        """Active memories of one category, newest stored first."""
        limit = _count(limit)
        manager = await self.manager_of(agent_id)
        if manager is None or category not in manager.categories or limit < 1:
            return []
        memories = await manager.list(category, limit=min(int(limit), _MAX_LIST))
        return [self._entry(memory, agent_id) for memory in memories]

    async def get_recent_memories(self, agent_id: str, limit: int = 10) -> list[Any]:
        """Active memories, most recently accessed (or stored) first, counting the
        accesses not yet written."""
        limit = _count(limit)
        manager = await self.manager_of(agent_id)
        if manager is None or limit < 1:
            return []
        limit = min(limit, _MAX_LIST)
        base, access = manager.engine.base, manager.engine.access
        pending = access.pending()
        ids = await base.recent_ids(limit + len(pending))
        found = await base.get_many(dict.fromkeys([*ids, *pending]))
        memories = [m for m in access.merged_all(found.values()) if m.status == "active"]
        memories.sort(key=lambda m: (m.last_accessed or m.created_at, m.id), reverse=True)
        return [self._entry(memory, agent_id) for memory in memories[:limit]]

    async def get_memory_stats(self, agent_id: str) -> dict[str, Any]:
        """spade_llm's statistics (``total_memories``, ``category_counts``,
        ``oldest_memory``, ``newest_memory`` as ISO text) plus spade_memory's counts."""
        manager = await self.manager_of(agent_id)
        if manager is None:
            return {
                "total_memories": 0,
                "category_counts": {},
                "oldest_memory": None,
                "newest_memory": None,
            }
        stats = await manager.stats()
        oldest, newest = await manager.engine.base.created_range()
        return {
            "total_memories": stats.total,
            "category_counts": dict(stats.by_category),
            "oldest_memory": None if oldest is None else datetime_of(oldest).isoformat(),
            "newest_memory": None if newest is None else datetime_of(newest).isoformat(),
            "status_counts": dict(stats.by_status),
            "embedded": stats.embedded,
            "pending_embeddings": stats.pending_embeddings,
            "pending_derivations": stats.pending_derivations,
            "in_memory": stats.in_memory,
        }
