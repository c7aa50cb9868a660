"""The graph rebuild: into a shadow generation, switched atomically once complete and verified.

The graph tables (nodes, edges, entries with their trigram text and vectors, and
atoms) are built again from the memories into a shadow database file beside the
memory's own (``<database>.graph-rebuild``; a temporary file for an in-memory
memory), through a connection of its own: the live graph keeps answering
searches, and the agent keeps writing, for the whole rebuild. Triggers on
``memories`` log every memory inserted, changed or deleted meanwhile; the log is
replayed into the shadow. Then, behind the write lock, the last logged writes are
applied, the shadow is attached and verified against the memories, and in one
transaction the live graph tables are emptied and filled from it. Entry vectors
whose summary did not change are kept (the others are embedded again in the
background), and so is the status of atoms their owner forgot; every other atom
starts its life again, as extracted.

Each batch commits together with its checkpoint in the shadow file, so an
interrupted rebuild (an error, a crash, a closed memory) resumes after the last
batch it committed; the change log keeps catching writes while it waits.

Disk space: while it runs, the shadow holds a second full copy of the graph, and
the switch writes the graph once more into the write-ahead log. A rebuild needs
free space of about twice the size of the graph tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiosqlite

from ..errors import StorageError
from ..models import Memory
from ..storage.graph import delete_graph, write_graph
from ..storage.sql import placeholders
from ..text.extraction import GRAPH_VERSION
from ..text.graph import MemoryGraph
from .rewrite import (
    bump_generation,
    change_log_statements,
    drop_change_log,
    meta_put,
)

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["GraphRebuild", "GraphRebuildResult", "shadow_path"]

logger = logging.getLogger(__name__)

CHECKPOINT_KEY = "rebuild:graph"
_LOG = "rebuild_log_graph"
# what a memory's graph is made of: a change of these is replayed
_WATCHED = "content, category, importance"
_ATTACHED = "graph_shadow"
_SUFFIX = ".graph-rebuild"
_MAX_REPLAY_ROUNDS = 20
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

Report = Callable[[int, int], Awaitable[None]]
"""Told ``(done, total)`` after each batch."""


def shadow_path(database: Path | None) -> Path | None:
    """Where the shadow of a database file is built (``None`` for an in-memory one)."""
    return None if database is None else database.with_name(database.name + _SUFFIX)


def _remove_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


@dataclass(frozen=True, slots=True)
class GraphRebuildResult:
    """What one graph rebuild did (see :class:`~spade_memory.maintenance.RebuildResult`)."""

    processed: int
    replayed: int
    resumed: bool
    generation: int


class _VerificationFailed(StorageError):
    """The shadow graph did not match the memories; the switch was not made."""


class GraphRebuild:
    """One rebuild of a memory's graph into a shadow, resuming an interrupted one.

    Args:
        engine: the open memory.
        batch: memories per batch (one shadow transaction and checkpoint each).
    """

    def __init__(self, engine: Engine, *, batch: int) -> None:
        self._engine = engine
        self._base = engine.base
        self._batch = batch
        self._shadow: aiosqlite.Connection | None = None

    async def run(self, report: Report) -> GraphRebuildResult:
        """Rebuild the graph; see the module docstring.

        Raises:
            StorageError: the shadow failed verification (it was dropped and the
                live graph kept: run the rebuild again) or the database failed.
        """
        path, resumed = await self._begin()
        try:
            state = await self._state()
            cursor, done, last = int(state["cursor"]), int(state["done"]), int(state["last"])
            total = await self._base.count(statuses=None)
            processed = 0
            await report(min(done, total), total)
            while cursor < last:
                rows = await self._base.fetchall(
                    "SELECT id FROM memories WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
                    (cursor, last, self._batch),
                )
                if not rows:
                    break
                ids = [int(row[0]) for row in rows]
                cursor, done = ids[-1], done + len(ids)
                processed += await self._write(ids, cursor=cursor, done=done)
                await report(min(done, total), total)
            replayed = await self._replay()
            try:
                generation, finals = await self._switch(path)
            except _VerificationFailed as exc:
                await self.abandon()
                raise StorageError(
                    f"the rebuilt graph of {self._base.agent} did not match its memories "
                    f"({exc}); it was dropped and the live graph kept: run the rebuild again"
                ) from exc
        finally:
            await self._close_shadow()
        _remove_files(path)
        await report(total, total)
        return GraphRebuildResult(processed, replayed + finals, resumed, generation)

    async def abandon(self) -> None:
        """Drop an unfinished rebuild: its shadow file, its change log and its checkpoint."""
        await self._close_shadow()
        raw = await self._base.meta_get(CHECKPOINT_KEY)
        async with self._base.transaction() as db:
            for statement in drop_change_log(_LOG):
                await db.execute(statement)
            await db.execute("DELETE FROM meta WHERE key = ?", (CHECKPOINT_KEY,))
        known = _checkpoint_shadow(raw) or shadow_path(self._base.path)
        if known is not None:
            _remove_files(known)

    # -- the shadow ----------------------------------------------------------------

    async def _begin(self) -> tuple[Path, bool]:
        """Open the shadow to resume, or start a new one; returns its path and whether resumed."""
        raw = await self._base.meta_get(CHECKPOINT_KEY)
        path = _checkpoint_shadow(raw)
        if raw is not None and path is not None and await self._resumable(raw, path):
            logger.info("%s: resuming the graph rebuild", self._base.agent)
            return path, True
        if raw is not None:
            logger.info("%s: restarting a graph rebuild that cannot resume", self._base.agent)
            await self._close_shadow()
            if path is not None:
                _remove_files(path)
        path = shadow_path(self._base.path)
        if path is None:
            handle, name = tempfile.mkstemp(prefix="spade-memory-graph-", suffix=_SUFFIX)
            os.close(handle)
            path = Path(name)
        _remove_files(path)
        token = uuid.uuid4().hex
        tables = await self._table_sql()
        last = await self._base.fetchall("SELECT coalesce(max(id), 0) FROM memories")
        shadow = await self._open_shadow(path)
        await shadow.execute("BEGIN IMMEDIATE")
        for _, sql in tables:
            await shadow.execute(sql)
        await shadow.execute("CREATE TABLE rebuild_state (key TEXT PRIMARY KEY, value TEXT)")
        state = {"token": token, "cursor": 0, "done": 0, "last": int(last[0][0])}
        state["version"] = GRAPH_VERSION
        state["schema"] = json.dumps(tables)
        await shadow.executemany(
            "INSERT INTO rebuild_state (key, value) VALUES (?, ?)",
            [(key, str(value)) for key, value in state.items()],
        )
        await shadow.execute("COMMIT")
        checkpoint = {"shadow": str(path), "token": token, "started_at": self._engine.now()}
        async with self._base.transaction() as db:
            for statement in (
                *drop_change_log(_LOG),
                *change_log_statements(_LOG, _WATCHED),
            ):
                await db.execute(statement)
            await meta_put(db, CHECKPOINT_KEY, json.dumps(checkpoint))
        return path, False

    async def _resumable(self, raw: str, path: Path) -> bool:
        if not path.exists():
            return False
        logged = await self._base.fetchall(
            "SELECT count(*) FROM sqlite_master WHERE name = ?", (_LOG,)
        )
        if not int(logged[0][0]):
            return False
        try:
            await self._open_shadow(path)
            state = await self._state()
            checkpoint = json.loads(raw)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):
                await self._close_shadow()
                raise StorageError(
                    f"the graph of {self._base.agent} is being rebuilt by another process "
                    "that opened the same memory; wait for it to finish"
                ) from exc
            return False
        except (sqlite3.Error, ValueError, KeyError, StorageError):
            return False
        return bool(
            state.get("token") == checkpoint.get("token")
            and state.get("version") == str(GRAPH_VERSION)
            and state.get("schema") == json.dumps(await self._table_sql())
        )

    async def _table_sql(self) -> list[list[str]]:
        """``[name, sql]`` of the live graph tables, then of their indexes."""
        rows = await self._base.fetchall(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE type IN ('table', 'index') AND sql IS NOT NULL ORDER BY type DESC, name"
        )
        return [[str(r[1]), str(r[3])] for r in rows if str(r[2]) in _TABLES]

    async def _open_shadow(self, path: Path) -> aiosqlite.Connection:
        await self._close_shadow()
        shadow = await aiosqlite.connect(str(path), isolation_level=None, timeout=0.2)
        try:
            # Held until closed: a second rebuild of the same memory cannot open it.
            await shadow.execute("PRAGMA locking_mode = EXCLUSIVE")
            await shadow.execute("PRAGMA journal_mode = WAL")
            await shadow.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            await shadow.close()
            raise
        self._shadow = shadow
        return shadow

    async def _close_shadow(self) -> None:
        shadow, self._shadow = self._shadow, None
        if shadow is not None:
            with contextlib.suppress(sqlite3.Error, ValueError):
                await shadow.close()

    def _connection(self) -> aiosqlite.Connection:
        if self._shadow is None:
            raise StorageError(f"the graph rebuild of {self._base.agent} has no shadow open")
        return self._shadow

    async def _state(self) -> dict[str, str]:
        rows = await self._connection().execute_fetchall("SELECT key, value FROM rebuild_state")
        return {str(row[0]): str(row[1]) for row in rows}

    async def _graphs(self, ids: list[int]) -> tuple[list[Memory], list[MemoryGraph]]:
        found = await self._base.get_many(ids)
        memories = [found[i] for i in sorted(found)]
        extract = self._engine.graph_for
        graphs = await asyncio.to_thread(lambda: [extract(m) for m in memories])
        return memories, graphs

    async def _write(
        self, ids: list[int], *, cursor: int | None = None, done: int = 0, replace: bool = False
    ) -> int:
        """Write the graphs of these memories into the shadow (with the checkpoint, if any).

        ``replace`` first removes what the shadow holds for them (replayed writes).
        """
        memories, graphs = await self._graphs(ids)
        shadow = self._connection()
        await shadow.execute("BEGIN IMMEDIATE")
        try:
            if replace:
                for memory_id in ids:
                    await delete_graph(shadow, memory_id)
            for memory, graph in zip(memories, graphs, strict=True):
                await write_graph(shadow, memory.id, graph, now=memory.updated_at)
            if cursor is not None:
                await shadow.executemany(
                    "UPDATE rebuild_state SET value = ? WHERE key = ?",
                    [(str(cursor), "cursor"), (str(done), "done")],
                )
            await shadow.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await asyncio.shield(shadow.execute("ROLLBACK"))
            raise
        return len(memories)

    async def _replay(self) -> int:
        """Apply the memories logged since the rebuild began (outside the write lock)."""
        replayed = 0
        for _ in range(_MAX_REPLAY_ROUNDS):
            rows = await self._base.fetchall(f"SELECT coalesce(max(seq), 0) FROM {_LOG}")
            upto = int(rows[0][0])
            rows = await self._base.fetchall(
                f"SELECT DISTINCT memory_id FROM {_LOG} WHERE seq <= ? ORDER BY memory_id LIMIT ?",
                (upto, self._batch),
            )
            ids = [int(row[0]) for row in rows]
            if not ids:
                break
            await self._write(ids, replace=True)
            async with self._base.transaction() as db:
                marks = placeholders(len(ids))
                await db.execute(
                    f"DELETE FROM {_LOG} WHERE seq <= ? AND memory_id IN ({marks})", [upto, *ids]
                )
            replayed += len(ids)
        return replayed

    # -- the switch ----------------------------------------------------------------

    async def _switch(self, path: Path) -> tuple[int, int]:
        """Apply the last logged writes, verify the shadow and make it the live graph."""
        async with self._base.exclusive() as db:
            # Behind the write lock no memory changes: the log is final.
            rows = await db.execute_fetchall(f"SELECT DISTINCT memory_id FROM {_LOG}")
            ids = [int(row[0]) for row in rows]
            if ids:
                await self._write(ids, replace=True)
            await self._close_shadow()
            await db.execute(f"ATTACH DATABASE ? AS {_ATTACHED}", (str(path),))
            try:
                generation = await self._swap(db)
            finally:
                with contextlib.suppress(sqlite3.Error):
                    await asyncio.shield(db.execute(f"DETACH DATABASE {_ATTACHED}"))
        self._engine.notify_changed()  # cached searches dropped; new entries embedded
        logger.info("%s: graph rebuilt (generation %d)", self._base.agent, generation)
        return generation, len(ids)

    async def _swap(self, db: aiosqlite.Connection) -> int:
        """One transaction: verify, empty the live tables, fill them from the shadow."""
        await db.execute("BEGIN IMMEDIATE")
        try:
            problems = [str(r[0]) for r in await db.execute_fetchall(_quick_check())]
            if problems != ["ok"]:
                raise _VerificationFailed(f"the shadow file is damaged: {problems[:3]}")
            for sql in _CHECKS:
                bad = int(next(iter(await db.execute_fetchall(sql)))[0])
                if bad:
                    raise _VerificationFailed(f"{bad} rows failed: {sql}")
            # Entry vectors depend on the summary alone: keep those whose summary stays.
            await db.execute("DROP TABLE IF EXISTS temp.kept_graph_vectors")
            await db.execute(
                "CREATE TEMP TABLE kept_graph_vectors AS SELECT v.* FROM main.graph_embeddings "
                "AS v JOIN main.graph_entries AS o ON o.memory_id = v.memory_id "
                f"JOIN {_ATTACHED}.graph_entries AS n ON n.memory_id = v.memory_id "
                "WHERE n.summary = o.summary"
            )
            # An atom its owner forgot stays forgotten in the new graph.
            await db.execute("DROP TABLE IF EXISTS temp.forgotten_atoms")
            await db.execute(
                "CREATE TEMP TABLE forgotten_atoms AS SELECT memory_id, position, text "
                "FROM main.memory_atoms WHERE status = 'forgotten'"
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
                "UPDATE main.memory_atoms SET status = 'forgotten' WHERE EXISTS (SELECT 1 FROM "
                "forgotten_atoms AS f WHERE f.memory_id = memory_atoms.memory_id "
                "AND f.position = memory_atoms.position AND f.text = memory_atoms.text)"
            )
            await db.execute("DROP TABLE temp.kept_graph_vectors")
            await db.execute("DROP TABLE temp.forgotten_atoms")
            for statement in drop_change_log(_LOG):
                await db.execute(statement)
            await db.execute("DELETE FROM meta WHERE key = ?", (CHECKPOINT_KEY,))
            await meta_put(db, "graph_version", str(GRAPH_VERSION))
            generation = await bump_generation(db, "graph")
            await db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await asyncio.shield(db.execute("ROLLBACK"))
            raise
        return generation


def _quick_check() -> str:
    return f"PRAGMA {_ATTACHED}.quick_check"


def _checkpoint_shadow(raw: str | None) -> Path | None:
    """The shadow file a checkpoint names (``None`` if it names none)."""
    if raw is None:
        return None
    try:
        value: Any = json.loads(raw)
    except ValueError:
        return None
    shadow = value.get("shadow") if isinstance(value, dict) else None
    return Path(shadow) if isinstance(shadow, str) and shadow else None
