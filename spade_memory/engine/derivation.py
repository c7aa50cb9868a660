"""The derivation pipeline: graph rows and atoms written behind the acknowledgement.

With ``StorageConfig.derive_in_background`` a store commits the memory, its
keyword index and a durable mark (:mod:`spade_memory.storage.derivation`); this
pipeline then reads the marked memories oldest first, extracts their entities,
relations and atoms in a worker thread (the event loop keeps answering searches),
and writes each batch's graphs in one short transaction that clears their marks.
After each batch the vector indexer is woken to embed the new graph entries and
searches are told the memory changed. A crash between an acknowledgement and its
derivation leaves the mark, and the next open derives the memory.

Until a memory is derived, the graph route does not know it (the document route
finds it) and it has no atoms, so recall gives it whole. A claim it makes must
still win over older atoms it will supersede: :meth:`Deriver.pending_claims` gives
recall the graphs of the marked memories newer than what it recalls (extracted
once, kept for the pipeline to write).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from ..errors import StorageCorrupted, StorageError, StoreClosedError
from ..models import Memory
from ..storage.base import BaseMemoryStore
from ..storage.derivation import PendingMemory
from ..storage.scope_filter import told_in_one_scope
from ..text.atoms import Atom
from ..text.extraction import needs_segmenter
from ..text.graph import MemoryGraph
from .memory_input import MemoryInput

__all__ = [
    "GATHER_AT_MOST_SECONDS",
    "GATHER_SECONDS",
    "PENDING_CLAIMS_AT_MOST",
    "Deriver",
    "live_parts",
]

logger = logging.getLogger(__name__)

#: Recall extracts the claims of at most this many pending memories itself; past
#: that (a bulk import under way) it waits for the pipeline to derive them.
PENDING_CLAIMS_AT_MOST = 256

_CACHE_AT_MOST = 4 * PENDING_CLAIMS_AT_MOST

#: Once woken by a store, the pipeline waits until no store came for this long
#: (or :data:`GATHER_AT_MOST_SECONDS` passed, or it is flushed): stores arriving
#: one after the other are acknowledged without derivation work between them, and
#: derived together in batches when they pause.
GATHER_SECONDS = 0.05
GATHER_AT_MOST_SECONDS = 1.0

#: Texts longer than this are extracted in a worker thread; shorter ones on the
#: event loop, one at a time with a yield in between (a thread holding the GIL
#: would make the event loop wait up to a switch interval, 5 ms, at every turn).
_ON_LOOP_CHARS = 600

_BATCHES_READ = 4  # batches of marks read at once

_Key = tuple[int, float]  # a memory's id and updated_at: its text as extracted


class Deriver:
    """Derives the graphs and atoms of marked memories in the background.

    Args:
        base: the memory's base store.
        memory_input: extracts a memory's graph (with the names a caller gave).
        batch_size: memories per derivation transaction.
        on_derived: called with the ids of each batch written.
    """

    def __init__(
        self,
        base: BaseMemoryStore,
        memory_input: MemoryInput,
        *,
        batch_size: int,
        on_derived: Callable[[list[int]], None],
    ) -> None:
        self._base = base
        self._input = memory_input
        self._batch_size = batch_size
        self._on_derived = on_derived
        self._requested = 0
        self._completed = 0
        self._progress = asyncio.Condition()
        self._wake = asyncio.Event()
        self._urgent = False
        self._segmenter_loaded = False  # jieba loads on its first Chinese text: slow
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._graphs: dict[_Key, MemoryGraph] = {}
        self.derived = 0  # memories derived since open

    def start(self, *, resume: bool) -> None:
        """Start the worker; with ``resume``, derive what an earlier run left marked."""
        self._task = asyncio.create_task(self._run(), name=f"derive:{self._base.agent}")
        if resume:
            self.notify()

    def notify(self) -> None:
        """Tell the worker that marked memories wait."""
        self._requested += 1
        self._wake.set()

    async def flush(self) -> None:
        """Wait until every memory marked before this call is derived."""
        if self._closed:
            raise StoreClosedError("the derivation pipeline is closed")
        self._urgent = True
        self.notify()
        target = self._requested
        async with self._progress:
            await self._progress.wait_for(
                lambda: self._completed >= target or self._task is None or self._task.done()
            )
        if self._task is not None and self._task.done() and not self._closed:
            exc = self._task.exception()
            if exc is not None:
                raise StorageError(f"background derivation failed: {exc}") from exc

    @property
    def maybe_pending(self) -> bool:
        """Whether marked memories may wait (told of some not derived yet)."""
        return self._requested > self._completed

    async def pending_claims(
        self, memory_ids: Sequence[int], *, at_most: int = PENDING_CLAIMS_AT_MOST, wait: bool = True
    ) -> list[tuple[Memory, MemoryGraph]]:
        """The marked memories among and newer than the oldest of ``memory_ids``, with
        their graphs (extracted here when the pipeline has not yet).

        When more than ``at_most`` wait (a bulk import under way), the pipeline is
        waited for with ``wait`` (they are derived then; none is returned), else
        none is returned at once.
        """
        if not memory_ids or not self.maybe_pending:
            return []
        pending = await self._base.pending_newer_than(memory_ids, at_most + 1)
        if len(pending) > at_most:
            if not wait:
                return []
            await self.flush()
            pending = await self._base.pending_newer_than(memory_ids, at_most + 1)
            pending = pending[:at_most]  # stored faster than derived meanwhile
        if not pending:
            return []
        missing = [m for m in pending if _key(m) not in self._graphs]
        if missing:
            graphs = await self._extract([(m, (), ()) for m in missing])
            self._keep(missing, graphs)
        return [(m, self._graphs[_key(m)]) for m in pending if _key(m) in self._graphs]

    async def aclose(self) -> None:
        """Stop the worker (a batch under way commits whole or not at all)."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        async with self._progress:
            self._progress.notify_all()

    # -- worker ----------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closed:
            await self._wake.wait()
            await self._gather()
            target = self._requested
            try:
                await self._derive_pending()
            except (StoreClosedError, StorageCorrupted):
                return  # closed, or its database was found damaged and moved aside
            except StorageError as exc:
                logger.warning("%s: derivation failed, will retry: %s", self._base.agent, exc)
                await asyncio.sleep(1.0)
                self._wake.set()
                continue
            async with self._progress:
                self._completed = max(self._completed, target)
                self._progress.notify_all()

    async def _gather(self) -> None:
        """Wait while stores keep coming (see :data:`GATHER_SECONDS`)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + GATHER_AT_MOST_SECONDS
        while not self._urgent and not self._closed:
            self._wake.clear()
            left = until - loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self._wake.wait(), min(GATHER_SECONDS, left))
            except TimeoutError:
                break  # a pause in the stores
        self._urgent = False
        self._wake.clear()

    async def _derive_pending(self) -> None:
        """Derive every marked memory, oldest first, a batch per transaction.

        Marks are read a few batches at a time; a batch is extracted on the event
        loop while the one before it is written on the connection's thread.
        """
        cursor = 0
        writing: asyncio.Future[None] | None = None
        try:
            while not self._closed:
                chunk = await self._base.pending_derivations(
                    _BATCHES_READ * self._batch_size, after_id=cursor
                )
                if not chunk:
                    return
                cursor = chunk[-1].memory.id
                for start in range(0, len(chunk), self._batch_size):
                    batch = chunk[start : start + self._batch_size]
                    items = await self._items(batch)
                    if writing is not None:
                        done, writing = writing, None
                        await done
                    if self._closed:
                        return
                    writing = asyncio.ensure_future(self._write(batch, items))
        finally:
            if writing is not None:
                await writing

    async def _items(
        self, batch: Sequence[PendingMemory]
    ) -> list[tuple[int, MemoryGraph | None, float]]:
        """What :meth:`BaseMemoryStore.write_derived` writes for ``batch``."""
        # Graphs recall extracted already are kept; named entities or relations
        # are not known to recall, so those memories are extracted again.
        fresh = [
            p for p in batch if p.entities or p.relations or _key(p.memory) not in self._graphs
        ]
        extracted: dict[int, MemoryGraph | None] = {}
        if fresh:
            graphs = await self._extract([(p.memory, p.entities, p.relations) for p in fresh])
            extracted = {p.memory.id: g for p, g in zip(fresh, graphs, strict=True)}
        return [
            (
                p.memory.id,
                extracted[p.memory.id]
                if p.memory.id in extracted
                else self._graphs.get(_key(p.memory)),
                _graph_time(p),
            )
            for p in batch
        ]

    async def _write(
        self, batch: Sequence[PendingMemory], items: list[tuple[int, MemoryGraph | None, float]]
    ) -> None:
        written = await self._base.write_derived(items)
        for p in batch:
            self._graphs.pop(_key(p.memory), None)
        self.derived += len(written)
        if written:
            self._on_derived(written)

    async def _extract(
        self, items: Sequence[tuple[Memory, Sequence[str], Sequence[object]]]
    ) -> list[MemoryGraph | None]:
        """The graphs of ``items``: a short text on the event loop, a yield after
        each, a long one (or the first Chinese one) in a worker thread."""
        graphs: list[MemoryGraph | None] = []
        for item in items:
            content = item[0].content
            chinese = needs_segmenter(content)
            if len(content) > _ON_LOOP_CHARS or (chinese and not self._segmenter_loaded):
                graphs.append(await asyncio.to_thread(self._graph_of, *item))
                self._segmenter_loaded = self._segmenter_loaded or chinese
            else:
                graphs.append(self._graph_of(*item))
                await asyncio.sleep(0)
        return graphs

    def _graph_of(
        self, memory: Memory, entities: Sequence[str], relations: Sequence[object]
    ) -> MemoryGraph | None:
        try:
            return self._input.graph_of(memory, list(entities) or None, list(relations) or None)
        except Exception:
            logger.exception(
                "%s: the graph of memory %d could not be derived; it keeps none",
                self._base.agent,
                memory.id,
            )
            return None

    def _keep(self, memories: Sequence[Memory], graphs: Sequence[MemoryGraph | None]) -> None:
        if len(self._graphs) > _CACHE_AT_MOST:
            self._graphs.clear()
        for memory, graph in zip(memories, graphs, strict=True):
            if graph is not None:
                self._graphs[_key(memory)] = graph


def live_parts(
    memory: Memory,
    atoms: Sequence[Atom] | None,
    claims: Sequence[tuple[Memory, MemoryGraph]],
) -> list[tuple[str, bool]] | None:
    """The parts of ``memory`` to recall, each with whether it is live now, or ``None``
    when it has no atoms (recalled whole).

    ``atoms`` are its stored atoms (``None``: none stored). ``claims`` are the
    memories still to be derived, with their graphs (:meth:`Deriver.pending_claims`):
    a newer one of the same scope that claims another object for the same subject
    and predicate supersedes an atom already, as its derivation will. A memory
    still to be derived itself is cut into the atoms its graph will hold.
    """
    newer = [
        graph
        for pending, graph in claims
        if pending.id > memory.id and told_in_one_scope(pending, memory)
    ]
    if atoms is not None:
        return [
            (a.text, a.live and not _superseded(a.subject, a.predicate, a.object, newer))
            for a in atoms
        ]
    own = next((graph for pending, graph in claims if pending.id == memory.id), None)
    if own is None or not own.atoms:
        return None
    return [(a.text, not _superseded(a.subject, a.predicate, a.object, newer)) for a in own.atoms]


def _superseded(
    subject: str | None, predicate: str | None, value: str | None, newer: Sequence[MemoryGraph]
) -> bool:
    """Whether a newer functional claim gives ``subject`` ``predicate`` another object."""
    if subject is None or predicate is None or value is None:
        return False
    return any(
        claim.functional
        and claim.subject == subject
        and claim.predicate == predicate
        and claim.object is not None
        and claim.object != value
        for graph in newer
        for claim in graph.atoms
    )


def _key(memory: Memory) -> _Key:
    return (memory.id, memory.updated_at)


def _graph_time(pending: PendingMemory) -> float:
    return pending.memory.created_at if pending.graph_time is None else pending.graph_time
