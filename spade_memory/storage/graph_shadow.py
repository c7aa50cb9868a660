"""The shadow of a graph rebuild: a database file of its own, then swapped into the live tables.

:class:`GraphShadowFile` is the shadow file's connection (the graph tables shaped
as the live ones, plus ``rebuild_state``, its checkpoint); the functions below are
the rebuild's reads and writes of the live database: its change log
(``rebuild_log_graph``), and :func:`switching`, behind the write lock, which
attaches the shadow, verifies it against the memories and, in one transaction,
empties the live graph tables and fills them from it.
:mod:`spade_memory.maintenance.graph_rebuild` orchestrates.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import aiosqlite

from ..errors import StorageError
from ..models import Memory
from ..text.graph import MemoryGraph
from .files import create_private
from .graph import delete_graph, settle_all_claims, write_graph
from .on_thread import run_on_connection, unattended
from .shadow import bump_generation, change_log_statements, drop_change_log, meta_put
from .sql import placeholders

if TYPE_CHECKING:
    from .base import BaseMemoryStore

__all__ = [
    "GraphShadowFile",
    "GraphSwitch",
    "ShadowLocked",
    "ShadowMismatch",
    "change_log_exists",
    "drop_change_log_of",
    "forget_logged",
    "graph_table_sql",
    "logged",
    "max_memory_id",
    "memory_ids_between",
    "start_change_log",
    "switching",
]

_ATTACHED = "graph_shadow"
# The live tables are emptied children first and filled parents first.
_EMPTY = (
    "graph_embeddings",
    "graph_entry_nodes",
    "graph_entries_fts",
    "graph_edges",
    "graph_entries",
    "memory_atoms",
    "graph_nodes",
)
_FILL = tuple(
    table for table in reversed(_EMPTY) if table not in ("graph_embeddings", "graph_entries_fts")
)
_TABLES = frozenset(_EMPTY)
# The shadow is sound when each of these counts nothing ({s}: the attached shadow).
_CHECKS = tuple(
    sql.format(s=_ATTACHED)
    for sql in (
        "SELECT count(*) FROM main.memories WHERE id NOT IN "
        "(SELECT memory_id FROM {s}.memory_atoms)",
        "SELECT count(*) FROM {s}.memory_atoms WHERE memory_id NOT IN "
        "(SELECT id FROM main.memories)",
        "SELECT count(*) FROM {s}.graph_entries WHERE memory_id NOT IN "
        "(SELECT id FROM main.memories)",
        "SELECT count(*) FROM {s}.graph_edges WHERE memory_id NOT IN "
        "(SELECT id FROM main.memories) OR source_id NOT IN (SELECT id FROM {s}.graph_nodes) "
        "OR target_id NOT IN (SELECT id FROM {s}.graph_nodes)",
        "SELECT count(*) FROM {s}.graph_entry_nodes WHERE memory_id NOT IN (SELECT memory_id "
        "FROM {s}.graph_entries) OR node_id NOT IN (SELECT id FROM {s}.graph_nodes)",
        "SELECT (SELECT count(*) FROM {s}.graph_entries) - (SELECT count(*) FROM "
        "{s}.graph_entries_fts WHERE rowid IN (SELECT memory_id FROM {s}.graph_entries))",
    )
)


class ShadowLocked(StorageError):
    """The shadow file is held by another connection (another process rebuilding)."""


class ShadowMismatch(StorageError):
    """The shadow did not match the memories; the switch was not made."""


class GraphShadowFile:
    """The connection to a graph rebuild's shadow file; :meth:`open` it first.

    Args:
        agent: the owner, for error messages.
    """

    def __init__(self, agent: str) -> None:
        self._agent = agent
        self._db: aiosqlite.Connection | None = None

    async def open(self, path: Path) -> None:
        """Open (or create) the shadow file, held exclusively until :meth:`close`.

        Raises:
            ShadowLocked: another connection holds it.
            StorageError: it could not be opened.
        """
        await self.close()
        try:
            create_private(path)
        except OSError as exc:
            raise StorageError(f"could not create {path}: {exc}") from exc
        try:
            db = await unattended(str(path), isolation_level=None, timeout=0.2)
            try:
                # Held until closed: a second rebuild of the same memory cannot open it.
                await db.execute("PRAGMA locking_mode = EXCLUSIVE")
                await db.execute("PRAGMA journal_mode = WAL")
                await db.execute("PRAGMA synchronous = NORMAL")
            except BaseException:
                await db.close()
                raise
        except sqlite3.Error as exc:
            raise _shadow_error(exc, path) from exc
        self._db = db

    async def close(self) -> None:
        """Close the connection, if open; idempotent."""
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error, ValueError):
                await db.close()

    def _connection(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StorageError(f"the graph rebuild of {self._agent} has no shadow open")
        return self._db

    async def create(self, tables: Sequence[Sequence[str]], state: dict[str, str]) -> None:
        """Create the tables (``[name, sql]`` pairs) and the checkpoint ``state``, in one
        transaction."""
        db = self._connection()
        await db.execute("BEGIN IMMEDIATE")
        for _, sql in tables:
            await db.execute(sql)
        await db.execute("CREATE TABLE rebuild_state (key TEXT PRIMARY KEY, value TEXT)")
        await db.executemany(
            "INSERT INTO rebuild_state (key, value) VALUES (?, ?)", list(state.items())
        )
        await db.execute("COMMIT")

    async def state(self) -> dict[str, str]:
        """The checkpoint of the shadow.

        Raises:
            ShadowLocked: another connection holds the file.
            StorageError: it could not be read.
        """
        try:
            rows = await self._connection().execute_fetchall("SELECT key, value FROM rebuild_state")
        except sqlite3.Error as exc:
            raise _shadow_error(exc, None) from exc
        return {str(row[0]): str(row[1]) for row in rows}

    async def write(
        self,
        items: Sequence[tuple[Memory, MemoryGraph]],
        *,
        replace: Sequence[int] = (),
        checkpoint: tuple[int, int] | None = None,
    ) -> None:
        """Write graphs in one transaction of the shadow.

        ``replace`` names memories whose shadow graph goes first (replayed writes);
        ``checkpoint`` ``(cursor, done)`` is recorded with them.
        """
        db = self._connection()
        await db.execute("BEGIN IMMEDIATE")
        try:
            for memory_id in replace:
                await delete_graph(db, memory_id, settle=False)
            for memory, graph in items:
                await write_graph(db, memory.id, graph, now=memory.updated_at, settle=False)
            if checkpoint is not None:
                cursor, done = checkpoint
                await db.executemany(
                    "UPDATE rebuild_state SET value = ? WHERE key = ?",
                    [(str(cursor), "cursor"), (str(done), "done")],
                )
            await db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await asyncio.shield(db.execute("ROLLBACK"))
            raise


def _shadow_error(exc: sqlite3.Error, path: Path | None) -> StorageError:
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return ShadowLocked(str(exc))
    where = "" if path is None else f" {path}"
    return StorageError(f"the graph rebuild shadow{where} failed: {exc}")


# -- the live database -------------------------------------------------------------


async def graph_table_sql(base: BaseMemoryStore) -> list[list[str]]:
    """``[name, sql]`` of the live graph tables, then of their indexes."""
    rows = await base.fetchall(
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE type IN ('table', 'index') AND sql IS NOT NULL ORDER BY type DESC, name"
    )
    return [[str(r[1]), str(r[3])] for r in rows if str(r[2]) in _TABLES]


async def max_memory_id(base: BaseMemoryStore) -> int:
    """The largest memory id (0 when there is none)."""
    rows = await base.fetchall("SELECT coalesce(max(id), 0) FROM memories")
    return int(rows[0][0])


async def memory_ids_between(
    base: BaseMemoryStore, after_id: int, upto_id: int, limit: int
) -> list[int]:
    """Up to ``limit`` memory ids above ``after_id`` and at most ``upto_id``, in order."""
    rows = await base.fetchall(
        "SELECT id FROM memories WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
        (after_id, upto_id, limit),
    )
    return [int(row[0]) for row in rows]


async def change_log_exists(base: BaseMemoryStore, table: str) -> bool:
    """Whether the change log ``table`` is there."""
    rows = await base.fetchall("SELECT count(*) FROM sqlite_master WHERE name = ?", (table,))
    return bool(int(rows[0][0]))


async def start_change_log(
    base: BaseMemoryStore,
    table: str,
    columns: str,
    *,
    checkpoint_key: str,
    checkpoint: str,
) -> None:
    """Start the change log ``table`` afresh and record ``checkpoint``, in one transaction."""
    async with base.transaction() as db:
        for statement in (*drop_change_log(table), *change_log_statements(table, columns)):
            await db.execute(statement)
        await meta_put(db, checkpoint_key, checkpoint)


async def drop_change_log_of(base: BaseMemoryStore, table: str, *, checkpoint_key: str) -> None:
    """Drop the change log ``table`` and the checkpoint, in one transaction."""
    async with base.transaction() as db:
        for statement in drop_change_log(table):
            await db.execute(statement)
        await db.execute("DELETE FROM meta WHERE key = ?", (checkpoint_key,))


async def logged(base: BaseMemoryStore, table: str, limit: int) -> tuple[int, list[int]]:
    """The newest position of change log ``table`` and up to ``limit`` ids logged up to it."""
    rows = await base.fetchall(f"SELECT coalesce(max(seq), 0) FROM {table}")
    upto = int(rows[0][0])
    rows = await base.fetchall(
        f"SELECT DISTINCT memory_id FROM {table} WHERE seq <= ? ORDER BY memory_id LIMIT ?",
        (upto, limit),
    )
    return upto, [int(row[0]) for row in rows]


async def forget_logged(
    base: BaseMemoryStore, table: str, upto: int, memory_ids: Sequence[int]
) -> None:
    """Remove these memories' rows of change log ``table`` up to ``upto`` (replayed)."""
    async with base.transaction() as db:
        marks = placeholders(len(memory_ids))
        await db.execute(
            f"DELETE FROM {table} WHERE seq <= ? AND memory_id IN ({marks})",
            [upto, *memory_ids],
        )


