"""The reads and repairs of the consistency check: memories against what is derived from them.

:class:`ConsistencyQueries` reads on the store's connection, outside any
transaction; :meth:`ConsistencyQueries.locked` opens one write transaction and
gives :class:`LockedChecks`, the same reads made under the write lock (where no
write is half done) plus the repairs. What to check, when to confirm and what to
mend is decided by :mod:`spade_memory.maintenance.consistency`; this module holds
the statements and decodes their rows.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

import aiosqlite
import numpy as np

from ..models import Memory
from ..text.graph import MemoryGraph
from .embeddings import decode_vectors
from .graph import delete_graph, write_graph
from .sql import placeholders

if TYPE_CHECKING:
    from .base import BaseMemoryStore

__all__ = ["GRAPH_ORPHAN_TABLES", "CheckReads", "ConsistencyQueries", "IndexedRow", "LockedChecks"]

IndexedRow = tuple[int, str, Any, Any, Any]
"""``(id, content, context, content tokens, context tokens)`` of a memory and its keyword row."""

# Graph rows that belong to nothing: (table, condition), deleted in this order.
_GRAPH_ORPHANS: tuple[tuple[str, str], ...] = (
    (
        "graph_edges",
        "memory_id NOT IN (SELECT id FROM memories) "
        "OR source_id NOT IN (SELECT id FROM graph_nodes) "
        "OR target_id NOT IN (SELECT id FROM graph_nodes)",
    ),
    ("memory_atoms", "memory_id NOT IN (SELECT id FROM memories)"),
    ("graph_entries", "memory_id NOT IN (SELECT id FROM memories)"),
    ("graph_embeddings", "memory_id NOT IN (SELECT memory_id FROM graph_entries)"),
    ("graph_entries_fts", "rowid NOT IN (SELECT memory_id FROM graph_entries)"),
    (
        "graph_entry_nodes",
        "memory_id NOT IN (SELECT memory_id FROM graph_entries) "
        "OR node_id NOT IN (SELECT id FROM graph_nodes)",
    ),
    (
        "graph_nodes",
        "id NOT IN (SELECT node_id FROM graph_entry_nodes) "
        "AND id NOT IN (SELECT source_id FROM graph_edges) "
        "AND id NOT IN (SELECT target_id FROM graph_edges)",
    ),
)
_ORPHAN_CONDITION = dict(_GRAPH_ORPHANS)
# What an orphan row of each table names: its memory (none for a node).
_ORPHAN_KEY = {"graph_entries_fts": "rowid", "graph_nodes": "NULL"}

GRAPH_ORPHAN_TABLES: tuple[str, ...] = tuple(table for table, _ in _GRAPH_ORPHANS)
"""The graph tables whose rows may belong to nothing, in the order they are mended."""

_INDEXED = (
    "SELECT m.id, m.content, m.context, f.content_tokens, f.context_tokens "
    "FROM memories AS m JOIN memories_fts AS f ON f.rowid = m.id "
)
_VALID_VECTORS = (
    "SELECT memory_id FROM embeddings WHERE fingerprint = ? AND dim = ? "
    "AND length(vector) = dim * 4"
)


def _ids(rows: Sequence[Any]) -> builtins.list[int]:
    return [int(row[0]) for row in rows]


class CheckReads:
    """The detection reads of the check, run through ``_fetch``."""

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
        raise NotImplementedError

    async def memories_missing_fts(self) -> builtins.list[int]:
        """Memories without a keyword row, by id."""
        return _ids(
            await self._fetch(
                "SELECT id FROM memories WHERE id NOT IN (SELECT rowid FROM memories_fts) "
                "ORDER BY id",
                (),
            )
        )

    async def orphan_fts_rows(self) -> builtins.list[int]:
        """Keyword rows of no memory."""
        return _ids(
            await self._fetch(
                "SELECT rowid FROM memories_fts WHERE rowid NOT IN (SELECT id FROM memories)", ()
            )
        )

    async def orphan_vector_ids(self) -> builtins.list[int]:
        """Stored vectors of no memory."""
        return _ids(
            await self._fetch(
                "SELECT memory_id FROM embeddings WHERE memory_id NOT IN (SELECT id FROM memories)",
                (),
            )
        )

    async def malformed_vector_ids(self) -> builtins.list[int]:
        """Stored vectors whose length does not match their dimension."""
        return _ids(
            await self._fetch(
                "SELECT memory_id FROM embeddings WHERE dim < 1 OR length(vector) != dim * 4", ()
            )
        )

    async def memories_missing_vector(self) -> builtins.list[int]:
        """Memories without any stored vector, by id."""
        return _ids(
            await self._fetch(
                "SELECT id FROM memories WHERE id NOT IN (SELECT memory_id FROM embeddings) "
                "ORDER BY id",
                (),
            )
        )

    async def foreign_vector_ids(self, fingerprint: str) -> builtins.list[int]:
        """Stored vectors of another embedder's fingerprint, by id."""
        return _ids(
            await self._fetch(
                "SELECT memory_id FROM embeddings WHERE fingerprint != ? ORDER BY memory_id",
                (fingerprint,),
            )
        )

    async def wrong_dimension_vector_ids(self, fingerprint: str, dim: int) -> builtins.list[int]:
        """Stored vectors of ``fingerprint`` declared of another length than ``dim``, by id
        (no load of that embedder's vectors reads them, yet they count as embedded)."""
        return _ids(
            await self._fetch(
                "SELECT memory_id FROM embeddings WHERE fingerprint = ? AND dim != ? "
                "ORDER BY memory_id",
                (fingerprint, dim),
            )
        )

    async def valid_vector_ids(self, fingerprint: str, dim: int) -> np.ndarray:
        """Ids of the well-formed stored vectors of ``fingerprint`` and ``dim``."""
        rows = await self._fetch(_VALID_VECTORS, (fingerprint, dim))
        return np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))

    async def graph_orphans(self, table: str) -> builtins.list[int | None]:
        """The memory each orphaned row of a graph table names (``None`` for a node)."""
        key = _ORPHAN_KEY.get(table, "memory_id")
        rows = await self._fetch(f"SELECT {key} FROM {table} WHERE {_ORPHAN_CONDITION[table]}", ())
        return [None if row[0] is None else int(row[0]) for row in rows]

    async def memories_missing_graph(self) -> builtins.list[int]:
        """Memories without any atom (their graph was never written), by id; not those
        still waiting for the derivation pipeline (``derive_pending``)."""
        return _ids(
            await self._fetch(
                "SELECT id FROM memories WHERE id NOT IN (SELECT memory_id FROM memory_atoms) "
                "AND id NOT IN (SELECT memory_id FROM derive_pending) ORDER BY id",
                (),
            )
        )

    async def indexed_texts_of(self, memory_ids: Sequence[int]) -> builtins.list[IndexedRow]:
        """:data:`IndexedRow` of these memories (at most 500 ids), by id."""
        ids = list(memory_ids)
        rows = await self._fetch(
            f"{_INDEXED} WHERE m.id IN ({placeholders(len(ids))}) ORDER BY m.id", ids
        )
        return [tuple(row) for row in rows]


