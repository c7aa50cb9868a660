"""Background embedding and the FAISS cache of one agent's vectors.

A store is acknowledged once its SQLite transaction commits. This indexer then
embeds pending memories in batches in a worker thread, writes each vector (with
the embedder's fingerprint) into SQLite and adds it to the FAISS index. The
FAISS index is only a cache: on open it is loaded from its snapshot and caught up
from SQLite (vectors added, changed or removed since), or rebuilt from SQLite
when the snapshot is missing, damaged or made by another embedder. The snapshot
is rewritten rarely (debounced, and only when a fraction of the index changed),
so the bytes written per stored memory do not grow with the memory's size.

An embedder that answers over the network (an
:class:`~spade_memory.models.AsyncEmbedder`) is called on the event loop, others
in a worker thread. When it is unavailable (down, rate limited past its retries),
the memories wait in SQLite, found by keywords, and the worker tries again after
:data:`RETRY_FIRST_SECONDS`, doubling up to :data:`RETRY_MAX_SECONDS`, for as
long as the memory is open (and again on the next open); meanwhile a query is
not embedded (the search uses keywords) unless the last attempt succeeded.

An embedder that fails otherwise on a batch (raises, or answers something
unusable) is asked again for each half of it, down to single texts, so that the
texts it refuses are told apart from the rest, which are embedded at once
(:mod:`.refusals`). A refused memory is found by keywords, and is tried again after
:data:`RETRY_FIRST_SECONDS`, doubling up to :data:`RETRY_MAX_SECONDS`, at most
:data:`REFUSED_ATTEMPTS` times while the memory is open; then when it changes
(another text, or an update), and on the next open. The summaries of graph entries
are embedded the same way: a refused entry is found through its entities meanwhile,
and tried again on the same terms (at once when its graph is written again).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..config import StorageConfig
from ..embedding import embedder_for_fingerprint
from ..embedding.calls import embed_query, is_async_embedder, prepare
from ..embedding.fingerprints import outnumbering
from ..errors import EmbeddingError, EmbeddingUnavailable, StorageError
from ..models import Embedder
from ..storage.base import BaseMemoryStore
from ..storage.embeddings import PendingVector
from ..storage.graph_store import GraphStore, PendingEntry
from ..storage.vectors import IndexKind, VectorIndex
from .background_worker import BackgroundWorker
from .refusals import Refusals

__all__ = ["REFUSED_ATTEMPTS", "RETRY_FIRST_SECONDS", "RETRY_MAX_SECONDS", "VectorIndexer"]

logger = logging.getLogger(__name__)

#: The first wait before embedding again after the embedder was unavailable.
RETRY_FIRST_SECONDS = 2.0
#: The longest wait between two attempts while the embedder stays unavailable.
RETRY_MAX_SECONDS = 60.0
#: How many times a text the embedder refused is tried while the memory is open.
REFUSED_ATTEMPTS = 8

_SNAPSHOT_GENERATION = "snapshot_generation"


class VectorIndexer(BackgroundWorker):
    """Embeds pending memories in the background and keeps the FAISS cache in sync."""

    work = "embedding"

    def __init__(
        self,
        base: BaseMemoryStore,
        embedder: Embedder,
        index: VectorIndex,
        *,
        snapshot_path: Path | None,
        storage: StorageConfig,
        applied_seq: int,
        monotonic: Callable[[], float] = time.monotonic,
        graph: GraphStore | None = None,
    ) -> None:
        super().__init__(base)
        self._stamp = embedder.fingerprint  # what snapshots are stamped with
        self._graph = graph
        self._graph_index: VectorIndex | None = None
        self._embedder = embedder
        self._index = index
        self._snapshot_path = snapshot_path
        self._storage = storage
        self._applied_seq = applied_seq
        self._catching_up = asyncio.Lock()  # see catch_up
        self._monotonic = monotonic
        self._dirty = 0
        self._last_persist = monotonic()
        # the memories whose text, and the graph entries whose summary, it refused
        self._refused: Refusals[PendingVector] = self._refusals("memory")
        self._refused_entries: Refusals[PendingEntry] = self._refusals("graph entry of memory")
        self._retry: asyncio.TimerHandle | None = None
        self._target: Embedder | None = None
        self._instance: str | None = None
        self._unavailable: str | None = None
        self._retry_delay = RETRY_FIRST_SECONDS
        self._down_until = 0.0
        self._reported: str | None = None

    @classmethod
    async def open(
        cls,
        base: BaseMemoryStore,
        embedder: Embedder,
        *,
        snapshot_path: Path | None,
        storage: StorageConfig,
        graph: GraphStore | None = None,
        embed_pending: bool = True,
    ) -> VectorIndexer:
        """Load the snapshot (or rebuild) from SQLite, then start the worker.

        With ``graph``, the graph entries' vectors are embedded too and kept in a
        second index, built from SQLite on open (it has no snapshot). With
        ``embed_pending``, memories an earlier run left without a vector are
        embedded at once (else on the next change or :meth:`flush`), and a memory
        holding no vector yet records ``embedder`` as its own (a command looking at
        it then knows which embedder it uses and what waits for a vector).
        """
        # A database this open created holds no vectors: nothing to load or check.
        fresh = base.created
        counts = {} if fresh else await base.vector_counts()
        await prepare(embedder, tuple(counts))
        target: Embedder | None = None
        serving = await cls._serving(base, embedder, counts)
        if serving is not embedder:
            target, embedder = embedder, serving
        fingerprint = embedder.fingerprint
        dim = embedder.dim
        if embed_pending and not counts:
            await base.name_embedder(fingerprint)
        kind: IndexKind = (
            "flat"
            if fresh and storage.vector_index == "auto"
            else await cls._index_kind(base, fingerprint, storage)
        )
        # The snapshot names the embedder and this database file, so a snapshot
        # copied from another agent's (or another root's) memory is never used.
        instance = await base.meta_get("instance")
        stamp = f"{fingerprint}#db={instance}" if instance else fingerprint
        loaded = None
        if snapshot_path is not None and not fresh:
            loaded = await asyncio.to_thread(
                VectorIndex.load_snapshot,
                snapshot_path,
                dim=dim,
                fingerprint=stamp,
                kind=kind,
                ef_search=storage.hnsw_ef_search,
            )
        if loaded is not None and loaded[1].seq > await base.max_embedding_seq():
            # Newer than the database (restored from a backup): its vectors may
            # belong to content the database no longer holds.
            logger.info("%s: vector snapshot is newer than its database; rebuilding", base.agent)
            loaded = None
        if loaded is not None:
            index, info = loaded
            applied = await cls._catch_up(base, index, fingerprint, dim, after_seq=info.seq)
            logger.debug("%s: snapshot loaded (%d vectors)", base.agent, index.ntotal)
        elif fresh:
            index = VectorIndex(dim, kind=kind, ef_search=storage.hnsw_ef_search)
            applied = 0
        else:
            index = VectorIndex(dim, kind=kind, ef_search=storage.hnsw_ef_search)
            ids, matrix, applied = await base.load_vectors(fingerprint, dim)
            if len(ids):
                await asyncio.to_thread(index.add, ids, matrix)
            logger.debug("%s: vector index built from SQLite (%d)", base.agent, len(ids))
        indexer = cls(
            base,
            embedder,
            index,
            snapshot_path=snapshot_path,
            storage=storage,
            applied_seq=applied,
            graph=graph,
        )
        indexer._stamp = stamp
        indexer._instance = instance
        indexer._target = target
        if loaded is None and snapshot_path is not None and not fresh:
            # Built from SQLite: write a snapshot (debounced, or at close) so the
            # next open loads it instead of building again.
            indexer._dirty = index.ntotal
        if graph is not None:
            indexer._graph_index = VectorIndex(dim)
            graph_ids, graph_matrix = (
                (np.empty(0, dtype=np.int64), np.empty((0, dim), dtype=np.float32))
                if fresh
                else await graph.load_vectors(fingerprint, dim)
            )
            if len(graph_ids):
                await asyncio.to_thread(indexer._graph_index.add, graph_ids, graph_matrix)
        indexer._start("embed")
        if not fresh and embed_pending:  # embed what an earlier run stored but did not embed
            indexer.notify()
        return indexer

    @staticmethod
    async def _serving(
        base: BaseMemoryStore, embedder: Embedder, counts: dict[str, int]
    ) -> Embedder:
        """The embedder whose vectors serve searches now.

        When most stored vectors are another embedder's, and that embedder can be made
        again (:func:`~spade_memory.embedding.embedder_for_fingerprint`), it keeps
        serving (queries embedded by it, its vectors searched) until the configured
        one's vectors, built in the background, are switched in; otherwise the
        configured one serves at once and the memory is re-embedded in place.
        """
        fingerprint = embedder.fingerprint
        main = outnumbering(fingerprint, counts)
        if main is None:
            return embedder
        old = await asyncio.to_thread(embedder_for_fingerprint, main)
        if old is None:
            logger.info(
                "%s: the stored vectors' embedder (%s) cannot be made again; embedding "
                "anew with %s (searches use keywords meanwhile)",
                base.agent,
                main,
                fingerprint,
            )
            return embedder
        logger.info(
            "%s: embedder changed (%s -> %s); the old vectors serve searches until the "
            "new ones are built",
            base.agent,
            main,
            fingerprint,
        )
        return old

    @staticmethod
    async def _index_kind(
        base: BaseMemoryStore, fingerprint: str, storage: StorageConfig
    ) -> IndexKind:
        """The configured index kind; ``"auto"`` decides by the vectors stored."""
        if storage.vector_index != "auto":
            return storage.vector_index
        stored = len(await base.embedding_ids(fingerprint))
        return "hnsw" if stored > storage.hnsw_threshold else "flat"

    @staticmethod
    async def _catch_up(
        base: BaseMemoryStore, index: VectorIndex, fingerprint: str, dim: int, *, after_seq: int
    ) -> int:
        stored = await base.embedding_ids(fingerprint)
        present = index.ids()
        extra = np.setdiff1d(present, stored, assume_unique=True)
        if len(extra):
            index.remove(extra.tolist())
        ids, matrix, applied = await base.load_vectors(fingerprint, dim, after_seq=after_seq)
        if len(ids):
            index.add(ids, matrix)
        missing = np.setdiff1d(stored, index.ids(), assume_unique=True)
        if len(missing):
            vectors = await base.vectors_for(fingerprint, dim, missing.tolist())
            if vectors:
                keys = np.fromiter(vectors.keys(), dtype=np.int64, count=len(vectors))
                index.add(keys, np.stack(list(vectors.values())))
        if len(extra) or len(ids) or len(missing):
            logger.info(
                "%s: vector snapshot caught up (+%d changed, +%d missing, -%d removed)",
                base.agent,
                len(ids),
                len(missing),
                len(extra),
            )
        return max(applied, after_seq)

    # -- public ------------------------------------------------------------

    @property
    def index(self) -> VectorIndex:
        return self._index

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def target(self) -> Embedder | None:
        """The configured embedder when another one's vectors still serve searches
        (until :meth:`switch_to` puts its vectors in), else ``None``."""
        return self._target

    def switch_to(self, embedder: Embedder, ids: np.ndarray, matrix: np.ndarray) -> None:
        """Serve ``embedder``'s vectors ``ids``/``matrix`` from now on (the rebuilt
        generation, already swapped in SQLite); the graph entries are embedded again."""
        index = VectorIndex(
            embedder.dim, kind=self._index.kind, ef_search=self._storage.hnsw_ef_search
        )
        if len(ids):
            index.add(ids, np.ascontiguousarray(matrix, dtype=np.float32))
        self._index = index
        self._embedder = embedder
        self._target = None
        self._refused.clear()
        self._refused_entries.clear()
        fingerprint = embedder.fingerprint
        self._stamp = f"{fingerprint}#db={self._instance}" if self._instance else fingerprint
        self._dirty = max(index.ntotal, 1)
        if self._graph_index is not None:
            self._graph_index = VectorIndex(embedder.dim)
        self.notify()

    @property
    def unavailable(self) -> str | None:
        """Why the embedder could not be reached on the last attempt, or ``None``."""
        return self._unavailable

    async def flush(self) -> None:
        """Wait until every memory stored before this call is embedded and indexed, or
        refused by the embedder (tried again later, see the module docstring), or
        until an attempt found the embedder unavailable (:attr:`unavailable`; those
        memories are embedded when it answers again)."""
        await super().flush()

    def _settled(self) -> bool:
        return self._unavailable is not None

    async def embed_query(self, text: str) -> np.ndarray:
        """The query's vector.

        Raises:
            EmbeddingUnavailable: the embedder was unavailable on the worker's last
                attempt (not asked again before its next one) or now.
        """
        if self._unavailable is not None and self._monotonic() < self._down_until:
            raise EmbeddingUnavailable(f"the embedder is unavailable: {self._unavailable}")
        return await embed_query(self._embedder, text)

    async def catch_up(self) -> int:
        """Load the vectors another process wrote since this index last did (a search
        there then finds what the agent writing them finds); how many."""
        async with self._catching_up:  # a search beside it waits until they are in
            if self._closed or not await self._base.written_elsewhere():
                return 0
            added, loaded = await self._load_written_elsewhere()
            self._applied_seq = max(self._applied_seq, loaded)
            return added

    async def _load_written_elsewhere(self) -> tuple[int, int]:
        """Add the vectors after the applied sequence (another process wrote them):
        how many, and the highest sequence read."""
        fingerprint, dim = self._embedder.fingerprint, self._embedder.dim
        ids, matrix, loaded = await self._base.load_vectors(
            fingerprint, dim, after_seq=self._applied_seq
        )
        if len(ids):
            await asyncio.to_thread(self._index.add, ids, matrix)
            self._dirty += len(ids)
        logger.debug("%s: %d vectors written elsewhere caught up", self._base.agent, len(ids))
        return len(ids), loaded

    async def search(
        self, query: np.ndarray, k: int, *, allowed_ids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        if self._index.ntotal == 0 or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if self._index.ntotal <= 20_000:
            return self._index.search(query, k, allowed_ids=allowed_ids)
        return await asyncio.to_thread(self._index.search, query, k, allowed_ids=allowed_ids)

    async def search_graph(
        self, query: np.ndarray, k: int, *, allowed_ids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Search the graph entries' vectors (empty without a graph)."""
        index = self._graph_index
        if index is None or index.ntotal == 0 or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if index.ntotal <= 20_000:
            return index.search(query, k, allowed_ids=allowed_ids)
        return await asyncio.to_thread(index.search, query, k, allowed_ids=allowed_ids)

    def mark_changed(self, count: int) -> None:
        """Record that ``count`` vectors of :attr:`index` were changed directly (by a
        repair or a rebuild), so that the next snapshot holds them."""
        self._dirty += max(int(count), 1)

    def remove(self, memory_ids: Iterable[int]) -> None:
        ids = list(memory_ids)
        self._refused.discard(ids)
        self._refused_entries.discard(ids)
        removed = self._index.remove(ids)
        self._dirty += removed
        if self._graph_index is not None:
            self._graph_index.remove(ids)

    async def aclose(self) -> None:
        """Embed what waits, for at most ``StorageConfig.embed_on_close_seconds``, then
        stop the worker and write a final snapshot if anything changed.

        Only what this open was told of waits (stores, derived graphs, what an earlier
        run left when the memory embeds on open): a look that embeds nothing on open
        embeds nothing on close. An embedder found unavailable is not waited for; what
        is left is embedded after the next open. A memory kept in memory ends with
        its close: nothing is embedded for it.
        """
        if self._closed:
            return
        within = self._storage.embed_on_close_seconds
        if (
            within > 0
            and self.maybe_pending
            and self._base.path is not None
            and not await self.finish(within)
        ):
            logger.info(
                "%s: embedding did not finish on closing (%s); what is left is embedded "
                "after the next open",
                self._base.agent,
                self._unavailable or f"still embedding after {within:g} s",
            )
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        await super().aclose()
        if self._dirty and self._snapshot_path is not None and not self._base.closed:
            try:
                await self._persist()
            except StorageError as exc:
                logger.warning("%s: final vector snapshot not written: %s", self._base.agent, exc)

    # -- worker --------------------------------------------------------------

    async def _pass(self) -> bool:
        try:
            await self._embed_pending()
            await self._embed_graph_pending()
        except EmbeddingUnavailable as exc:
            await self._defer(str(exc))
            return False
        if self._unavailable is not None:
            logger.warning("%s: the embedder answers again", self._base.agent)
        self._unavailable = None
        self._reported = None
        self._retry_delay = RETRY_FIRST_SECONDS
        return True

    def _refusals(self, what: str) -> Refusals[Any]:
        """The refusals of one kind of item, with the retry settings read now (so
        that a test may shorten them)."""
        return Refusals(
            self._base.agent,
            what,
            first=RETRY_FIRST_SECONDS,
            longest=RETRY_MAX_SECONDS,
            attempts=REFUSED_ATTEMPTS,
        )

    async def _after_pass(self) -> None:
        """Write a snapshot if due; wake again when the first refused memory is due."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        due = min(self._refused.next_due(), self._refused_entries.next_due())
        if due < math.inf and not self._closed:
            self._retry = asyncio.get_running_loop().call_at(due, self.notify)
        await self._maybe_persist()

    async def _defer(self, reason: str) -> None:
        """The embedder is unavailable: tell waiters, wait, then try again."""
        delay = self._retry_delay
        self._retry_delay = min(delay * 2.0, RETRY_MAX_SECONDS)
        self._unavailable = reason
        self._down_until = self._monotonic() + delay
        if reason != self._reported:
            logger.warning(
                "%s: embedding deferred (%s); the memories are found by keywords and "
                "embedded when it answers (next try in %.0f s)",
                self._base.agent,
                reason,
                delay,
            )
            self._reported = reason
        async with self._progress:
            self._progress.notify_all()
        await asyncio.sleep(delay)
        self._wake.set()

    async def _embed_pending(self) -> None:
        """Embed every memory without a vector of this embedder, batch by batch.

        The previous batch's vectors are written while the next batch is embedded.
        An embedder that answers over the network is also handed the batch after
        next before the current one is answered, so its requests follow each other
        without a gap between batches (it bounds the requests in flight itself).
        """
        fingerprint, dim = self._embedder.fingerprint, self._embedder.dim
        ahead = 2 if is_async_embedder(self._embedder) else 1
        cursor = 0
        exhausted = False
        seen: set[int] = set()
        embedding: list[asyncio.Future[tuple[list[PendingVector], np.ndarray]]] = []
        writing: asyncio.Task[None] | None = None

        async def hand_over(up_to: int) -> None:
            nonlocal cursor, exhausted
            while not exhausted and len(embedding) < up_to:
                batch, cursor = await self._next_pending(fingerprint, cursor, seen)
                if batch is None:
                    exhausted = True
                    # forget the refusals of memories no longer waiting (deleted)
                    self._refused.keep_only(seen)
                else:
                    embedding.append(
                        asyncio.ensure_future(self._refused.embed(self._embedder, batch))
                    )

        try:
            while not self._closed:
                await hand_over(ahead)
                if not embedding:
                    return
                batch, vectors = await embedding.pop(0)
                if ahead > 1:  # the next batch is on its way before this one is written
                    await hand_over(ahead)
                if writing is not None:
                    done, writing = writing, None
                    await done
                if batch:
                    writing = asyncio.ensure_future(self._keep(fingerprint, dim, batch, vectors))
        finally:
            for pending in embedding:
                pending.cancel()
            if embedding:
                await asyncio.gather(*embedding, return_exceptions=True)
            try:
                if writing is not None:
                    await writing
            finally:
                self._report_refusals()

    async def _next_pending(
        self, fingerprint: str, cursor: int, seen: set[int]
    ) -> tuple[list[PendingVector] | None, int]:
        """The next batch to embed after ``cursor`` (``None`` when none is left), and the
        cursor past it; the ids of the memories waiting are added to ``seen``."""
        batch_size = self._storage.embed_batch_size
        while True:
            fetched = await self._base.pending_embeddings(fingerprint, batch_size, after_id=cursor)
            if not fetched:
                return None, cursor
            cursor = fetched[-1].memory_id  # past the refused ones too: they stall nothing
            seen.update(item.memory_id for item in fetched)
            # A memory waits here with its vector in FAISS when the turn that vector
            # was made with changed or went (storage.embeddings): out of searches
            # until it is embedded again.
            dropped = self._index.remove([item.memory_id for item in fetched])
            self._dirty += dropped
            now = asyncio.get_running_loop().time()
            batch = [item for item in fetched if self._refused.due(item, now)]
            if batch:
                return batch, cursor

    def _report_refusals(self) -> None:
        """Log the memories' refusals first met in this pass, once per reason."""
        self._report(self._refused, ("memory", "memories"), "not embedded", "", "by keywords")

    def _report_entry_refusals(self) -> None:
        """Log the graph entries' refusals first met in this pass, once per reason."""
        self._report(
            self._refused_entries,
            ("graph entry", "graph entries"),
            "left without a vector",
            "memory ",
            "through their entities",
        )

    def _report(
        self,
        refused: Refusals[PendingVector] | Refusals[PendingEntry],
        kind: tuple[str, str],
        outcome: str,
        label: str,
        found: str,
    ) -> None:
        """Log the refusals of ``refused`` first met, once per reason: how many of
        ``kind`` (one, many) were ``outcome``, their ``label`` ids, how they are
        ``found`` meanwhile, and when they are tried again."""
        for refusal in refused.take_new():
            ids, exc = refusal.memory_ids, refusal.error
            shown = ", ".join(str(i) for i in ids[:10]) + (", ..." if len(ids) > 10 else "")
            logger.warning(
                "%s: %d %s %s (%sid%s %s): %s; found %s, tried again in %.0f s (doubling, "
                "at most %d times while open), when changed, and on the next open",
                self._base.agent,
                len(ids),
                kind[0] if len(ids) == 1 else kind[1],
                outcome,
                label,
                "" if len(ids) == 1 else "s",
                shown,
                refusal.reason,
                found,
                refused.first,
                refused.attempts,
                exc_info=None if isinstance(exc, EmbeddingError) else exc,
            )

    async def _keep(
        self, fingerprint: str, dim: int, batch: list[PendingVector], vectors: np.ndarray
    ) -> None:
        """Write a batch's vectors into SQLite, then into FAISS (those of the memories
        still as they were read for embedding)."""
        items = [(item, vectors[row]) for row, item in enumerate(batch)]
        stored, seq = await self._base.put_embeddings(fingerprint, dim, items)
        if stored:
            kept = set(stored)
            rows = [row for row, item in enumerate(batch) if item.memory_id in kept]
            ids = np.asarray(stored, dtype=np.int64)
            self._index.add(ids, np.ascontiguousarray(vectors[rows], dtype=np.float32))
            self._dirty += len(stored)
        await self._advance(seq, len(items))
        await self._maybe_persist()

    async def _advance(self, seq: int, written: int) -> None:
        """Move the applied sequence to ``seq``, after this process wrote ``written`` vectors
        ending there.

        The snapshot's sequence says that every vector with a lower one is in the
        index, so the next open loads only the vectors after it. Vectors another
        process wrote (an update re-embedded there) take the numbers between this
        index's last and this batch's first: those are loaded first, or the
        snapshot would claim them and keep the old vectors of their memories.
        """
        first = seq - written
        if first > self._applied_seq:
            _, loaded = await self._load_written_elsewhere()
            seq = max(seq, loaded)
        self._applied_seq = max(self._applied_seq, seq)

    async def _embed_graph_pending(self) -> None:
        """Embed the graph entries without a vector, batch by batch (reusing the
        memory's document vector when the summary is its content).

        As with memories, a batch the embedder fails on is embedded in halves and
        the entries it refuses are tried again later (:mod:`.refusals`); meanwhile
        the graph route finds them through their entities.
        """
        graph, index = self._graph, self._graph_index
        if graph is None or index is None:
            return
        fingerprint = self._embedder.fingerprint
        refused = self._refused_entries
        cursor = 0
        seen: set[int] = set()
        try:
            while not self._closed:
                fetched = await graph.pending_vectors(
                    fingerprint, self._storage.embed_batch_size, after_id=cursor
                )
                if not fetched:
                    refused.keep_only(seen)  # forget the entries no longer waiting
                    return
                cursor = fetched[-1][0].memory_id
                seen.update(entry.memory_id for entry, _ in fetched)
                now = asyncio.get_running_loop().time()
                items = [(entry, reuse) for entry, reuse in fetched if reuse is not None]
                fresh = [
                    entry for entry, reuse in fetched if reuse is None and refused.due(entry, now)
                ]
                embedded, matrix = await refused.embed(self._embedder, fresh)
                items += zip(embedded, matrix, strict=True)
                stored = set(await graph.put_vectors(fingerprint, items))
                if stored:
                    kept = [
                        (entry.memory_id, vector)
                        for entry, vector in items
                        if entry.memory_id in stored
                    ]
                    index.add(
                        np.asarray([memory_id for memory_id, _ in kept], dtype=np.int64),
                        np.stack([np.asarray(vector, dtype=np.float32) for _, vector in kept]),
                    )
        finally:
            self._report_entry_refusals()

    async def _maybe_persist(self) -> None:
        if self._snapshot_path is None or not self._dirty:
            return
        threshold = max(
            self._storage.snapshot_min_changes,
            int(self._storage.snapshot_growth_ratio * self._index.ntotal),
        )
        waited = self._monotonic() - self._last_persist
        if self._dirty >= threshold and waited >= self._storage.snapshot_debounce_seconds:
            try:
                await self._persist()
            except StorageError as exc:
                logger.warning("%s: vector snapshot not written: %s", self._base.agent, exc)

    async def _persist(self) -> None:
        assert self._snapshot_path is not None
        previous = await self._base.meta_get(_SNAPSHOT_GENERATION)
        generation = int(previous or 0) + 1
        dirty = self._dirty
        await asyncio.to_thread(
            self._index.save_snapshot,
            self._snapshot_path,
            generation=generation,
            seq=self._applied_seq,
            fingerprint=self._stamp,
        )
        await self._base.meta_set(_SNAPSHOT_GENERATION, str(generation))
        self._dirty -= dirty
        self._last_persist = self._monotonic()
