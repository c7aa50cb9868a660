"""The lifecycle writes of the ``memories`` table: importance decay, archive and restore.

Named queries of the forgetting jobs (:mod:`spade_memory.maintenance.decay`): the
job decides the values, these read and write the rows, each batch in one
transaction so that what is written was computed from what was read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .sql import SQL_CHUNK, chunks, placeholders

if TYPE_CHECKING:
    from .base import BaseMemoryStore

__all__ = ["DecayRow", "cleanup_candidates", "decay_batch", "set_status"]

DecayRow = tuple[int, float, int, float, Any]
"""``(id, importance, access count, created at, metadata JSON)`` of an active memory."""


async def decay_batch(
    base: BaseMemoryStore,
    after_id: int,
    limit: int,
    decide: Callable[[list[DecayRow]], Sequence[tuple[float, int, int]]],
) -> int | None:
    """Decay one batch of active memories in one transaction; the last id, or ``None``.

    Reads up to ``limit`` active memories with ids above ``after_id`` (oldest id
    first), hands them to ``decide`` (inside the transaction) and writes the
    ``(importance, access count, id)`` it returns. ``None``: nothing was left.
    """
    async with base.transaction() as db:
        rows: list[Any] = list(
            await db.execute_fetchall(
                "SELECT id, importance, access_count, created_at, metadata FROM memories "
                "WHERE status = 'active' AND id > ? ORDER BY id LIMIT ?",
                (after_id, limit),
            )
        )
        if not rows:
            return None
        updates = decide(rows)
        await db.executemany(
            "UPDATE memories SET importance = ?, access_count = ? WHERE id = ?", updates
        )
    return int(rows[-1][0])


async def set_status(
    base: BaseMemoryStore,
    memory_ids: Sequence[int],
    status: str,
    *,
    previous: str,
    metadata: Callable[[Any], str],
    accessed: float | None = None,
) -> list[int]:
    """Move memories of status ``previous`` to ``status``, in one transaction.

    Each changed memory's metadata becomes ``metadata(its metadata JSON)``; with
    ``accessed``, its last access moves forward to it (a memory restored by hand is
    not idle: the next cleanup would archive it again).
    Returns the ids changed (memories of another status are left as they are).
    """
    changed: list[int] = []
    async with base.transaction() as db:
        for chunk in chunks(memory_ids, SQL_CHUNK):
            rows = await db.execute_fetchall(
                f"SELECT id, metadata FROM memories WHERE status = ? "
                f"AND id IN ({placeholders(len(chunk))})",
                [previous, *chunk],
            )
            for memory_id, raw in rows:
                await db.execute(
                    "UPDATE memories SET status = ?, metadata = ?, last_accessed = CASE "
                    "WHEN ?3 IS NULL THEN last_accessed "
                    "ELSE max(coalesce(last_accessed, ?3), ?3) END WHERE id = ?4",
                    (status, metadata(raw), accessed, int(memory_id)),
                )
                changed.append(int(memory_id))
    return changed


async def cleanup_candidates(
    base: BaseMemoryStore, *, max_importance: float, created_before: float, idle_since: float
) -> list[tuple[int, Any]]:
    """``(id, metadata JSON)`` of active memories at or below ``max_importance``, created
    by ``created_before`` and not accessed after ``idle_since``, oldest id first."""
    rows = await base.fetchall(
        "SELECT id, metadata FROM memories WHERE status = 'active' AND importance <= ? "
        "AND created_at <= ? AND (last_accessed IS NULL OR last_accessed <= ?) ORDER BY id",
        (max_importance, created_before, idle_since),
    )
    return [(int(row[0]), row[1]) for row in rows]