class ConsistencyQueries(CheckReads):
    """The consistency check's reads on one store, outside any transaction.

    Args:
        base: the open store.
    """

    def __init__(self, base: BaseMemoryStore) -> None:
        self._base = base

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
        return await self._base.fetchall(sql, params)

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[LockedChecks]:
        """One write transaction: the reads with no write under way, and the repairs."""
        async with self._base.transaction() as db:
            yield LockedChecks(db)

    async def indexed_texts_after(self, after_id: int, limit: int) -> builtins.list[IndexedRow]:
        """Up to ``limit`` :data:`IndexedRow` of memories with ids above ``after_id``, by id."""
        rows = await self._fetch(
            f"{_INDEXED} WHERE m.id > ? ORDER BY m.id LIMIT ?", (after_id, limit)
        )
        return [tuple(row) for row in rows]

    async def well_formed_vectors_after(
        self, after_id: int, limit: int
    ) -> builtins.list[tuple[int, np.ndarray]]:
        """Up to ``limit`` stored vectors of the right length after ``after_id``, by id."""
        rows = await self._fetch(
            "SELECT memory_id, vector, dim FROM embeddings WHERE memory_id > ? "
            "AND length(vector) = dim * 4 AND dim > 0 ORDER BY memory_id LIMIT ?",
            (after_id, limit),
        )
        return [
            (int(memory_id), np.frombuffer(blob, dtype=np.float32, count=int(dim)))
            for memory_id, blob, dim in rows
        ]


