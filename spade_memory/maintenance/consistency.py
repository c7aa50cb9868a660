"""The consistency check: memories against their keyword rows, vectors, FAISS ids and graph.

SQLite's ``memories`` table is the truth; everything else is derived from it, is
checked against it (each kind of problem: :data:`CHECK_KINDS`), then, with
``repair``, mended incrementally: a missing keyword row is indexed again with the
tokenizer and an orphaned one deleted; vectors of no memory, or malformed, or of
the current embedder's fingerprint but another length, are deleted; a memory
without a vector of the current embedder is handed to the background embedder;
FAISS is made to hold exactly the stored vectors; orphaned graph rows are deleted
and a missing graph extracted again. Integrity problems of SQLite itself are
reported, not mended: restore a backup.

The deep checks (``deep=True``) also tokenize every memory again, compare each
FAISS vector with its stored one and run SQLite's own checks (``PRAGMA
integrity_check`` and the full-text indexes' ``integrity-check``); a repair then
builds damaged indexes again (``REINDEX``, the full-text ``rebuild``), which
mends damage confined to them, and says so when the tables themselves are damaged.

The check runs while the agent keeps writing. Reads share the connection with
writes, so a read outside a transaction may see a write half done (a memory
inserted, its keyword row not yet): every problem a first, unlocked read finds
is confirmed by reading again under the write lock, where no write is under way,
before it is reported. Every repair runs in a write transaction that checks
again, row by row, that what it mends is still broken (a write between the check
and the repair, such as an update that re-indexed the memory, is never undone).

``pause`` (tests and diagnostics) is awaited at the points where other writes
may land: ``"read"`` after an unlocked read found something, before it is
confirmed, and ``"repair <step>"`` before the repair of a step (``fts``,
``vectors``, ``index``, ``graph``).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..models import Memory
from ..storage.base import IndexedText
from ..storage.checks import GRAPH_ORPHAN_TABLES, CheckReads, ConsistencyQueries, IndexedRow
from .rebuild import Progress, report_progress
from .report import CHECK_KINDS, ConsistencyReport
from .rewrite import extract_all
from .vector_checks import non_finite, sound, stale_index

if TYPE_CHECKING:
    from ..engine import Engine
    from ..storage.given_graph import Given
    from ..text.graph import MemoryGraph

__all__ = ["CHECK_KINDS", "ConsistencyChecker", "ConsistencyReport"]

logger = logging.getLogger(__name__)

# Found after every embedder change or burst of writes: the embedder catches up.
_ROUTINE = frozenset({"vectors_missing", "vectors_wrong_fingerprint"})
_SAMPLE = 20
_BATCH = 500

_T = TypeVar("_T", builtins.list[int], builtins.list[int | None])


def _orphans_in(table: str) -> Callable[[CheckReads], Awaitable[builtins.list[int | None]]]:
    return lambda queries: queries.graph_orphans(table)


class ConsistencyChecker:
    """Checks one open memory and, when asked, repairs it.

    Args:
        engine: the open memory.
        progress: called with ``(steps done, steps)`` as the check goes.
        on_phase: called with ``"checking"`` or ``"repairing"`` as the work changes.
        pause: awaited with ``"read"`` or ``"repair <step>"`` where other writes may land
            (see the module docstring); ``None`` does not wait.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        progress: Progress | None = None,
        on_phase: Callable[[str], None] | None = None,
        pause: Callable[[str], Awaitable[object]] | None = None,
    ) -> None:
        self._engine = engine
        self._base = engine.base
        self._queries = ConsistencyQueries(engine.base)
        self._progress = progress
        self._on_phase = on_phase or (lambda phase: None)
        self._pause = pause

    async def run(
        self, *, repair: bool = False, deep: bool = False, structure: bool | None = None
    ) -> ConsistencyReport:
        """Check every kind of :data:`CHECK_KINDS` (the deep ones with ``deep``).

        ``structure`` (default: ``deep``) also runs SQLite's own checks
        (``PRAGMA integrity_check``, the full-text indexes' checks); with
        ``repair``, damaged indexes are built again.
        """
        report = ConsistencyReport(deep=deep, repair=repair)
        steps: builtins.list[Callable[[ConsistencyReport, bool, bool], Any]] = [
            self._fts,
            self._vectors,
            self._index,
            self._graph,
        ]
        if deep if structure is None else structure:
            steps.append(self._integrity)
        for done, step in enumerate(steps):
            await report_progress(self._progress, done, len(steps))
            self._on_phase("checking")
            await step(report, repair, deep)
        await report_progress(self._progress, len(steps), len(steps))
        if report.problems:
            routine = set(report.found) <= _ROUTINE
            logger.log(
                logging.INFO if routine else logging.WARNING,
                "%s: consistency check found %s; %d left unmended",
                self._base.agent,
                report.found,
                report.remaining,
            )
        return report

    async def _wait(self, point: str) -> None:
        if self._pause is not None:
            await self._pause(point)

    async def _repairing(self, step: str) -> None:
        self._on_phase("repairing")
        await self._wait(f"repair {step}")

    # -- keyword index ---------------------------------------------------------

    def _tokens(self, content: str, context: str | None) -> tuple[str, str]:
        text = IndexedText.of(content, context)
        return text.content_tokens, text.context_tokens

    async def _detect(self, find: Callable[[CheckReads], Awaitable[_T]]) -> _T:
        """What ``find(queries)`` reads, confirmed under the write lock if it found anything.

        Reads share the connection with writes, so outside a transaction they may
        see one half done (a memory inserted, its keyword row not yet); under the
        write lock no write is under way.
        """
        found = await find(self._queries)
        if not found:
            return found
        await self._wait("read")
        async with self._queries.locked() as locked:
            return await find(locked)

    async def _fts(self, report: ConsistencyReport, repair: bool, deep: bool) -> None:
        missing = await self._detect(lambda q: q.memories_missing_fts())
        orphaned = await self._detect(lambda q: q.orphan_fts_rows())
        report.add("fts_missing", missing)
        report.add("fts_orphaned", orphaned)
        stale: builtins.list[int] = []
        if deep:
            stale = await self._stale_fts()
            report.add("fts_stale", stale)
        if not repair or not (missing or orphaned or stale):
            return
        await self._repairing("fts")
        report.mend("fts_missing", await self._reindex(missing))
        report.mend("fts_stale", await self._reindex(stale))
        if orphaned:
            async with self._queries.locked() as locked:
                for start in range(0, len(orphaned), _BATCH):
                    chunk = orphaned[start : start + _BATCH]
                    report.mend("fts_orphaned", await locked.delete_orphan_fts_rows(chunk))
            self._engine.notify_changed()

    async def refresh_keyword_rows(self) -> int:
        """Write again every keyword row that differs from its memory's index text
        now (after the index text changed); returns how many are right now."""
        return await self._reindex(await self._stale_fts())

    def _stale_of(self, rows: Sequence[IndexedRow]) -> builtins.list[int]:
        """Ids of ``(id, content, context, content tokens, context tokens)`` rows that differ."""
        return [int(r[0]) for r in rows if self._tokens(r[1], r[2]) != (r[3] or "", r[4] or "")]

    async def _stale_fts(self) -> builtins.list[int]:
        stale: builtins.list[int] = []
        last = 0
        while True:
            rows = await self._queries.indexed_texts_after(last, _BATCH)
            if not rows:
                break
            stale.extend(await asyncio.to_thread(self._stale_of, rows))
            last = int(rows[-1][0])
        if not stale:
            return stale
        await self._wait("read")
        confirmed: builtins.list[int] = []
        for start in range(0, len(stale), _BATCH):
            chunk = stale[start : start + _BATCH]
            async with self._queries.locked() as locked:
                rows = await locked.indexed_texts_of(chunk)
            confirmed.extend(await asyncio.to_thread(self._stale_of, rows))
        return confirmed

    def _tokens_of(self, memories: Sequence[Memory]) -> builtins.list[tuple[str, str]]:
        return [self._tokens(m.content, m.context) for m in memories]

    async def _reindex(self, ids: Sequence[int]) -> int:
        """Write the keyword rows of these memories again; returns how many are right now.

        Under the write lock, a memory whose content changed since it was read, or
        whose keyword row is right by now (its own write indexed it), is left alone
        (and counted: nothing is left to mend).
        """
        written = settled = 0
        for start in range(0, len(ids), _BATCH):
            chunk = ids[start : start + _BATCH]
            found = await self._base.get_many(chunk)
            settled += len(chunk) - len(found)  # forgotten meanwhile
            memories = list(found.values())
            tokens = await asyncio.to_thread(self._tokens_of, memories)
            async with self._queries.locked() as locked:
                for memory, (content_tokens, context_tokens) in zip(memories, tokens, strict=True):
                    if not await locked.memory_unchanged(memory.id, memory.content, memory.context):
                        settled += 1  # changed or deleted meanwhile: its own write indexed it
                        continue
                    if await locked.keyword_row(memory.id) == (content_tokens, context_tokens):
                        settled += 1
                        continue
                    await locked.write_keyword_row(memory.id, content_tokens, context_tokens)
                    written += 1
        if written:
            self._engine.notify_changed()
        return written + settled

    # -- stored vectors ------------------------------------------------------

    async def _vectors(self, report: ConsistencyReport, repair: bool, deep: bool) -> None:
        indexer = self._engine.indexer
        orphaned = await self._detect(lambda q: q.orphan_vector_ids())
        malformed = await self._detect(lambda q: q.malformed_vector_ids())
        if deep:
            malformed = sorted(set(malformed) | set(await non_finite(self._base)))
        report.add("vectors_orphaned", orphaned)
        report.add("vectors_malformed", malformed)
        missing: builtins.list[int] = []
        foreign: builtins.list[int] = []
        wrong_dim: builtins.list[int] = []
        if indexer is not None:
            fingerprint, dim = indexer.embedder.fingerprint, indexer.embedder.dim
            missing = await self._detect(lambda q: q.memories_missing_vector())
            foreign = await self._detect(lambda q: q.foreign_vector_ids(fingerprint))
            wrong_dim = await self._detect(lambda q: q.wrong_dimension_vector_ids(fingerprint, dim))
            foreign = [i for i in foreign if i not in set(malformed)]
            wrong_dim = [i for i in wrong_dim if i not in set(malformed)]
            report.add("vectors_missing", missing)
            report.add("vectors_wrong_fingerprint", foreign)
            report.add("vectors_wrong_dimension", wrong_dim)
        if not repair or not (orphaned or malformed or missing or foreign or wrong_dim):
            return
        await self._repairing("vectors")
        if orphaned or malformed:
            await self._delete_vectors(report, orphaned, malformed)
        if indexer is not None and wrong_dim:
            await self._delete_wrong_dimension(report, wrong_dim)
        if indexer is not None and (missing or foreign or malformed or wrong_dim):
            indexer.notify()  # the background embedder embeds what has no current vector
            report.mend("vectors_missing", len(missing))
            report.mend("vectors_wrong_fingerprint", len(foreign))

    async def _delete_wrong_dimension(
        self, report: ConsistencyReport, wrong_dim: Sequence[int]
    ) -> None:
        """Delete the vectors of the current embedder's fingerprint that are still of
        another length, under the write lock: their memories wait to be embedded."""
        indexer = self._engine.indexer
        assert indexer is not None
        fingerprint, dim = indexer.embedder.fingerprint, indexer.embedder.dim
        removed: builtins.list[int] = []
        async with self._queries.locked() as locked:
            for start in range(0, len(wrong_dim), _BATCH):
                chunk = list(wrong_dim[start : start + _BATCH])
                removed.extend(await locked.delete_wrong_dimension_vectors(fingerprint, dim, chunk))
            if removed:
                indexer.remove(removed)  # under the lock: no vector of theirs lands meanwhile
        # What was not deleted was embedded again meanwhile: nothing is left.
        report.mend("vectors_wrong_dimension", len(wrong_dim))

    async def _delete_vectors(
        self, report: ConsistencyReport, orphaned: Sequence[int], malformed: Sequence[int]
    ) -> None:
        """Delete the vectors that are still orphaned or malformed under the write lock.

        A memory given a sound vector since the check (re-embedded after an update)
        keeps it, in SQLite and in FAISS.
        """
        indexer = self._engine.indexer
        removed: builtins.list[int] = []
        async with self._queries.locked() as locked:
            for start in range(0, len(orphaned), _BATCH):
                chunk = list(orphaned[start : start + _BATCH])
                removed.extend(await locked.delete_orphan_vectors(chunk))
            for start in range(0, len(malformed), _BATCH):
                chunk = list(malformed[start : start + _BATCH])
                rows = await locked.stored_vectors(chunk)
                still = [row[0] for row in rows if not sound(row[1], row[2])]
                if still:
                    await locked.delete_vectors(still)
                removed.extend(still)
            if indexer is not None and removed:
                indexer.remove(removed)  # under the lock: no vector of theirs lands meanwhile
        # What was not deleted was mended by a write meanwhile: nothing is left.
        report.mend("vectors_orphaned", len(orphaned))
        report.mend("vectors_malformed", len(malformed))

    # -- FAISS index -------------------------------------------------------------

    async def _index(self, report: ConsistencyReport, repair: bool, deep: bool) -> None:
        indexer = self._engine.indexer
        if indexer is None:
            return
        fingerprint, dim = indexer.embedder.fingerprint, indexer.embedder.dim
        stored_ids = await self._queries.valid_vector_ids(fingerprint, dim)
        present = indexer.index.ids()
        if len(np.setxor1d(stored_ids, present)):  # confirm with no write under way
            await self._wait("read")
            async with self._queries.locked() as locked:
                stored_ids = await locked.valid_vector_ids(fingerprint, dim)
                present = indexer.index.ids()
        missing = np.setdiff1d(stored_ids, present).tolist()
        extra = np.setdiff1d(present, stored_ids).tolist()
        report.add("index_missing", missing)
        report.add("index_extra", extra)
        stale: builtins.list[int] = []
        if deep:
            stale = await stale_index(
                self._base, indexer, np.intersect1d(stored_ids, present).tolist()
            )
            if stale:  # confirm with no write under way
                await self._wait("read")
                async with self._queries.locked():
                    stale = await stale_index(self._base, indexer, stale)
            report.add("index_stale", stale)
        if not repair or not (missing or extra or stale):
            return
        await self._repairing("index")
        # Under the write lock nothing commits meanwhile: FAISS is made to hold
        # exactly the vectors SQLite holds now.
        async with self._queries.locked() as locked:
            now_stored = await locked.valid_vector_ids(fingerprint, dim)
            now_present = indexer.index.ids()
            indexer.index.remove(np.setdiff1d(now_present, now_stored))
            wanted = set(np.setdiff1d(now_stored, now_present).tolist()) | set(stale)
            suspects = sorted(wanted & set(now_stored.tolist()))
            for start in range(0, len(suspects), _BATCH):
                chunk = suspects[start : start + _BATCH]
                ids, matrix = await locked.valid_vectors_of(fingerprint, dim, chunk)
                finite = np.isfinite(matrix).all(axis=1)
                indexer.index.add(ids[finite], matrix[finite])
            indexer.mark_changed(len(missing) + len(extra) + len(stale))
        for kind, ids_found in (("index_missing", missing), ("index_extra", extra)):
            report.mend(kind, len(ids_found))
        report.mend("index_stale", len(stale))
        self._engine.notify_changed()

    # -- graph ------------------------------------------------------------------

    async def _graph(self, report: ConsistencyReport, repair: bool, deep: bool) -> None:
        orphans = 0
        ids: set[int] = set()
        for table in GRAPH_ORPHAN_TABLES:
            keys = await self._detect(_orphans_in(table))
            orphans += len(keys)
            ids.update(key for key in keys if key is not None)
        report.add("graph_orphaned", sorted(ids), count=orphans)
        missing = await self._detect(lambda q: q.memories_missing_graph())
        report.add("graph_missing", missing)
        if not repair or not (orphans or missing):
            return
        await self._repairing("graph")
        if orphans:
            async with self._queries.locked() as locked:
                deleted = await locked.delete_graph_orphans()
            report.mend("graph_orphaned", min(deleted, orphans))
        for start in range(0, len(missing), _BATCH):
            found = await self._base.get_many(missing[start : start + _BATCH])
            memories = list(found.values())
            given = await self._base.given(found)  # named when stored: extracted the same

            def extract(memory: Memory, given: dict[int, Given] = given) -> MemoryGraph:
                return self._engine.graph_for(memory, given.get(memory.id))

            graphs = await asyncio.to_thread(extract_all, extract, memories)
            async with self._queries.locked() as locked:
                # a write meanwhile made the rest
                still = await locked.graphless_among([memory.id for memory in memories])
                items = [(m, g) for m, g in zip(memories, graphs, strict=True) if m.id in still]
                await locked.write_graphs(items, extract)
        report.mend("graph_missing", len(missing))
        self._engine.notify_changed()

    # -- SQLite itself -----------------------------------------------------------

    async def _integrity(self, report: ConsistencyReport, repair: bool, deep: bool) -> None:
        if deep:  # rows against the checksums written with them: reported, not mended
            rows = await self._base.checksum_mismatches()
            if rows:
                report.add("rows_altered", [*rows.altered, *rows.lost, *rows.unsummed])
                report.messages.append(rows.describe())
        messages = await self._base.structure_problems()
        if not messages:
            return
        report.add("integrity", count=len(messages))
        report.messages.extend(messages[:_SAMPLE])
        if not repair:
            return
        await self._repairing("integrity")
        # Indexes hold nothing their tables do not: building them again mends
        # damage confined to them; what is left is the tables' own damage.
        left = await self._base.rebuild_indexes()
        self._engine.notify_changed()
        if left:
            report.messages.append(
                "rebuilding the indexes did not mend it: restore this memory from a backup"
            )
            report.messages.extend(left[:_SAMPLE])
            logger.error("%s: SQLite damage a repair cannot mend: %s", self._base.agent, left[:3])
            return
        report.mend("integrity", len(messages))
        logger.warning("%s: damaged SQLite indexes were rebuilt", self._base.agent)
