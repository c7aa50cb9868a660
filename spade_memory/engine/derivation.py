"""The derivation pipeline: graph rows and atoms written behind the acknowledgement.

With ``StorageConfig.derive_in_background`` a store commits the memory, its
keyword index and a durable mark (:mod:`spade_memory.storage.derivation`); this
pipeline then reads the marked memories oldest first, extracts their entities,
relations and atoms in a worker thread (the event loop keeps answering searches),
and writes each batch's graphs in one short transaction that clears their marks.
While a search of the process runs, each extraction waits for it, a bounded while
(:mod:`spade_memory.retrieval.search_gate`): searches do not queue behind it.
After each batch the vector indexer is woken to embed the new graph entries and
searches are told the memory changed. A crash between an acknowledgement and its
derivation leaves the mark, and the next open derives the memory. A memory whose
extraction fails keeps its mark and is tried again after
:data:`RETRY_FIRST_SECONDS`, doubling up to :data:`RETRY_MAX_SECONDS` (and on the
next open); the others are derived meanwhile.

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import StorageError
from ..models import Memory
from ..retrieval.search_gate import DERIVATION_HOLD, search_gate
from ..storage.base import BaseMemoryStore
from ..storage.derivation import PendingMemory
from ..storage.scope_filter import told_in_one_scope
from ..text.atoms import Atom
from ..text.extraction import needs_segmenter
from ..text.graph import AtomRecord, MemoryGraph
from ..text.relations import FUNCTIONAL
from .background_worker import BackgroundWorker
from .memory_input import MemoryInput

__all__ = [
    "CLOSE_DERIVE_SECONDS",
    "GATHER_AT_MOST_SECONDS",
    "GATHER_SECONDS",
    "PENDING_CLAIMS_AT_MOST",
    "RETRY_FIRST_SECONDS",
    "RETRY_MAX_SECONDS",
    "Deriver",
    "PendingClaim",
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

#: On close, the pipeline goes on deriving what is marked for at most this long.
CLOSE_DERIVE_SECONDS = 2.0

#: Texts longer than this are extracted in a worker thread; shorter ones on the
#: event loop, one at a time with a yield in between (a thread holding the GIL
#: would make the event loop wait up to a switch interval, 5 ms, at every turn).
_ON_LOOP_CHARS = 600

#: The first wait before a memory whose extraction failed is tried again.
RETRY_FIRST_SECONDS = 2.0
#: The longest wait between two tries while its extraction keeps failing.
RETRY_MAX_SECONDS = 600.0

_BATCHES_READ = 4  # batches of marks read at once

_Key = tuple[int, float]  # a memory's id and updated_at: its text as extracted


class PendingClaim(NamedTuple):
    """A memory still to be derived, the graph it will be given, the time its atoms
    will start from (:func:`_graph_time`) and when it was last told, which orders
    its claims against others (as ``reinforced_at`` orders stored atoms')."""

    memory: Memory
    graph: MemoryGraph
    start: float
    told: float


@dataclass(frozen=True, slots=True)
class _Failed:
    """A memory whose extraction failed: how often, and when it is tried again."""

    attempts: int
    retry_at: float  # the event loop's clock


class Deriver(BackgroundWorker):
    """Derives the graphs and atoms of marked memories in the background.

    Args:
        base: the memory's base store.
        memory_input: extracts a memory's graph (with the names a caller gave).
        batch_size: memories per derivation transaction.
        on_derived: called with the ids of each batch written.
    """

    work = "derivation"

    def __init__(
        self,
        base: BaseMemoryStore,
        memory_input: MemoryInput,
        *,
        batch_size: int,
        on_derived: Callable[[list[int]], None],
    ) -> None:
        super().__init__(base)
        self._input = memory_input
        self._batch_size = batch_size
        self._on_derived = on_derived
        self._urgent = False
        self._hurried = asyncio.Event()  # set with _urgent: ends the gathering wait
        self._changed_at = 0.0  # time.monotonic() of the last notify
        self._segmenter_loaded = False  # jieba loads on its first Chinese text: slow
        self._graphs: dict[_Key, MemoryGraph] = {}
        self._failed: dict[int, _Failed] = {}
        self._retry: asyncio.TimerHandle | None = None
        self.derived = 0  # memories derived since open

    def start(self, *, resume: bool) -> None:
        """Start the worker; with ``resume``, derive what an earlier run left marked."""
        self._start("derive")
        if resume:
            self.notify()

    async def flush(self) -> None:
        """Wait until every memory marked before this call is derived (or, when its
        extraction failed, left marked to be tried again; see :attr:`failing`)."""
        await super().flush()

    @property
    def failing(self) -> int:
        """How many memories whose extraction failed wait to be tried again."""
        return len(self._failed)

    async def pending_claims(
        self, memory_ids: Sequence[int], *, at_most: int = PENDING_CLAIMS_AT_MOST, wait: bool = True
    ) -> list[PendingClaim]:
        """The marked memories among and newer than the oldest of ``memory_ids``, with
        their graphs (extracted here when the pipeline has not yet) and the time their
        atoms will start from.

        When more than ``at_most`` wait (a bulk import under way), the pipeline is
        waited for with ``wait`` (they are derived then; none is returned), else
        none is returned at once.
        """
        if not memory_ids or not self.maybe_pending:
            return []
        oldest = min(memory_ids) - 1  # the marks from the oldest of them on
        pending = await self._base.pending_derivations(at_most + 1, after_id=oldest)
        if len(pending) > at_most:
            if not wait:
                return []
            await self.flush()
            pending = await self._base.pending_derivations(at_most + 1, after_id=oldest)
            pending = pending[:at_most]  # stored faster than derived meanwhile
        if not pending:
            return []
        missing = [
            p.memory
            for p in pending
            if _key(p.memory) not in self._graphs and p.memory.id not in self._failed
        ]
        if missing:
            graphs = await self._extract([(m, (), ()) for m in missing])
            self._keep(missing, graphs)
        return [
            PendingClaim(
                p.memory,
                self._graphs[_key(p.memory)],
                _graph_time(p),
                p.memory.created_at if p.told_at is None else p.told_at,
            )
            for p in pending
            if _key(p.memory) in self._graphs
        ]

    async def aclose(self) -> None:
        """Derive what is marked, within :data:`CLOSE_DERIVE_SECONDS`, then stop the
        worker (a batch under way commits whole or not at all; what is left stays
        marked and is derived after the next open). A program that stores and closes
        at once still leaves its memories with their graphs and atoms."""
        if self.maybe_pending and not await self.finish(CLOSE_DERIVE_SECONDS):
            logger.info(
                "%s: derivation did not finish on closing; what is left is derived after "
                "the next open",
                self._base.agent,
            )
        if self._retry is not None:
            self._retry.cancel()
        await super().aclose()

    # -- worker ----------------------------------------------------------------

    def notify(self) -> None:
        self._changed_at = time.monotonic()
        super().notify()

    def _hurry(self) -> None:
        self._urgent = True
        self._hurried.set()

    async def _pass(self) -> bool:
        await self._derive_pending()
        return True

    async def _after_pass(self) -> None:
        """Wake again when the first memory whose extraction failed is due."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._failed and not self._closed:
            loop = asyncio.get_running_loop()
            due = min(failed.retry_at for failed in self._failed.values())
            self._retry = loop.call_at(due, self.notify)

    async def _before_pass(self) -> None:
        """Wait while stores keep coming (see :data:`GATHER_SECONDS`).

        A store only notes when it came (:meth:`notify`): the wait ends once
        :data:`GATHER_SECONDS` passed since the last one, checked when each timer
        runs out, so a run of stores costs one timer for each pause, not one each.
        """
        until = time.monotonic() + GATHER_AT_MOST_SECONDS
        while not self._urgent and not self._closed:
            left = min(self._changed_at + GATHER_SECONDS, until) - time.monotonic()
            if left <= 0:
                break  # a pause in the stores, or waited long enough
            self._hurried.clear()
            # asyncio.timeout, not wait_for: in Python 3.11 wait_for drops a
            # cancellation that comes as the event is set, and the cancelled
            # worker would wait for the next store forever (an event loop ending
            # with the memory left open hung on it)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._hurried.wait()
        self._urgent = False
        self._hurried.clear()
        self._wake.clear()

    async def _derive_pending(self) -> None:
        """Derive every marked memory, oldest first, a batch per transaction.

        Marks are read a few batches at a time; a batch is extracted on the event
        loop while the one before it is written on the connection's thread.
        """
        cursor = 0
        writing: asyncio.Future[None] | None = None
        seen: set[int] = set()
        loop = asyncio.get_running_loop()
        try:
            while not self._closed:
                chunk = await self._base.pending_derivations(
                    _BATCHES_READ * self._batch_size, after_id=cursor
                )
                if not chunk:
                    # forget the failures of memories no longer marked (deleted)
                    self._failed = {i: f for i, f in self._failed.items() if i in seen}
                    return
                cursor = chunk[-1].memory.id  # past the failed ones: they stall nothing
                seen.update(p.memory.id for p in chunk)
                now = loop.time()
                chunk = [
                    p
                    for p in chunk
                    if p.memory.id not in self._failed or self._failed[p.memory.id].retry_at <= now
                ]
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
                if self._closed:
                    # closing (cancelled meanwhile): the batch commits whole or not at
                    # all; its failure must not replace the cancellation
                    try:
                        await writing
                    except StorageError as exc:
                        logger.info(
                            "%s: a derived batch was not written while closing (%s); its "
                            "memories keep their marks and are derived on the next open",
                            self._base.agent,
                            exc,
                        )
                else:
                    await writing

    async def _items(self, batch: Sequence[PendingMemory]) -> list[tuple[int, MemoryGraph, float]]:
        """What :meth:`BaseMemoryStore.write_derived` writes for ``batch``: the memories
        whose extraction failed are left out (marked still, tried again later)."""
        # Graphs recall extracted already are kept; named entities or relations
        # are not known to recall, so those memories are extracted again.
        graphs: dict[int, MemoryGraph | None] = {}
        fresh: list[PendingMemory] = []
        for p in batch:
            known = None if p.entities or p.relations else self._graphs.get(_key(p.memory))
            if known is None:
                fresh.append(p)
            else:
                graphs[p.memory.id] = known
        if fresh:
            extracted = await self._extract(
                [(p.memory, p.entities, p.relations) for p in fresh], behind_searches=True
            )
            graphs.update((p.memory.id, g) for p, g in zip(fresh, extracted, strict=True))
        items: list[tuple[int, MemoryGraph, float]] = []
        for p in batch:
            graph = graphs[p.memory.id]
            if graph is None:
                self._fail(p.memory.id)
            else:
                items.append((p.memory.id, graph, _graph_time(p)))
        return items

    def _fail(self, memory_id: int) -> None:
        """Record that a memory's extraction failed: it is tried again later."""
        before = self._failed.get(memory_id)
        attempts = 1 if before is None else before.attempts + 1
        delay = min(RETRY_FIRST_SECONDS * 2.0 ** (attempts - 1), RETRY_MAX_SECONDS)
        self._failed[memory_id] = _Failed(attempts, asyncio.get_running_loop().time() + delay)
        logger.warning(
            "%s: memory %d keeps its mark (extraction failed %d time%s); tried again in %.0f s",
            self._base.agent,
            memory_id,
            attempts,
            "" if attempts == 1 else "s",
            delay,
        )

    async def _write(
        self, batch: Sequence[PendingMemory], items: list[tuple[int, MemoryGraph, float]]
    ) -> None:
        written = await self._base.write_derived(items) if items else []
        for memory_id, _, _ in items:
            self._failed.pop(memory_id, None)
        for p in batch:
            self._graphs.pop(_key(p.memory), None)
        self.derived += len(written)
        if written:
            self._on_derived(written)

    async def _extract(
        self,
        items: Sequence[tuple[Memory, Sequence[str], Sequence[object]]],
        *,
        behind_searches: bool = False,
    ) -> list[MemoryGraph | None]:
        """The graphs of ``items``: a short text on the event loop, a yield after
        each, a long one (or the first Chinese one) in a worker thread.

        With ``behind_searches`` (the pipeline, not recall asking for pending claims
        during its own search) each waits while a search of the process runs, at most
        :data:`~spade_memory.retrieval.search_gate.DERIVATION_HOLD` seconds.
        """
        graphs: list[MemoryGraph | None] = []
        gate = search_gate()
        for item in items:
            if behind_searches:
                await gate.wait_clear_async(DERIVATION_HOLD)
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
                "%s: the graph of memory %d could not be derived", self._base.agent, memory.id
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
    claims: Sequence[PendingClaim],
    *,
    now: float,
    held: Sequence[tuple[Memory, Sequence[Atom]]] = (),
) -> list[tuple[str, bool]] | None:
    """The parts of ``memory`` to recall, each with whether it is live now, or ``None``
    when it has no atoms (recalled whole).

    ``atoms`` are its stored atoms (``None``: none stored). ``claims`` are the
    memories still to be derived, with their graphs (:meth:`Deriver.pending_claims`):
    one of the same scope told later (then by id) that claims another object for the
    same subject and predicate supersedes an atom already, as its derivation will
    (:func:`~spade_memory.storage.graph.settle_claims`). A memory still to be
    derived itself is cut into the atoms its graph will hold, each live until its
    lifetime lapses by ``now``, counted from when its atoms will start (its
    creation; the import, or the telling again, when that came later); ``held``,
    other memories at hand with their stored atoms: one of them told later that
    stands supersedes its claims too.
    """
    others = [
        claim
        for claim in claims
        if claim.memory.id != memory.id and told_in_one_scope(claim.memory, memory)
    ]

    def newer(told: float) -> list[MemoryGraph]:
        return [c.graph for c in others if (c.told, c.memory.id) > (told, memory.id)]

    if atoms is not None:
        return [
            (
                a.text,
                a.live
                and not _superseded(a.subject, a.predicate, a.object, newer(a.reinforced_at)),
            )
            for a in atoms
        ]
    own = next((claim for claim in claims if claim.memory.id == memory.id), None)
    if own is None or not own.graph.atoms:
        return None
    later = newer(own.told)
    later.extend(
        MemoryGraph(atoms=tuple(_claims(stored)))
        for other, stored in held
        if other.id != memory.id and told_in_one_scope(other, memory)
        for stored in [
            [a for a in stored if a.live and (a.reinforced_at, other.id) > (own.told, memory.id)]
        ]
        if stored
    )
    return [
        (
            a.text,
            own.start + a.ttl_seconds > now
            and not _superseded(a.subject, a.predicate, a.object, later),
        )
        for a in own.graph.atoms
    ]


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


def _claims(atoms: Sequence[Atom]) -> list[AtomRecord]:
    """Stored atoms as the claims a graph would make (for :func:`_superseded`)."""
    return [
        AtomRecord(
            position=a.position,
            text=a.text,
            key="",
            type=a.type,
            importance=a.importance,
            ttl_seconds=0.0,
            subject=a.subject,
            predicate=a.predicate,
            object=a.object,
            functional=a.predicate in FUNCTIONAL,
        )
        for a in atoms
        if a.subject is not None and a.predicate is not None and a.object is not None
    ]
