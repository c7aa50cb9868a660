"""The durable mark of memories whose graph rows and atoms are still to be derived.

With background derivation (``StorageConfig.derive_in_background``) a memory's
insert commits its row and keyword index with a mark in ``derive_pending``
(:func:`mark_pending`, in the insert's own transaction); the derivation pipeline
(:mod:`spade_memory.engine.derivation`) later reads the marked memories in id order
(:func:`read_pending`) and writes the graphs of a batch in one transaction that
clears their marks (:func:`write_derived`). A crash between the two leaves the
marks, and the next open derives those memories. A memory deleted or whose graph
was written by another path meanwhile has no mark any more, and is skipped.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..models import Memory
from ..text.graph import MemoryGraph
from .graph import write_graph_rows
from .memory_rows import COLUMNS, Fetch, row_to_memory

__all__ = [
    "Deferred",
    "PendingMemory",
    "clear_pending",
    "count_pending",
    "mark_pending",
    "read_pending",
    "renew_pending",
    "write_derived",
]


@dataclass(frozen=True, slots=True)
class Deferred:
    """A memory's graph, derived after its insert commits.

    Args:
        entities: the entity names the caller gave (checked).
        relations: the relations the caller gave (checked ``{source, relation, target}``).
        reinforcement_factor: the lifetime a reinforcement adds to the atoms of a
            stored copy, when the insert finds one (``AtomConfig``).
    """

    entities: tuple[str, ...] = ()
    relations: tuple[Mapping[str, str], ...] = ()
    reinforcement_factor: float = 0.5


@dataclass(frozen=True, slots=True)
class PendingMemory:
    """A memory whose graph is still to be derived, with what derivation needs."""

    memory: Memory
    entities: tuple[str, ...]
    relations: tuple[dict[str, str], ...]
    graph_time: float | None
    told_at: float | None = None  # when last told, when not at its creation


_INSERT_MARK = (
    "INSERT OR REPLACE INTO derive_pending (memory_id, entities, relations, graph_time, "
    "told_at) VALUES (?, ?, ?, ?, ?)"
)
_CLEAR_MARK = "DELETE FROM derive_pending WHERE memory_id = ? RETURNING told_at"
_READ = (
    f"SELECT {COLUMNS}, p.entities, p.relations, p.graph_time, p.told_at FROM derive_pending AS p "
    "JOIN memories ON memories.id = p.memory_id WHERE p.memory_id > ? "
    "ORDER BY p.memory_id LIMIT ?"
)


def mark_pending(
    memory_id: int,
    deferred: Deferred,
    graph_time: float | None,
    db: sqlite3.Connection,
    *,
    told: float | None = None,
) -> None:
    """Mark one memory's graph as still to be derived; inside its insert transaction.
    ``told``: when it was last told (its creation, or before it came for an import;
    ``None`` only for marks written before it was kept)."""
    db.execute(
        _INSERT_MARK,
        (
            memory_id,
            json.dumps(list(deferred.entities), ensure_ascii=False) if deferred.entities else None,
            json.dumps([dict(r) for r in deferred.relations], ensure_ascii=False)
            if deferred.relations
            else None,
            graph_time,
            told,
        ),
    )


def renew_pending(
    memory_id: int, when: float, db: sqlite3.Connection, *, told: float | None = None
) -> None:
    """A memory still to be derived was told again (at ``told``, default ``when``):
    its atoms, once derived, start their lives at ``when`` (they have none to
    reinforce yet), and its claims count as told then."""
    db.execute(
        "UPDATE derive_pending SET graph_time = ?, told_at = max(coalesce(told_at, 0), ?) "
        "WHERE memory_id = ?",
        (when, when if told is None else told, memory_id),
    )


def clear_pending(memory_id: int, db: sqlite3.Connection) -> None:
    """Drop one memory's mark (its graph was written by another path, or it is gone)."""
    db.execute("DELETE FROM derive_pending WHERE memory_id = ?", (memory_id,))


def _pending(row: Sequence[Any]) -> PendingMemory:
    width = len(row) - 4
    entities, relations, graph_time, told_at = row[width:]
    return PendingMemory(
        memory=row_to_memory(row[:width]),
        entities=tuple(json.loads(entities)) if entities else (),
        relations=tuple(json.loads(relations)) if relations else (),
        graph_time=None if graph_time is None else float(graph_time),
        told_at=None if told_at is None else float(told_at),
    )


async def read_pending(fetch: Fetch, limit: int, *, after_id: int = 0) -> list[PendingMemory]:
    """Up to ``limit`` marked memories past ``after_id``, oldest first."""
    rows = await fetch(_READ, (int(after_id), int(limit)))
    return [_pending(row) for row in rows]


async def count_pending(fetch: Fetch) -> int:
    """How many memories are marked."""
    rows = await fetch("SELECT count(*) FROM derive_pending", ())
    return int(rows[0][0])


def write_derived(
    items: Sequence[tuple[int, MemoryGraph, float]], db: sqlite3.Connection
) -> list[int]:
    """Write the graphs of ``items`` (memory id, graph, atoms' start) and clear their
    marks, inside one transaction on the connection's thread; the ids written (a
    memory whose mark is gone meanwhile is skipped)."""
    written: list[int] = []
    for memory_id, graph, when in items:
        # the mark cleared, with when the memory was last told, which orders its
        # claims (an import's: before it came)
        row = db.execute(_CLEAR_MARK, (memory_id,)).fetchone()
        if row is None:
            continue  # its mark is gone meanwhile
        if row[0] is None:  # marked before v13 kept it: told at its creation
            row = db.execute("SELECT created_at FROM memories WHERE id = ?", (memory_id,))
            row = row.fetchone()
        write_graph_rows(memory_id, graph, when, db, told=float(row[0]))
        written.append(memory_id)
    return written
