"""Rewriting what is derived from memories: their graphs, and the FAISS cache of vectors.

Both the rebuilds and the consistency repairs use these, inside a write
transaction, so that what they write matches what the memories hold at commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import aiosqlite
import numpy as np

from ..models import Memory
from ..storage.graph import delete_graph, write_graph
from ..storage.sql import placeholders
from ..text.graph import MemoryGraph

if TYPE_CHECKING:
    from ..storage.vectors import VectorIndex

__all__ = [
    "bump_generation",
    "change_log_statements",
    "drop_change_log",
    "extract_all",
    "meta_put",
    "reset_vector_index",
    "vectors_of",
    "write_graphs",
]


def extract_all(
    extract: Callable[[Memory], MemoryGraph], memories: Sequence[Memory]
) -> list[MemoryGraph]:
    """The graph of each memory (blocking: run it in a thread for many)."""
    return [extract(memory) for memory in memories]


async def write_graphs(
    db: aiosqlite.Connection,
    items: Sequence[tuple[Memory, MemoryGraph]],
    extract: Callable[[Memory], MemoryGraph],
) -> int:
    """Replace the graphs of memories, inside the caller's write transaction.

    A memory deleted since it was read is skipped; one whose content, category or
    importance changed since is extracted again from what it holds now.
    Returns how many graphs were written.
    """
    if not items:
        return 0
    ids = [memory.id for memory, _ in items]
    rows = await db.execute_fetchall(
        "SELECT id, content, category, importance, updated_at FROM memories "
        f"WHERE id IN ({placeholders(len(ids))})",
        ids,
    )
    current = {int(row[0]): (row[1], row[2], float(row[3]), float(row[4])) for row in rows}
    written = 0
    for memory, graph in items:
        now = current.get(memory.id)
        if now is None:
            await delete_graph(db, memory.id)
            continue
        if now[:3] != (memory.content, memory.category, memory.importance):
            memory = dataclasses.replace(
                memory, content=now[0], category=now[1], importance=now[2], updated_at=now[3]
            )
            graph = extract(memory)
        await delete_graph(db, memory.id)
        await write_graph(db, memory.id, graph, now=now[3])
        written += 1
    return written


def reset_vector_index(index: VectorIndex, ids: np.ndarray, matrix: np.ndarray) -> None:
    """Make ``index`` hold exactly these vectors (blocking; run it in a thread)."""
    extra = np.setdiff1d(index.ids(), ids)
    if len(extra):
        index.remove(extra)
    if len(ids):
        index.add(ids, matrix)


def vectors_of(rows: Iterable[Any], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, matrix)`` of ``(memory id, vector blob)`` rows."""
    pairs = list(rows)
    ids = np.fromiter((int(row[0]) for row in pairs), dtype=np.int64, count=len(pairs))
    matrix = np.zeros((len(pairs), dim), dtype=np.float32)
    for position, row in enumerate(pairs):
        matrix[position] = np.frombuffer(row[1], dtype=np.float32, count=dim)
    return ids, matrix


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


def change_log_statements(table: str, columns: str) -> list[str]:
    """A change log ``table`` of the memories inserted, deleted, or updated in
    ``columns`` (comma-separated), kept by triggers while a rebuild runs."""
    return [
        f"CREATE TABLE IF NOT EXISTS {table} "
        "(seq INTEGER PRIMARY KEY AUTOINCREMENT, memory_id INTEGER NOT NULL)",
        f"CREATE TRIGGER IF NOT EXISTS {table}_insert AFTER INSERT ON memories "
        f"BEGIN INSERT INTO {table} (memory_id) VALUES (new.id); END",
        f"CREATE TRIGGER IF NOT EXISTS {table}_update AFTER UPDATE OF {columns} "
        f"ON memories BEGIN INSERT INTO {table} (memory_id) VALUES (new.id); END",
        f"CREATE TRIGGER IF NOT EXISTS {table}_delete AFTER DELETE ON memories "
        f"BEGIN INSERT INTO {table} (memory_id) VALUES (old.id); END",
    ]


def drop_change_log(table: str) -> list[str]:
    """Statements that drop a change log and its triggers."""
    drops = [f"DROP TRIGGER IF EXISTS {table}_{event}" for event in ("insert", "update", "delete")]
    drops.append(f"DROP TABLE IF EXISTS {table}")
    return drops