class LockedChecks(CheckReads):
    """The reads and repairs of the check inside one write transaction (see
    :meth:`ConsistencyQueries.locked`)."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
        return list(await self._db.execute_fetchall(sql, params))

    # -- keyword rows ------------------------------------------------------

    async def delete_orphan_fts_rows(self, rowids: Sequence[int]) -> int:
        """Delete these keyword rows (at most 500) if they still belong to no memory."""
        ids = list(rowids)
        cursor = await self._db.execute(
            f"DELETE FROM memories_fts WHERE rowid IN ({placeholders(len(ids))}) "
            "AND rowid NOT IN (SELECT id FROM memories)",
            ids,
        )
        deleted = max(0, cursor.rowcount)
        await cursor.close()
        return deleted

    async def memory_unchanged(self, memory_id: int, content: str, context: str | None) -> bool:
        """Whether the memory still exists with this content and context."""
        rows = await self._db.execute_fetchall(
            "SELECT 1 FROM memories WHERE id = ? AND content = ? AND context IS ?",
            (memory_id, content, context),
        )
        return bool(rows)

    async def keyword_row(self, memory_id: int) -> tuple[str, str] | None:
        """The memory's keyword row ``(content tokens, context tokens)``, if it has one."""
        rows = await self._db.execute_fetchall(
            "SELECT content_tokens, context_tokens FROM memories_fts WHERE rowid = ?",
            (memory_id,),
        )
        row = next(iter(rows), None)
        return None if row is None else (row[0] or "", row[1] or "")

    async def write_keyword_row(
        self, memory_id: int, content_tokens: str, context_tokens: str
    ) -> None:
        """Replace the memory's keyword row."""
        await self._db.execute("DELETE FROM memories_fts WHERE rowid = ?", (memory_id,))
        await self._db.execute(
            "INSERT INTO memories_fts (rowid, content_tokens, context_tokens) VALUES (?, ?, ?)",
            (memory_id, content_tokens, context_tokens),
        )

    # -- stored vectors ----------------------------------------------------

    async def delete_orphan_vectors(self, memory_ids: Sequence[int]) -> builtins.list[int]:
        """Delete these vectors (at most 500) that still belong to no memory; their ids."""
        ids = list(memory_ids)
        rows = await self._db.execute_fetchall(
            f"DELETE FROM embeddings WHERE memory_id IN ({placeholders(len(ids))}) "
            "AND memory_id NOT IN (SELECT id FROM memories) RETURNING memory_id",
            ids,
        )
        return _ids(list(rows))

    async def stored_vectors(
        self, memory_ids: Sequence[int]
    ) -> builtins.list[tuple[int, Any, Any]]:
        """``(id, vector blob, dim)`` of these memories' vectors (at most 500), as stored."""
        ids = list(memory_ids)
        rows = await self._db.execute_fetchall(
            f"SELECT memory_id, vector, dim FROM embeddings "
            f"WHERE memory_id IN ({placeholders(len(ids))})",
            ids,
        )
        return [(int(row[0]), row[1], row[2]) for row in rows]

    async def delete_wrong_dimension_vectors(
        self, fingerprint: str, dim: int, memory_ids: Sequence[int]
    ) -> builtins.list[int]:
        """Delete these memories' vectors (at most 500) that are still of
        ``fingerprint`` and not of length ``dim``; their ids."""
        ids = list(memory_ids)
        rows = await self._db.execute_fetchall(
            f"DELETE FROM embeddings WHERE memory_id IN ({placeholders(len(ids))}) "
            "AND fingerprint = ? AND dim != ? RETURNING memory_id",
            [*ids, fingerprint, dim],
        )
        return _ids(list(rows))

    async def delete_vectors(self, memory_ids: Sequence[int]) -> None:
        """Delete the vectors of these memories (at most 500)."""
        ids = list(memory_ids)
        await self._db.execute(
            f"DELETE FROM embeddings WHERE memory_id IN ({placeholders(len(ids))})", ids
        )

    async def valid_vectors_of(
        self, fingerprint: str, dim: int, memory_ids: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, matrix)`` of the well-formed vectors of these memories (at most 500)."""
        ids = list(memory_ids)
        rows = await self._db.execute_fetchall(
            "SELECT memory_id, vector FROM embeddings WHERE fingerprint = ? AND dim = ? "
            f"AND length(vector) = dim * 4 AND memory_id IN ({placeholders(len(ids))})",
            [fingerprint, dim, *ids],
        )
        return decode_vectors(rows, dim)

    # -- graph ---------------------------------------------------------------

    async def delete_graph_orphans(self) -> int:
        """Delete every graph row that belongs to nothing; how many rows went.

        An atom superseded by an orphaned one is made live again first (its rival goes).
        """
        await self._db.execute(
            "UPDATE memory_atoms SET status = 'active', superseded_by = NULL "
            "WHERE status = 'superseded' AND superseded_by IN (SELECT id FROM "
            "memory_atoms WHERE memory_id NOT IN (SELECT id FROM memories))"
        )
        deleted = 0
        for table, condition in _GRAPH_ORPHANS:
            cursor = await self._db.execute(f"DELETE FROM {table} WHERE {condition}")
            deleted += max(0, cursor.rowcount)
            await cursor.close()
        return deleted

    async def graphless_among(self, memory_ids: Sequence[int]) -> set[int]:
        """Which of these memories (at most 500) exist, have no atom and are not
        waiting for the derivation pipeline."""
        ids = list(memory_ids)
        rows = await self._db.execute_fetchall(
            f"SELECT id FROM memories WHERE id IN ({placeholders(len(ids))}) "
            "AND id NOT IN (SELECT memory_id FROM memory_atoms) "
            "AND id NOT IN (SELECT memory_id FROM derive_pending)",
            ids,
        )
        return {int(row[0]) for row in rows}

    async def write_graphs(
        self,
        items: Sequence[tuple[Memory, MemoryGraph]],
        extract: Callable[[Memory], MemoryGraph],
    ) -> int:
        """Replace the graphs of memories (at most 500); how many were written.

        A memory deleted since it was read is skipped; one whose content, category
        or importance changed since is extracted again from what it holds now.
        """
        if not items:
            return 0
        ids = [memory.id for memory, _ in items]
        rows = await self._db.execute_fetchall(
            "SELECT id, content, category, importance, updated_at FROM memories "
            f"WHERE id IN ({placeholders(len(ids))})",
            ids,
        )
        current = {int(row[0]): (row[1], row[2], float(row[3]), float(row[4])) for row in rows}
        written = 0
        for memory, graph in items:
            now = current.get(memory.id)
            if now is None:
                await delete_graph(self._db, memory.id)
                continue
            if now[:3] != (memory.content, memory.category, memory.importance):
                memory = dataclasses.replace(
                    memory, content=now[0], category=now[1], importance=now[2], updated_at=now[3]
                )
                graph = extract(memory)
            await delete_graph(self._db, memory.id)
            await write_graph(self._db, memory.id, graph, now=now[3])
            written += 1
        return written