@contextlib.asynccontextmanager
async def switching(base: BaseMemoryStore, table: str) -> AsyncIterator[GraphSwitch]:
    """The live database behind the write lock, no transaction begun: no memory changes,
    so change log ``table`` is final while the switch is made."""
    async with base.exclusive() as db:
        yield GraphSwitch(db, table)


class GraphSwitch:
    """The switch of a graph rebuild, behind the write lock (see :func:`switching`)."""

    def __init__(self, db: aiosqlite.Connection, table: str) -> None:
        self._db = db
        self._table = table

    async def logged_ids(self) -> list[int]:
        """Every memory id in the change log."""
        rows = await self._db.execute_fetchall(f"SELECT DISTINCT memory_id FROM {self._table}")
        return [int(row[0]) for row in rows]

    async def swap_from(
        self, path: Path, *, checkpoint_key: str, version_key: str, version: str
    ) -> int:
        """Attach the shadow file, verify it and make it the live graph; the new generation.

        In one transaction: the live graph tables are emptied and filled from the
        shadow, keeping the entry vectors whose summary stays and the status of
        forgotten atoms; the change log and checkpoint are dropped and the graph
        version recorded.

        Raises:
            ShadowMismatch: the shadow is damaged or does not match the memories.
        """
        db = self._db
        await db.execute(f"ATTACH DATABASE ? AS {_ATTACHED}", (str(path),))
        try:
            return await self._swap(checkpoint_key, version_key, version)
        finally:
            with contextlib.suppress(sqlite3.Error):
                await asyncio.shield(db.execute(f"DETACH DATABASE {_ATTACHED}"))

    async def _swap(self, checkpoint_key: str, version_key: str, version: str) -> int:
        db = self._db
        await db.execute("BEGIN IMMEDIATE")
        try:
            problems = [
                str(r[0]) for r in await db.execute_fetchall(f"PRAGMA {_ATTACHED}.quick_check")
            ]
            if problems != ["ok"]:
                raise ShadowMismatch(f"the shadow file is damaged: {problems[:3]}")
            for sql in _CHECKS:
                bad = int(next(iter(await db.execute_fetchall(sql)))[0])
                if bad:
                    raise ShadowMismatch(f"{bad} rows failed: {sql}")
            # Entry vectors depend on the summary alone: keep those whose summary stays.
            await db.execute("DROP TABLE IF EXISTS temp.kept_graph_vectors")
            await db.execute(
                "CREATE TEMP TABLE kept_graph_vectors AS SELECT v.* FROM main.graph_embeddings "
                "AS v JOIN main.graph_entries AS o ON o.memory_id = v.memory_id "
                f"JOIN {_ATTACHED}.graph_entries AS n ON n.memory_id = v.memory_id "
                "WHERE n.summary = o.summary"
            )
            # An atom extracted again (same memory, place and text) keeps what it lived
            # through: when it was told and reinforced, its life, and a recorded
            # dormant, expired or forgotten status.
            await db.execute("DROP TABLE IF EXISTS temp.kept_atoms")
            await db.execute(
                "CREATE TEMP TABLE kept_atoms AS SELECT memory_id, position, text, status, "
                "created_at, reinforced_at, reinforcements, expires_at FROM main.memory_atoms"
            )
            await db.execute(
                "CREATE INDEX temp.kept_atoms_by_place ON kept_atoms (memory_id, position)"
            )
            for table in _EMPTY:
                await db.execute(f"DELETE FROM main.{table}")
            for table in _FILL:
                await db.execute(f"INSERT INTO main.{table} SELECT * FROM {_ATTACHED}.{table}")
            await db.execute(
                "INSERT INTO main.graph_entries_fts (rowid, summary) "
                f"SELECT rowid, summary FROM {_ATTACHED}.graph_entries_fts"
            )
            await db.execute("INSERT INTO main.graph_embeddings SELECT * FROM kept_graph_vectors")
            await db.execute(
                "UPDATE main.memory_atoms SET (status, created_at, reinforced_at, "
                "reinforcements, expires_at) = (SELECT CASE WHEN k.status IN ('dormant', "
                "'expired', 'forgotten') THEN k.status ELSE 'active' END, k.created_at, "
                "k.reinforced_at, k.reinforcements, k.expires_at FROM kept_atoms AS k "
                "WHERE k.memory_id = memory_atoms.memory_id AND k.position = "
                "memory_atoms.position AND k.text = memory_atoms.text), superseded_by = NULL "
                "WHERE EXISTS (SELECT 1 FROM kept_atoms AS k WHERE k.memory_id = "
                "memory_atoms.memory_id AND k.position = memory_atoms.position "
                "AND k.text = memory_atoms.text)"
            )
            # An atom new to its memory (extracted differently now) starts its life
            # when the memory's atoms before it did, and claims when they claimed.
            await db.execute(
                "UPDATE main.memory_atoms SET (created_at, reinforced_at, expires_at) = "
                "(SELECT min(k.created_at), max(k.reinforced_at), "
                "min(k.created_at) + memory_atoms.ttl_seconds FROM kept_atoms AS k "
                "WHERE k.memory_id = memory_atoms.memory_id) "
                "WHERE memory_id IN (SELECT memory_id FROM kept_atoms) AND NOT EXISTS "
                "(SELECT 1 FROM kept_atoms AS k WHERE k.memory_id = memory_atoms.memory_id "
                "AND k.position = memory_atoms.position AND k.text = memory_atoms.text)"
            )
            # The shadow settled no claim (it has no memories table to tell scopes
            # by): settled here, each in its scope, by when each was told.
            await run_on_connection(db, settle_all_claims)
            # Memories the shadow derived are no longer waiting for the pipeline.
            await db.execute(
                "DELETE FROM main.derive_pending WHERE memory_id IN (SELECT memory_id FROM "
                f"{_ATTACHED}.memory_atoms UNION SELECT memory_id FROM {_ATTACHED}.graph_entries)"
            )
            await db.execute("DROP TABLE temp.kept_graph_vectors")
            await db.execute("DROP TABLE temp.kept_atoms")
            for statement in drop_change_log(self._table):
                await db.execute(statement)
            await db.execute("DELETE FROM meta WHERE key = ?", (checkpoint_key,))
            await meta_put(db, version_key, version)
            generation = await bump_generation(db, "graph")
            await db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await asyncio.shield(db.execute("ROLLBACK"))
            raise
        return generation
