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

import aiosqlite
import numpy as np

from ..errors import ConfigError, StorageError
from ..models import Memory
from ..storage.base import IndexedText
from ..storage.sql import placeholders
from .graph_rebuild import GraphRebuild
from .rewrite import (
    bump_generation,
    change_log_statements,
    drop_change_log,
    meta_put,
    reset_vector_index,
    vectors_of,
)

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
_SHADOW = {"fts": "memories_fts_shadow", "vectors": "embeddings_shadow"}
_LIVE = {"fts": "memories_fts", "vectors": "embeddings"}


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


def _log_table(what: str) -> str:
    return f"rebuild_log_{what}"


def _log_statements(what: str) -> list[str]:
    return change_log_statements(_log_table(what), "content, context")


def _drop_statements(what: str) -> list[str]:
    drops = drop_change_log(_log_table(what))
    if what in _SHADOW:
        drops.append(f"DROP TABLE IF EXISTS {_SHADOW[what]}")
    return drops


class Rebuilder:
    """Rebuilds one memory's keyword index, vectors or graph, resuming interrupted ones.

    Args:
        engine: the open memory.
        batch: memories per batch (one transaction and one checkpoint each).
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
        async with self._base.transaction() as db:
            for statement in _drop_statements(what):
                await db.execute(statement)
            await db.execute("DELETE FROM meta WHERE key = ?", (_checkpoint_key(what),))

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
        total = await self._base.count(statuses=None)
        cursor, done = int(state["cursor"]), int(state["done"])
        processed = 0
        await report_progress(progress, min(done, total), total)
        while True:
            rows = await self._base.fetchall(
                "SELECT id FROM memories WHERE id > ? ORDER BY id LIMIT ?", (cursor, self._batch)
            )
            if not rows:
                break
            found = await self._base.get_many(int(row[0]) for row in rows)
            memories = [found[i] for i in sorted(found)]
            payload = await self._prepare(what, memories)
            cursor, done = int(rows[-1][0]), done + len(rows)
            async with self._base.transaction() as db:
                await self._apply(what, db, memories, payload)
                state.update(cursor=cursor, done=done)
                await meta_put(db, _checkpoint_key(what), json.dumps(state))
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

    def _fingerprint(self) -> str | None:
        indexer = self._engine.indexer
        return None if indexer is None else indexer.embedder.fingerprint

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
            if usable and what in _SHADOW:
                rows = await self._base.fetchall(
                    "SELECT count(*) FROM sqlite_master WHERE name IN (?, ?)",
                    (_SHADOW[what], _log_table(what)),
                )
                usable = int(rows[0][0]) == 2
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
        async with self._base.transaction() as db:
            for statement in _drop_statements(what):
                await db.execute(statement)
            if what in _SHADOW:
                found = await db.execute_fetchall(
                    "SELECT sql FROM sqlite_master WHERE name = ?", (_LIVE[what],)
                )
                sql = str(next(iter(found))[0])
                await db.execute(sql.replace(_LIVE[what], _SHADOW[what], 1))
                for statement in _log_statements(what):
                    await db.execute(statement)
            await meta_put(db, _checkpoint_key(what), json.dumps(state))
        return state, False

    async def _prepare(self, what: RebuildKind, memories: Sequence[Memory]) -> list[Any]:
        """What to write for each memory, computed outside the write lock."""
        if what == "fts":

            def tokens() -> list[Any]:
                texts = [IndexedText.of(m.content, m.context) for m in memories]
                return [(text.content_tokens, text.context_tokens) for text in texts]

            return await asyncio.to_thread(tokens)
        indexer = self._engine.indexer
        assert indexer is not None
        if not memories:
            return []
        matrix = await asyncio.to_thread(
            indexer.embedder.embed_documents, [m.content for m in memories]
        )
        return list(np.asarray(matrix, dtype=np.float32))

    async def _apply(
        self,
        what: RebuildKind,
        db: aiosqlite.Connection,
        memories: Sequence[Memory],
        payload: Sequence[Any],
    ) -> None:
        for memory, item in zip(memories, payload, strict=True):
            await self._write_shadow(what, db, memory.id, item)

    async def _write_shadow(
        self, what: RebuildKind, db: aiosqlite.Connection, memory_id: int, item: Any
    ) -> None:
        if what == "fts":
            await db.execute("DELETE FROM memories_fts_shadow WHERE rowid = ?", (memory_id,))
            if item is not None:
                await db.execute(
                    "INSERT INTO memories_fts_shadow (rowid, content_tokens, context_tokens) "
                    "SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?)",
                    (memory_id, item[0], item[1], memory_id),
                )
            return
        if item is None:
            await db.execute("DELETE FROM embeddings_shadow WHERE memory_id = ?", (memory_id,))
            return
        vector = np.ascontiguousarray(item, dtype=np.float32)
        await db.execute(
            "INSERT INTO embeddings_shadow (memory_id, fingerprint, dim, vector, seq) "
            "SELECT id, ?, ?, ?, 0 FROM memories WHERE id = ? ON CONFLICT (memory_id) DO UPDATE "
            "SET fingerprint = excluded.fingerprint, dim = excluded.dim, vector = excluded.vector",
            (self._fingerprint(), int(vector.shape[0]), vector.tobytes(), memory_id),
        )

    async def _payloads(self, what: RebuildKind, ids: Sequence[int]) -> dict[int, Any]:
        """What to write for each of these memories that still exists."""
        found = await self._base.get_many(ids) if ids else {}
        present = [found[i] for i in ids if i in found]
        prepared = await self._prepare(what, present)
        return {memory.id: item for memory, item in zip(present, prepared, strict=True)}

    async def _logged(self, what: RebuildKind, limit: int) -> tuple[int, list[int]]:
        """The newest log position and up to ``limit`` memory ids logged up to it."""
        table = _log_table(what)
        rows = await self._base.fetchall(f"SELECT max(seq) FROM {table}")
        upto = int(rows[0][0] or 0)
        rows = await self._base.fetchall(
            f"SELECT DISTINCT memory_id FROM {table} WHERE seq <= ? ORDER BY memory_id LIMIT ?",
            (upto, limit),
        )
        return upto, [int(row[0]) for row in rows]

    async def _replay(self, what: RebuildKind) -> int:
        """Apply memories written since the shadow passed them (outside the write lock)."""
        table = _log_table(what)
        replayed = 0
        for _ in range(_MAX_REPLAY_ROUNDS):
            upto, ids = await self._logged(what, self._batch)
            if not ids:
                break
            payload = await self._payloads(what, ids)
            async with self._base.transaction() as db:
                rows = await db.execute_fetchall(
                    f"SELECT DISTINCT memory_id FROM {table} WHERE seq > ? "
                    f"AND memory_id IN ({placeholders(len(ids))})",
                    [upto, *ids],
                )
                again = {int(row[0]) for row in rows}  # changed once more: next round
                settled = [i for i in ids if i not in again]
                for memory_id in settled:
                    await self._write_shadow(what, db, memory_id, payload.get(memory_id))
                if settled:
                    await db.execute(
                        f"DELETE FROM {table} WHERE seq <= ? "
                        f"AND memory_id IN ({placeholders(len(settled))})",
                        [upto, *settled],
                    )
            replayed += len(settled)
        return replayed

    async def _switch(self, what: RebuildKind) -> tuple[int, int]:
        """Apply the last logged writes, verify the shadow and swap it in; one transaction."""
        table, shadow, live = _log_table(what), _SHADOW[what], _LIVE[what]
        column = "rowid" if what == "fts" else "memory_id"
        async with self._base.transaction() as db:
            rows = await db.execute_fetchall(f"SELECT DISTINCT memory_id FROM {table}")
            ids = [int(row[0]) for row in rows]
            payload = await self._payloads(what, ids)
            for memory_id in ids:
                await self._write_shadow(what, db, memory_id, payload.get(memory_id))
            checks = [
                f"SELECT count(*) FROM memories WHERE id NOT IN (SELECT {column} FROM {shadow})",
                f"SELECT count(*) FROM {shadow} WHERE {column} NOT IN (SELECT id FROM memories)",
            ]
            params: list[tuple[Any, ...]] = [(), ()]
            if what == "vectors":
                indexer = self._engine.indexer
                assert indexer is not None
                checks.append(f"SELECT count(*) FROM {shadow} WHERE fingerprint != ? OR dim != ?")
                params.append((indexer.embedder.fingerprint, indexer.embedder.dim))
            for sql, args in zip(checks, params, strict=True):
                bad = int(next(iter(await db.execute_fetchall(sql, args)))[0])
                if bad:
                    raise _VerificationFailed(f"{bad} rows failed: {sql}")
            indexes = await db.execute_fetchall(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
                "AND sql IS NOT NULL",
                (live,),
            )
            if what == "vectors":
                await self._renumber(db)
            await db.execute(f"ALTER TABLE {live} RENAME TO {live}_retired")
            await db.execute(f"ALTER TABLE {shadow} RENAME TO {live}")
            await db.execute(f"DROP TABLE {live}_retired")
            for (sql,) in indexes:
                await db.execute(str(sql))
            for statement in _drop_statements(what):
                await db.execute(statement)
            await db.execute("DELETE FROM meta WHERE key = ?", (_checkpoint_key(what),))
            generation = await bump_generation(db, what)
        if what == "vectors":
            await self._reload_index()
        self._engine.notify_changed()
        logger.info("%s: %s rebuilt (generation %d)", self._base.agent, what, generation)
        return generation, len(ids)

    async def _renumber(self, db: aiosqlite.Connection) -> None:
        """Give the new vectors change numbers after every old one (snapshot catch-up)."""
        rows = await db.execute_fetchall(
            "SELECT max(coalesce((SELECT CAST(value AS INTEGER) FROM meta "
            "WHERE key = 'embedding_seq'), 0), coalesce((SELECT max(seq) FROM embeddings), 0))"
        )
        base = int(next(iter(rows))[0])
        await db.execute("UPDATE embeddings_shadow SET seq = ? + memory_id", (base,))
        rows = await db.execute_fetchall("SELECT max(seq) FROM embeddings_shadow")
        top = int(next(iter(rows))[0] or base)
        await meta_put(db, "embedding_seq", str(max(top, base)))

    async def _reload_index(self) -> None:
        """Make the FAISS cache hold exactly the new vectors (under the write lock)."""
        indexer = self._engine.indexer
        assert indexer is not None
        fingerprint, dim = indexer.embedder.fingerprint, indexer.embedder.dim
        async with self._base.transaction() as db:
            rows = await db.execute_fetchall(
                "SELECT memory_id, vector FROM embeddings WHERE fingerprint = ? AND dim = ?",
                (fingerprint, dim),
            )
            ids, matrix = vectors_of(rows, dim)
            await asyncio.to_thread(reset_vector_index, indexer.index, ids, matrix)
            indexer.mark_changed(len(ids))


class _VerificationFailed(StorageError):
    """The shadow did not match the memories; the switch was not made."""
