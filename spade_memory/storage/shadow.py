"""The shadow tables of rebuilds: the keyword index or the vectors built again beside the live one.

A rebuild of ``what`` (``"fts"`` or ``"vectors"``) writes into a shadow table
(``memories_fts_shadow``, ``embeddings_shadow``) while a change log table kept by
triggers on ``memories`` (``rebuild_log_<what>``) records every memory written
meanwhile. :class:`ShadowTables` holds the reads made outside a transaction and
opens :class:`ShadowWriter`, the writes of one transaction: resetting the shadow,
writing it, replaying the log, verifying and swapping it in. The change logs and
the generation counters in ``meta`` are shared with the graph's shadow
(:mod:`.graph_shadow`). :mod:`spade_memory.maintenance.rebuild` orchestrates.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import aiosqlite
import numpy as np

from .embeddings import decode_vectors
from .sql import placeholders

if TYPE_CHECKING:
    from .base import BaseMemoryStore

__all__ = [
    "ShadowTables",
    "ShadowWriter",
    "bump_generation",
    "change_log_statements",
    "drop_change_log",
    "meta_put",
]

_SHADOW = {"fts": "memories_fts_shadow", "vectors": "embeddings_shadow"}
_LIVE = {"fts": "memories_fts", "vectors": "embeddings"}


async def meta_put(db: aiosqlite.Connection, key: str, value: str) -> None:
    """Set one ``meta`` row (inside the caller's transaction)."""
    await db.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


async def bump_generation(db: aiosqlite.Connection, what: str) -> int:
    """Count one more generation of ``what`` in ``meta``; returns the new number."""
    rows = await db.execute_fetchall(
        "SELECT value FROM meta WHERE key = ?", (f"{what}_generation",)
    )
    generation = int(next(iter(rows))[0]) + 1 if rows else 1
    await meta_put(db, f"{what}_generation", str(generation))
    return generation


def change_log_statements(table: str, columns: str, *, next_turns: bool = False) -> list[str]:
    """A change log ``table`` of the memories inserted, deleted, or updated in
    ``columns`` (comma-separated), kept by triggers while a rebuild runs; with
    ``next_turns``, an updated or deleted memory's next turns are logged too (their
    vectors are made with it: :mod:`spade_memory.storage.embeddings`)."""

    def logged(row: str) -> str:
        also = ""
        if next_turns:
            also = (
                f" INSERT INTO {table} (memory_id) "
                f"SELECT id FROM memories WHERE previous_id = {row}.id;"
            )
        return f"BEGIN INSERT INTO {table} (memory_id) VALUES ({row}.id);{also} END"

    return [
        f"CREATE TABLE IF NOT EXISTS {table} "
        "(seq INTEGER PRIMARY KEY AUTOINCREMENT, memory_id INTEGER NOT NULL)",
        f"CREATE TRIGGER IF NOT EXISTS {table}_insert AFTER INSERT ON memories "
        f"BEGIN INSERT INTO {table} (memory_id) VALUES (new.id); END",
        f"CREATE TRIGGER IF NOT EXISTS {table}_update AFTER UPDATE OF {columns} "
        f"ON memories {logged('new')}",
        f"CREATE TRIGGER IF NOT EXISTS {table}_delete AFTER DELETE ON memories {logged('old')}",
    ]


def drop_change_log(table: str) -> list[str]:
    """Statements that drop a change log and its triggers."""
    drops = [f"DROP TRIGGER IF EXISTS {table}_{event}" for event in ("insert", "update", "delete")]
    drops.append(f"DROP TABLE IF EXISTS {table}")
    return drops


def _log_table(what: str) -> str:
    return f"rebuild_log_{what}"


def _drop_statements(what: str) -> list[str]:
    drops = drop_change_log(_log_table(what))
    if what in _SHADOW:
        drops.append(f"DROP TABLE IF EXISTS {_SHADOW[what]}")
    return drops


class ShadowTables:
    """The shadow of ``what`` (``"fts"``, ``"vectors"``; ``"graph"`` has a change log
    only, its shadow is a file: :mod:`.graph_shadow`) of one store.

    Args:
        base: the open store.
        what: what is rebuilt.
        fingerprint: the embedder whose vectors a vectors shadow holds.
    """

    def __init__(self, base: BaseMemoryStore, what: str, *, fingerprint: str | None) -> None:
        self._base = base
        self._what = what
        self._fingerprint = fingerprint

    async def exists(self) -> bool:
        """Whether the shadow table and its change log are both there (it can resume)."""
        rows = await self._base.fetchall(
            "SELECT count(*) FROM sqlite_master WHERE name IN (?, ?)",
            (_SHADOW[self._what], _log_table(self._what)),
        )
        return int(rows[0][0]) == 2

    async def memory_ids_after(self, after_id: int, limit: int) -> list[int]:
        """Up to ``limit`` memory ids above ``after_id``, in order (the next batch)."""
        rows = await self._base.fetchall(
            "SELECT id FROM memories WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)
        )
        return [int(row[0]) for row in rows]

    async def logged(self, limit: int) -> tuple[int, list[int]]:
        """The newest change-log position and up to ``limit`` memory ids logged up to it."""
        table = _log_table(self._what)
        rows = await self._base.fetchall(f"SELECT max(seq) FROM {table}")
        upto = int(rows[0][0] or 0)
        rows = await self._base.fetchall(
            f"SELECT DISTINCT memory_id FROM {table} WHERE seq <= ? ORDER BY memory_id LIMIT ?",
            (upto, limit),
        )
        return upto, [int(row[0]) for row in rows]

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[ShadowWriter]:
        """One write transaction of the rebuild."""
        async with self._base.transaction() as db:
            yield ShadowWriter(db, self._what, fingerprint=self._fingerprint)


class ShadowWriter:
    """The writes of a rebuild of ``what`` inside one transaction (see
    :meth:`ShadowTables.transaction`)."""

    def __init__(self, db: aiosqlite.Connection, what: str, *, fingerprint: str | None) -> None:
        self._db = db
        self._what = what
        self._fingerprint = fingerprint

    async def put_meta(self, key: str, value: str) -> None:
        """Set one ``meta`` row (the rebuild's checkpoint)."""
        await meta_put(self._db, key, value)

    async def drop(self, checkpoint_key: str) -> None:
        """Drop the shadow, its change log and the checkpoint."""
        for statement in _drop_statements(self._what):
            await self._db.execute(statement)
        await self._db.execute("DELETE FROM meta WHERE key = ?", (checkpoint_key,))

    async def start(self, checkpoint_key: str, checkpoint: str) -> None:
        """Drop any earlier shadow and start an empty one (shaped as the live table)
        with its change log, recording ``checkpoint``."""
        what = self._what
        for statement in _drop_statements(what):
            await self._db.execute(statement)
        if what in _SHADOW:
            found = await self._db.execute_fetchall(
                "SELECT sql FROM sqlite_master WHERE name = ?", (_LIVE[what],)
            )
            sql = str(next(iter(found))[0])
            await self._db.execute(sql.replace(_LIVE[what], _SHADOW[what], 1))
            if what == "vectors":  # a vector is made of its memory and the turn before it
                log = change_log_statements(
                    _log_table(what),
                    "content, context, category, owner, visibility",
                    next_turns=True,
                )
            else:
                log = change_log_statements(_log_table(what), "content, context")
            for statement in log:
                await self._db.execute(statement)
        await meta_put(self._db, checkpoint_key, checkpoint)

    async def write(self, memory_id: int, item: Any) -> None:
        """Write a memory's shadow row: ``(content tokens, context tokens)`` or a vector;
        ``None`` removes it. A memory deleted meanwhile gets none."""
        db = self._db
        if self._what == "fts":
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
            (self._fingerprint, int(vector.shape[0]), vector.tobytes(), memory_id),
        )

    async def logged_after(self, upto: int, memory_ids: Sequence[int]) -> set[int]:
        """Which of these memories were logged again after position ``upto``."""
        ids = list(memory_ids)
        rows = await self._db.execute_fetchall(
            f"SELECT DISTINCT memory_id FROM {_log_table(self._what)} WHERE seq > ? "
            f"AND memory_id IN ({placeholders(len(ids))})",
            [upto, *ids],
        )
        return {int(row[0]) for row in rows}

    async def forget_logged(self, upto: int, memory_ids: Sequence[int]) -> None:
        """Remove these memories' change-log rows up to position ``upto`` (replayed)."""
        ids = list(memory_ids)
        await self._db.execute(
            f"DELETE FROM {_log_table(self._what)} WHERE seq <= ? "
            f"AND memory_id IN ({placeholders(len(ids))})",
            [upto, *ids],
        )

    async def all_logged(self) -> list[int]:
        """Every memory id in the change log."""
        rows = await self._db.execute_fetchall(
            f"SELECT DISTINCT memory_id FROM {_log_table(self._what)}"
        )
        return [int(row[0]) for row in rows]

    async def first_failure(self, *, dim: int | None = None) -> str | None:
        """What the shadow fails, or ``None`` when it holds one row per memory, of
        memories only (and, for vectors, all of the fingerprint and ``dim``)."""
        shadow = _SHADOW[self._what]
        column = "rowid" if self._what == "fts" else "memory_id"
        checks = [
            f"SELECT count(*) FROM memories WHERE id NOT IN (SELECT {column} FROM {shadow})",
            f"SELECT count(*) FROM {shadow} WHERE {column} NOT IN (SELECT id FROM memories)",
        ]
        params: list[tuple[Any, ...]] = [(), ()]
        if self._what == "vectors":
            checks.append(f"SELECT count(*) FROM {shadow} WHERE fingerprint != ? OR dim != ?")
            params.append((self._fingerprint, dim))
        for sql, args in zip(checks, params, strict=True):
            bad = int(next(iter(await self._db.execute_fetchall(sql, args)))[0])
            if bad:
                return f"{bad} rows failed: {sql}"
        return None

    async def swap(self, checkpoint_key: str) -> int:
        """Make the shadow the live table (its indexes made again), drop the change log
        and the checkpoint; returns the new generation. Vectors are renumbered after
        every old one (snapshot catch-up)."""
        what, db = self._what, self._db
        shadow, live = _SHADOW[what], _LIVE[what]
        indexes = await db.execute_fetchall(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
            "AND sql IS NOT NULL",
            (live,),
        )
        if what == "vectors":
            await self._renumber()
        await db.execute(f"ALTER TABLE {live} RENAME TO {live}_retired")
        await db.execute(f"ALTER TABLE {shadow} RENAME TO {live}")
        await db.execute(f"DROP TABLE {live}_retired")
        for (sql,) in indexes:
            await db.execute(str(sql))
        for statement in _drop_statements(what):
            await db.execute(statement)
        await db.execute("DELETE FROM meta WHERE key = ?", (checkpoint_key,))
        return await bump_generation(db, what)

    async def _renumber(self) -> None:
        db = self._db
        rows = await db.execute_fetchall(
            "SELECT max(coalesce((SELECT CAST(value AS INTEGER) FROM meta "
            "WHERE key = 'embedding_seq'), 0), coalesce((SELECT max(seq) FROM embeddings), 0))"
        )
        base = int(next(iter(rows))[0])
        await db.execute("UPDATE embeddings_shadow SET seq = ? + memory_id", (base,))
        rows = await db.execute_fetchall("SELECT max(seq) FROM embeddings_shadow")
        top = int(next(iter(rows))[0] or base)
        await meta_put(db, "embedding_seq", str(max(top, base)))

    async def live_vectors(self, fingerprint: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, matrix)`` of every live vector of ``fingerprint`` and ``dim``."""
        rows = await self._db.execute_fetchall(
            "SELECT memory_id, vector FROM embeddings WHERE fingerprint = ? AND dim = ?",
            (fingerprint, dim),
        )
        return decode_vectors(rows, dim)
