"""Rebuilds of a memory's derived data: the keyword index, the vectors, the graph.

The keyword index (``memories_fts``) and the vectors (``embeddings``) are rebuilt
into a shadow table while the live ones keep answering searches. Triggers on
``memories`` log every memory inserted, changed or deleted meanwhile; the log is
replayed into the shadow, then, in one transaction and only once the shadow is
complete and verified, the shadow replaces the live table. A checkpoint in
``meta`` (``rebuild:<what>``) records how far the shadow got, so a rebuild that was
interrupted (an error, a crash, a closed memory) resumes where it stopped; the
change log keeps catching writes while it waits.

The graph is rebuilt the same way, into a shadow database file of its own
(:mod:`.graph_rebuild`, which says how much disk space it takes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..embedding.calls import embed_documents
from ..errors import ConfigError, StorageError
from ..models import Embedder, Memory
from ..storage.base import IndexedText
from ..storage.shadow import ShadowTables, ShadowWriter
from .graph_rebuild import GraphRebuild
from .rewrite import reset_vector_index

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = [
    "REBUILD_KINDS",
    "Progress",
    "RebuildKind",
    "RebuildResult",
    "Rebuilder",
    "report_progress",
]

logger = logging.getLogger(__name__)

RebuildKind = Literal["fts", "vectors", "graph"]
REBUILD_KINDS: tuple[RebuildKind, ...] = ("fts", "vectors", "graph")

Progress = Callable[[int, int], object]
"""Called as ``progress(done, total)`` after each batch; may return an awaitable."""

_MAX_REPLAY_ROUNDS = 20


async def report_progress(progress: Progress | None, done: int, total: int) -> None:
    """Tell ``progress`` how far a job got (awaiting it if it returns an awaitable)."""
    if progress is None:
        return
    result = progress(done, total)
    if inspect.isawaitable(result):
        await result


@dataclass(frozen=True, slots=True)
class RebuildResult:
    """What one rebuild did.

    Attributes:
        what: ``"fts"``, ``"vectors"`` or ``"graph"``.
        processed: memories built by this call (not counting an earlier, interrupted one).
        replayed: memories written during the rebuild and applied before the switch.
        resumed: this call continued an interrupted rebuild.
        generation: the new generation of the rebuilt data.
    """

    what: str
    processed: int
    replayed: int
    resumed: bool
    generation: int | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _checkpoint_key(what: str) -> str:
    return f"rebuild:{what}"


class Rebuilder:
    """Rebuilds one memory's keyword index, vectors or graph, resuming interrupted ones.

    Args:
        engine: the open memory.
        batch: memories per batch (one transaction and one checkpoint each).

    The vectors are rebuilt with the embedder the memory is configured with: when
    another one's vectors still serve searches (an embedder change,
    :attr:`~spade_memory.engine.indexer.VectorIndexer.target`), the new generation is
    built with the configured one and switched in whole, the old vectors serving
    until then.
    """

    def __init__(self, engine: Engine, *, batch: int = 200) -> None:
        if batch < 1:
            raise ConfigError(f"batch must be >= 1, got {batch!r}")
        self._engine = engine
        self._base = engine.base
        self._batch = batch

    async def interrupted(self) -> list[RebuildKind]:
        """The rebuilds that were started and not finished."""
        found: list[RebuildKind] = []
        for what in REBUILD_KINDS:
            if await self._base.meta_get(_checkpoint_key(what)) is not None:
                found.append(what)
        return found

    async def abandon(self, what: RebuildKind) -> None:
        """Drop an unfinished rebuild: its shadow, its change log and its checkpoint."""
        if what == "graph":
            await GraphRebuild(self._engine, batch=self._batch).abandon()
            return
        async with self._shadow(what).transaction() as writer:
            await writer.drop(_checkpoint_key(what))

    async def rebuild(
        self, what: RebuildKind, *, progress: Progress | None = None
    ) -> RebuildResult:
        """Rebuild ``what``, resuming an interrupted rebuild of it if there is one.

        Raises:
            ConfigError: ``what`` is unknown, or vectors were asked of a memory
                without an embedder.
            StorageError: the rebuilt data failed verification (the rebuild was
                dropped; run it again) or the database failed.
        """
        if what not in REBUILD_KINDS:
            raise ConfigError(f"cannot rebuild {what!r}: choose one of {', '.join(REBUILD_KINDS)}")
        if what == "vectors" and self._engine.indexer is None:
            raise ConfigError(
                "this memory has no embedder (MemoryConfig.embedder is None): "
                "there are no vectors to rebuild"
            )
        if what == "graph":

            async def report(done: int, total: int) -> None:
                await report_progress(progress, done, total)

            graph = await GraphRebuild(self._engine, batch=self._batch).run(report)
            return RebuildResult(
                "graph", graph.processed, graph.replayed, graph.resumed, graph.generation
            )
        state, resumed = await self._begin(what)
        shadow = self._shadow(what)
        total = await self._base.count(statuses=None)
        cursor, done = int(state["cursor"]), int(state["done"])
        processed = 0
        await report_progress(progress, min(done, total), total)
        while True:
            ids = await shadow.memory_ids_after(cursor, self._batch)
            if not ids:
                break
            found = await self._base.get_many(ids)
            memories = [found[i] for i in sorted(found)]
            payload = await self._prepare(what, memories)
            cursor, done = ids[-1], done + len(ids)
            async with shadow.transaction() as writer:
                await self._apply(writer, memories, payload)
                state.update(cursor=cursor, done=done)
                await writer.put_meta(_checkpoint_key(what), json.dumps(state))
            processed += len(memories)
            await report_progress(progress, min(done, total), total)
        replayed = await self._replay(what)
        try:
            generation, finals = await self._switch(what)
        except _VerificationFailed as exc:
            await self.abandon(what)
            raise StorageError(
                f"the rebuilt {what} of {self._base.agent} did not match its memories ({exc}); "
                "it was dropped and the live one kept: run the rebuild again"
            ) from exc
        await report_progress(progress, total, total)
        return RebuildResult(what, processed, replayed + finals, resumed, generation)

    # -- steps -------------------------------------------------------------------

    def _embedder(self) -> Embedder:
        """The embedder the rebuilt vectors are made by (the configured one)."""
        indexer = self._engine.indexer
        assert indexer is not None
        return indexer.target or indexer.embedder

    def _fingerprint(self) -> str | None:
        return None if self._engine.indexer is None else self._embedder().fingerprint

    def _shadow(self, what: RebuildKind) -> ShadowTables:
        return ShadowTables(self._base, what, fingerprint=self._fingerprint())

    async def _begin(self, what: RebuildKind) -> tuple[dict[str, Any], bool]:
        """Resume the shadow of ``what`` (fts or vectors) or start a new one."""
        raw = await self._base.meta_get(_checkpoint_key(what))
        if raw is not None:
            try:
                state = json.loads(raw)
            except ValueError:
                state = None
            usable = isinstance(state, dict) and (
                what != "vectors" or state.get("fingerprint") == self._fingerprint()
            )
            if usable and what != "graph":
                usable = await self._shadow(what).exists()
            if usable:
                logger.info("%s: resuming the %s rebuild at %s", self._base.agent, what, state)
                return state, True
            logger.info("%s: restarting a %s rebuild that cannot resume", self._base.agent, what)
        state = {
            "cursor": 0,
            "done": 0,
            "started_at": self._engine.now(),
            "fingerprint": self._fingerprint(),
        }
        async with self._shadow(what).transaction() as writer:
            await writer.start(_checkpoint_key(what), json.dumps(state))
        return state, False

    async def _prepare(self, what: RebuildKind, memories: Sequence[Memory]) -> list[Any]:
        """What to write for each memory, computed outside the write lock."""
        if what == "fts":

            def tokens() -> list[Any]:
                texts = [IndexedText.of(m.content, m.context) for m in memories]
                return [(text.content_tokens, text.context_tokens) for text in texts]

            return await asyncio.to_thread(tokens)
        if not memories:
            return []
        texts = await self._base.vector_texts([m.id for m in memories])
        matrix = await embed_documents(
            self._embedder(), [texts.get(m.id, m.content) for m in memories]
        )
        return list(np.asarray(matrix, dtype=np.float32))

    async def _apply(
        self, writer: ShadowWriter, memories: Sequence[Memory], payload: Sequence[Any]
    ) -> None:
        for memory, item in zip(memories, payload, strict=True):
            await writer.write(memory.id, item)

    async def _payloads(self, what: RebuildKind, ids: Sequence[int]) -> dict[int, Any]:
        """What to write for each of these memories that still exists."""
        found = await self._base.get_many(ids) if ids else {}
        present = [found[i] for i in ids if i in found]
        prepared = await self._prepare(what, present)
        return {memory.id: item for memory, item in zip(present, prepared, strict=True)}

    async def _replay(self, what: RebuildKind) -> int:
        """Apply memories written since the shadow passed them (outside the write lock)."""
        shadow = self._shadow(what)
        replayed = 0
        for _ in range(_MAX_REPLAY_ROUNDS):
            upto, ids = await shadow.logged(self._batch)
            if not ids:
                break
            payload = await self._payloads(what, ids)
            async with shadow.transaction() as writer:
                again = await writer.logged_after(upto, ids)  # changed once more: next round
                settled = [i for i in ids if i not in again]
                for memory_id in settled:
                    await writer.write(memory_id, payload.get(memory_id))
                if settled:
                    await writer.forget_logged(upto, settled)
            replayed += len(settled)
        return replayed

    async def _switch(self, what: RebuildKind) -> tuple[int, int]:
        """Apply the last logged writes, verify the shadow and swap it in; one transaction."""
        async with self._shadow(what).transaction() as writer:
            ids = await writer.all_logged()
            payload = await self._payloads(what, ids)
            for memory_id in ids:
                await writer.write(memory_id, payload.get(memory_id))
            dim = None
            if what == "vectors":
                dim = self._embedder().dim
            failure = await writer.first_failure(dim=dim)
            if failure is not None:
                raise _VerificationFailed(failure)
            generation = await writer.swap(_checkpoint_key(what))
        if what == "vectors":
            await self._reload_index()
        self._engine.notify_changed()
        logger.info("%s: %s rebuilt (generation %d)", self._base.agent, what, generation)
        return generation, len(ids)

    async def _reload_index(self) -> None:
        """Make the FAISS cache hold exactly the new vectors (under the write lock)."""
        indexer = self._engine.indexer
        assert indexer is not None
        embedder = self._embedder()
        fingerprint, dim = embedder.fingerprint, embedder.dim
        async with self._shadow("vectors").transaction() as writer:
            ids, matrix = await writer.live_vectors(fingerprint, dim)
            if embedder is not indexer.embedder:  # the new embedder's generation
                indexer.switch_to(embedder, ids, matrix)
                self._engine.retriever.use_vectors(fingerprint, dim)
                logger.info("%s: now searching the vectors of %s", self._base.agent, fingerprint)
                return
            await asyncio.to_thread(reset_vector_index, indexer.index, ids, matrix)
            indexer.mark_changed(len(ids))


class _VerificationFailed(StorageError):
    """The shadow did not match the memories; the switch was not made."""
