"""The read queries of the base memory: memories by id, lists, counts and stats.

Each function runs its queries through the store's ``fetch`` (one read query on
its connection), looked up by the store on every call.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..models import Memory, MemoryStats, Viewer
from .derivation import count_pending
from .embeddings import count_embedded, count_pending_embeddings
from .memory_rows import (
    COLUMNS,
    M_COLUMNS,
    Fetch,
    row_to_memory,
)
from .schema import LAST_RUN_KEY, SCHEDULED_JOBS
from .sql import SQL_CHUNK, chunks, placeholders, status_category_filter

if TYPE_CHECKING:  # loaded by the one read that returns an array
    import numpy as np

__all__ = [
    "agent_stats",
    "all_global",
    "count_memories",
    "counts_by",
    "created_range",
    "filtered_ids",
    "get_by_uid",
    "get_many",
    "get_many_indexed",
    "get_memory",
    "has_memories",
    "holder_of_uid",
    "indexed_tokens_and_endings",
    "iter_all",
    "known_categories",
    "last_run",
    "last_runs",
    "list_memories",
    "memory_stats",
    "recent_ids",
    "run_time",
]


async def get_memory(fetch: Fetch, memory_id: int, viewer: Viewer | None = None) -> Memory | None:
    """The memory ``memory_id``, or ``None`` (also when ``viewer`` does not see it)."""
    where, params = status_category_filter(None, None, viewer=viewer)
    rows = await fetch(
        f"SELECT {COLUMNS} FROM memories WHERE id = ? AND {where}", (memory_id, *params)
    )
    return row_to_memory(rows[0]) if rows else None


async def get_by_uid(fetch: Fetch, uid: str) -> Memory | None:
    """The memory of ``uid``, or ``None``."""
    rows = await fetch(f"SELECT {COLUMNS} FROM memories WHERE uid = ?", (uid,))
    return row_to_memory(rows[0]) if rows else None


async def holder_of_uid(fetch: Fetch, uid: str) -> Memory | None:
    """The memory of ``uid``, or the one it stands for now (an imported copy that
    reinforced it, a memory merged into it: ``memory_aliases``); ``None`` if neither."""
    rows = await fetch(
        f"SELECT {COLUMNS} FROM memories WHERE uid = ?1 UNION ALL "
        f"SELECT {COLUMNS} FROM memories WHERE id = "
        "(SELECT memory_id FROM memory_aliases WHERE uid = ?1) LIMIT 1",
        (uid,),
    )
    return row_to_memory(rows[0]) if rows else None


async def get_many(fetch: Fetch, memory_ids: Iterable[int]) -> dict[int, Memory]:
    """Load many memories in as few queries as possible (chunks of 500)."""
    wanted = list(dict.fromkeys(int(i) for i in memory_ids))
    found: dict[int, Memory] = {}
    for start in range(0, len(wanted), SQL_CHUNK):
        chunk = wanted[start : start + SQL_CHUNK]
        rows = await fetch(
            f"SELECT {COLUMNS} FROM memories WHERE id IN ({placeholders(len(chunk))})",
            chunk,
        )
        for row in rows:
            memory = row_to_memory(row)
            found[memory.id] = memory
    return found


async def get_many_indexed(
    fetch: Fetch, memory_ids: Iterable[int], *, neighbours: bool
) -> dict[int, tuple[Memory, str | None, int | None]]:
    """Memories with their indexed content tokens and previous turns (see
    ``BaseMemoryStore.get_many_indexed``)."""
    wanted = list(dict.fromkeys(int(i) for i in memory_ids))
    found: dict[int, tuple[Memory, str | None, int | None]] = {}
    for start in range(0, len(wanted), SQL_CHUNK):
        chunk = wanted[start : start + SQL_CHUNK]
        marks = placeholders(len(chunk))
        where = f"m.id IN ({marks})"
        if neighbours:
            # the previous turn of each, and the turn whose previous turn it is
            where += (
                f" OR m.id IN (SELECT h.previous_id FROM memories AS h WHERE h.id IN ({marks}))"
                f" OR m.previous_id IN ({marks})"
            )
        rows = await fetch(
            f"SELECT {M_COLUMNS}, m.previous_id, CASE WHEN f.rowid IS NOT NULL "
            "THEN coalesce(f.content_tokens, '') END FROM memories AS m "
            f"LEFT JOIN memories_fts AS f ON f.rowid = m.id WHERE {where}",
            [*chunk, *chunk, *chunk] if neighbours else chunk,
        )
        for row in rows:
            memory = row_to_memory(row)
            previous = None if row[-2] is None else int(row[-2])
            found[memory.id] = (memory, None if row[-1] is None else str(row[-1]), previous)
    return found


async def known_categories(fetch: Fetch) -> list[str]:
    """The categories the memory was ever opened with, and those its memories have."""
    rows = await fetch(
        "SELECT name FROM categories UNION SELECT DISTINCT category FROM memories ORDER BY 1",
        (),
    )
    return [str(row[0]) for row in rows]


async def list_memories(
    fetch: Fetch,
    *,
    categories: Sequence[str] | None,
    statuses: Sequence[str] | None,
    limit: int,
    offset: int,
    viewer: Viewer | None = None,
    created_from: float | None = None,
    created_to: float | None = None,
) -> list[Memory]:
    """Memories, newest first, filtered by category, status, viewer and when they were
    stored (``created_from <= created_at < created_to``)."""
    where, params = status_category_filter(categories, statuses, viewer=viewer)
    if created_from is not None:
        where += " AND created_at >= ?"
        params.append(float(created_from))
    if created_to is not None:
        where += " AND created_at < ?"
        params.append(float(created_to))
    rows = await fetch(
        f"SELECT {COLUMNS} FROM memories WHERE {where} "
        "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
        [*params, int(limit), int(offset)],
    )
    return [row_to_memory(row) for row in rows]


async def iter_all(fetch: Fetch, batch: int) -> AsyncIterator[Memory]:
    """Every memory of every status, oldest id first, in batches."""
    last = 0
    while True:
        rows = await fetch(
            f"SELECT {COLUMNS} FROM memories WHERE id > ? ORDER BY id LIMIT ?",
            (last, batch),
        )
        if not rows:
            return
        for row in rows:
            yield row_to_memory(row)
        last = int(rows[-1][0])


async def filtered_ids(
    fetch: Fetch,
    *,
    categories: Sequence[str] | None,
    statuses: Sequence[str] | None,
    viewer: Viewer | None = None,
) -> np.ndarray:
    """Ids of the memories passing the filters (for filtered vector search)."""
    import numpy as np

    where, params = status_category_filter(categories, statuses, viewer=viewer)
    rows = await fetch(f"SELECT id FROM memories WHERE {where}", params)
    return np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))


async def count_memories(
    fetch: Fetch,
    *,
    categories: Sequence[str] | None,
    statuses: Sequence[str] | None,
    viewer: Viewer | None = None,
) -> int:
    """How many memories pass the filters."""
    where, params = status_category_filter(categories, statuses, viewer=viewer)
    rows = await fetch(f"SELECT count(*) FROM memories WHERE {where}", params)
    return int(rows[0][0])


async def has_memories(fetch: Fetch) -> bool:
    """Whether the memory holds any memory at all (of any status)."""
    return bool(await fetch("SELECT 1 FROM memories LIMIT 1", ()))


async def counts_by(fetch: Fetch, column: str) -> dict[str, int]:
    """How many memories hold each value of ``column`` (``category`` or ``status``)."""
    if column not in ("category", "status"):
        raise ValueError(column)
    rows = await fetch(f"SELECT {column}, count(*) FROM memories GROUP BY {column}", ())
    return {str(row[0]): int(row[1]) for row in rows}


async def agent_stats(fetch: Fetch, agent: str) -> dict[str, Any]:
    """The write and search counters of ``agent`` (zeros when it has no row)."""
    rows = await fetch(
        "SELECT stores, updates, forgets, searches, last_store_at, last_search_at "
        "FROM agent_stats WHERE agent = ?",
        (agent,),
    )
    keys = ("stores", "updates", "forgets", "searches", "last_store_at", "last_search_at")
    return dict(zip(keys, rows[0], strict=True)) if rows else dict.fromkeys(keys, 0)


async def memory_stats(
    fetch: Fetch,
    agent: str,
    *,
    fingerprint: str | None,
    notes: tuple[int, int],
    in_memory: bool,
) -> MemoryStats:
    """The counts of :meth:`MemoryManager.stats <spade_memory.MemoryManager.stats>`:
    memories by category and status, those with and without a vector of
    ``fingerprint`` (``None``: keyword search only, both 0), those whose graph
    and atoms are still to be derived, and the ``(conversations, notes)`` of the
    notes file."""
    by_category = await counts_by(fetch, "category")
    by_status = await counts_by(fetch, "status")
    embedded = pending = 0
    if fingerprint is not None:
        embedded = await count_embedded(fetch, fingerprint)
        pending = await count_pending_embeddings(fetch, fingerprint)
    return MemoryStats(
        agent=agent,
        total=sum(by_status.values()),
        by_category=by_category,
        by_status=by_status,
        embedded=embedded,
        pending_embeddings=pending,
        pending_derivations=await count_pending(fetch),
        conversations=notes[0],
        notes=notes[1],
        in_memory=in_memory,
    )


async def last_run(fetch: Fetch, job: str) -> float | None:
    """When the scheduled maintenance ``job`` last ran (Unix seconds, memory clock);
    ``None`` when it never did or its record cannot be read."""
    rows = await fetch("SELECT value FROM meta WHERE key = ?", (LAST_RUN_KEY.format(job),))
    return None if not rows else run_time(str(rows[0][0]))


def run_time(recorded: str | None) -> float | None:
    """The time a job's run record holds (see :func:`last_run`); ``None`` for none,
    or for one that cannot be read."""
    if recorded is None:
        return None
    try:
        return float(json.loads(recorded))
    except (TypeError, ValueError):
        return None


async def last_runs(fetch: Fetch) -> dict[str, float | None]:
    """When each scheduled maintenance job last ran (see :func:`last_run`)."""
    return {job: await last_run(fetch, job) for job in SCHEDULED_JOBS}


async def recent_ids(fetch: Fetch, limit: int) -> list[int]:
    """Ids of active memories, most recently accessed (or stored) first."""
    rows = await fetch(
        "SELECT id FROM memories WHERE status = 'active' "
        "ORDER BY COALESCE(last_accessed, created_at) DESC, id DESC LIMIT ?",
        (limit,),
    )
    return [int(row[0]) for row in rows]


async def all_global(fetch: Fetch) -> bool:
    """Whether every memory is global (so a viewer of all categories sees them all)."""
    rows = await fetch(
        "SELECT NOT EXISTS (SELECT 1 FROM memories WHERE visibility != 'global')", ()
    )
    return bool(rows[0][0])


async def created_range(fetch: Fetch) -> tuple[float | None, float | None]:
    """The ``created_at`` of the oldest and the newest memory (``None`` when empty)."""
    rows = await fetch("SELECT MIN(created_at), MAX(created_at) FROM memories", ())
    return (rows[0][0], rows[0][1]) if rows else (None, None)


async def indexed_tokens_and_endings(
    fetch: Fetch, memory_ids: Iterable[int]
) -> dict[int, tuple[str, str]]:
    """Each memory's indexed content tokens (as the keyword index holds them) and the
    last character of its content with trailing space trimmed; memories with an
    index row only."""
    wanted = list(dict.fromkeys(memory_ids))
    found: dict[int, tuple[str, str]] = {}
    for chunk in chunks(wanted):
        rows = await fetch(
            "SELECT f.rowid, f.content_tokens, substr(rtrim(m.content), -1) "
            "FROM memories_fts AS f JOIN memories AS m ON m.id = f.rowid "
            f"WHERE f.rowid IN ({placeholders(len(chunk))})",
            chunk,
        )
        for row in rows:
            found[int(row[0])] = (str(row[1] or ""), str(row[2] or ""))
    return found
