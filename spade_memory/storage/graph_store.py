"""Reads of the graph tables of one base memory: nodes, neighbours, entries, vectors.

The graph is written with its memory (:func:`~spade_memory.storage.graph.write_graph`);
this is what the graph route and the background embedder read of it, plus
:meth:`GraphStore.replace` to extract graphs again.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..errors import StorageError
from ..models import Viewer
from .scope_filter import memories_joined, visible_clause
from .sql import (
    SQL_CHUNK,
    chunks,
    placeholders,
    status_category_filter,
)

if TYPE_CHECKING:
    from .base import BaseMemoryStore

__all__ = ["GraphStore", "NodeHit", "PendingEntry"]


@dataclass(frozen=True, slots=True)
class NodeHit:
    """A node found by key, with the number of entries that name it."""

    id: int
    key: str
    type: str
    value: str
    entries: int


class PendingEntry(NamedTuple):
    """A graph entry to embed: its memory's id, its summary (the text its vector is
    made of) and its ``updated_at``."""

    memory_id: int
    text: str
    updated_at: float


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class GraphStore:
    """Reads of the graph tables of one base memory (and its entry vectors)."""

    def __init__(self, base: BaseMemoryStore) -> None:
        self._base = base

    @property
    def base(self) -> BaseMemoryStore:
        return self._base

    async def memory_count(self) -> int:
        """About how many memories there are: the highest id (ids are never reused).

        Exact enough to weigh how common an entity is, and it costs one index probe
        where ``count(*)`` reads every row.
        """
        rows = await self._base.fetchall("SELECT coalesce(max(id), 0) FROM memories")
        return int(rows[0][0])

    async def text_count(self, terms: Sequence[str], *, phrase: bool, cap: int) -> int:
        """How many memories' text holds ``terms`` (index terms), counted up to ``cap``.

        As a phrase, or all of them (``phrase=False``). As a phrase, it is the count
        :meth:`phrase_memories` gives for ``" ".join(terms)`` with ``tokens=True``.
        """
        quoted = ['"' + term.replace('"', '""') + '"' for term in terms if term]
        if not quoted:
            return 0
        match = "content_tokens : " + (
            '"' + " ".join(t.replace('"', '""') for t in terms) + '"'
            if phrase
            else "(" + " AND ".join(quoted) + ")"
        )
        rows = await self._base.fetchall(
            "SELECT count(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH ? LIMIT ?)",
            (match, int(cap)),
        )
        return int(rows[0][0])

    async def entry_count(self) -> int:
        """How many memories have a graph entry."""
        rows = await self._base.fetchall("SELECT count(*) FROM graph_entries")
        return int(rows[0][0])

    async def node_count(self) -> int:
        rows = await self._base.fetchall("SELECT count(*) FROM graph_nodes")
        return int(rows[0][0])

    async def nodes_by_keys(self, keys: Iterable[str]) -> builtins.list[NodeHit]:
        """The nodes with these canonical keys, with how many entries name each."""
        return await self._nodes("key", list(dict.fromkeys(keys)))

    async def nodes_by_ids(self, node_ids: Iterable[int]) -> builtins.list[NodeHit]:
        """The nodes with these ids, with how many entries name each."""
        return await self._nodes("id", list(dict.fromkeys(node_ids)))

    async def _nodes(self, column: str, wanted: Sequence[Any]) -> builtins.list[NodeHit]:
        found: builtins.list[NodeHit] = []
        for chunk in chunks(wanted):
            rows = await self._base.fetchall(
                "SELECT id, key, type, value, entries FROM graph_nodes "
                f"WHERE {column} IN ({placeholders(len(chunk))})",
                chunk,
            )
            found.extend(NodeHit(int(r[0]), r[1], r[2], r[3], int(r[4])) for r in rows)
        return found

    async def recount_nodes(self) -> None:
        """Count again how many entries name each node (after rows were removed by hand)."""
        async with self._base.transaction() as db:
            await db.execute(
                "UPDATE graph_nodes SET entries = "
                "(SELECT count(*) FROM graph_entry_nodes WHERE node_id = graph_nodes.id)"
            )

    async def phrase_memories(
        self,
        phrase: str,
        *,
        tokens: bool,
        limit: int,
        cap: int = 10_000,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
        viewer: Viewer | None = None,
        count: int | None = None,
    ) -> tuple[int, builtins.list[int]]:
        """Memories whose text holds ``phrase``: ``(how many, to cap; ids newest first, to limit)``.

        Args:
            phrase: with ``tokens``, the phrase's index terms joined by spaces (matched
                as an FTS5 phrase over the memories' content); else a substring of
                the content (for Chinese, matched with ``LIKE``).
            count: how many memories hold it, to ``cap``, when the caller counted
                already (:meth:`text_count` of the same terms as a phrase): not
                counted again.
        """
        if not phrase.strip() or limit <= 0:
            return 0, []
        where, params = status_category_filter(categories, statuses, "m.", viewer)
        if tokens:
            match = 'content_tokens : "' + phrase.replace('"', '""') + '"'
            counting = "SELECT 1 FROM memories_fts WHERE memories_fts MATCH ?"
            value = match
            listing = self._base.fetchall(
                f"SELECT m.id FROM memories_fts AS f JOIN {memories_joined(viewer)} "
                f"ON m.id = f.rowid WHERE memories_fts MATCH ? AND {where} "
                "ORDER BY f.rowid DESC LIMIT ?",
                [match, *params, int(limit)],
            )
        else:
            counting = "SELECT 1 FROM memories WHERE content LIKE ? ESCAPE '\\'"
            value = "%" + _escape_like(phrase) + "%"
            listing = self._base.fetchall(
                f"SELECT m.id FROM memories AS m WHERE m.content LIKE ? ESCAPE '\\' AND {where} "
                "ORDER BY m.id DESC LIMIT ?",
                [value, *params, int(limit)],
            )
        if count is None:  # both queries submitted together: one wait
            count, rows = await asyncio.gather(self._count(counting, value, cap), listing)
        else:
            rows = await listing
        return count, [int(r[0]) for r in rows]

    async def _count(self, select: str, value: str, cap: int) -> int:
        """How many rows ``select`` (one parameter, ``value``) gives, counted up to ``cap``."""
        rows = await self._base.fetchall(
            f"SELECT count(*) FROM ({select} LIMIT ?)", (value, int(cap))
        )
        return int(rows[0][0])

    async def node_memories(
        self,
        node_ids: Sequence[int],
        *,
        per_node: int,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
        viewer: Viewer | None = None,
    ) -> builtins.list[tuple[int, int]]:
        """``(node id, memory id)`` of the memories naming each node, newest first per node.

        Each node walks its index entries from the newest memory and stops at
        ``per_node``, so a node named by many memories costs no more than a rare one.
        """
        where, params = status_category_filter(categories, statuses, "m.", viewer)
        part = (
            "SELECT * FROM (SELECT e.node_id, e.memory_id FROM graph_entry_nodes AS e "
            f"JOIN {memories_joined(viewer)} ON m.id = e.memory_id "
            f"WHERE e.node_id = ? AND {where} ORDER BY e.memory_id DESC LIMIT ?)"
        )
        pairs: builtins.list[tuple[int, int]] = []
        for chunk in chunks(list(dict.fromkeys(node_ids))[: SQL_CHUNK // 4]):
            rows = await self._base.fetchall(
                " UNION ALL ".join([part] * len(chunk)),
                [value for node_id in chunk for value in (node_id, *params, int(per_node))],
            )
            pairs.extend((int(r[0]), int(r[1])) for r in rows)
        return pairs

    async def entry_nodes(
        self, memory_ids: Sequence[int], node_ids: Sequence[int]
    ) -> builtins.list[tuple[int, int]]:
        """``(memory id, node id)`` for each of these memories that names one of these nodes."""
        nodes = list(dict.fromkeys(node_ids))[:SQL_CHUNK]
        pairs: builtins.list[tuple[int, int]] = []
        for chunk in chunks(list(memory_ids)):
            rows = await self._base.fetchall(
                "SELECT memory_id, node_id FROM graph_entry_nodes "
                f"WHERE memory_id IN ({placeholders(len(chunk))}) "
                f"AND node_id IN ({placeholders(len(nodes))})",
                [*chunk, *nodes],
            )
            pairs.extend((int(r[0]), int(r[1])) for r in rows)
        return pairs

    async def neighbour_hits(
        self,
        node_ids: Sequence[int],
        *,
        typed_only: Collection[int] = (),
        per_node: int = 400,
        viewer: Viewer | None = None,
    ) -> builtins.list[tuple[int, NodeHit, str, float]]:
        """``(node, neighbour node, relation, total weight)``, either direction.

        Each node contributes its ``per_node`` newest edges each way (a node named
        everywhere co-occurs with everything: its oldest links add nothing but
        time); from the nodes in ``typed_only`` only typed relations are followed.
        With a ``viewer``, only edges of memories it sees are followed (an edge
        says what its memory said).
        """
        wanted = list(dict.fromkeys(node_ids))[: SQL_CHUNK // 4]
        if not wanted:
            return []
        seen, seen_params = visible_clause(viewer, "m.")
        visible = (
            ""
            if viewer is None
            else f" AND EXISTS (SELECT 1 FROM {memories_joined(viewer)} "
            f"WHERE m.id = graph_edges.memory_id AND {seen})"
        )
        parts: builtins.list[str] = []
        params: builtins.list[Any] = []
        for node_id in wanted:
            typed = " AND relation != 'related_to'" if node_id in typed_only else ""
            for near, far in (("source_id", "target_id"), ("target_id", "source_id")):
                parts.append(
                    f"SELECT * FROM (SELECT {near} AS a, {far} AS b, relation, weight "
                    f"FROM graph_edges WHERE {near} = ?{typed}{visible} "
                    "ORDER BY rowid DESC LIMIT ?)"
                )
                params += [node_id, *seen_params, int(per_node)]
        rows = await self._base.fetchall(
            "SELECT e.a, e.b, e.relation, sum(e.weight), n.entries, n.key, n.type, n.value FROM ("
            + " UNION ALL ".join(parts)
            + ") AS e JOIN graph_nodes AS n ON n.id = e.b GROUP BY e.a, e.b, e.relation",
            params,
        )
        return [
            (int(r[0]), NodeHit(int(r[1]), r[5], r[6], r[7], int(r[4])), str(r[2]), float(r[3]))
            for r in rows
        ]

    async def search_entries(
        self,
        term: str,
        *,
        limit: int,
        cap: int = 10_000,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
        viewer: Viewer | None = None,
    ) -> tuple[int, builtins.list[tuple[int, str]]]:
        """Entries containing ``term`` (trigram FTS; at least three characters).

        Returns:
            ``(how many entries contain it, counted up to cap, [(memory id, summary),
            ...])``, the list newest first and cut at ``limit``, after the filters.
        """
        if len(term) < 3 or limit <= 0:
            return 0, []
        match = '"' + term.replace('"', '""') + '"'
        counted = await self._base.fetchall(
            "SELECT count(*) FROM "
            "(SELECT 1 FROM graph_entries_fts WHERE graph_entries_fts MATCH ? LIMIT ?)",
            (match, int(cap)),
        )
        where, params = status_category_filter(categories, statuses, "m.", viewer)
        rows = await self._base.fetchall(
            "SELECT g.memory_id, g.summary FROM graph_entries_fts AS f "
            "JOIN graph_entries AS g ON g.memory_id = f.rowid "
            f"JOIN {memories_joined(viewer)} ON m.id = f.rowid "
            f"WHERE graph_entries_fts MATCH ? AND {where} ORDER BY f.rowid DESC LIMIT ?",
            [match, *params, int(limit)],
        )
        return int(counted[0][0]), [(int(r[0]), str(r[1])) for r in rows]

    async def like_entries(
        self,
        needle: str,
        *,
        limit: int,
        cap: int = 10_000,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
        viewer: Viewer | None = None,
    ) -> tuple[int, builtins.list[int]]:
        """Entries containing a short ``needle`` (plain ``LIKE``, for under three characters).

        Returns:
            ``(how many entries contain it, counted up to cap, memory ids newest
            first, cut at limit)``.
        """
        if not needle or limit <= 0:
            return 0, []
        pattern = "%" + _escape_like(needle) + "%"
        counted = await self._base.fetchall(
            "SELECT count(*) FROM (SELECT 1 FROM graph_entries "
            "WHERE summary LIKE ? ESCAPE '\\' LIMIT ?)",
            (pattern, int(cap)),
        )
        where, params = status_category_filter(categories, statuses, "m.", viewer)
        rows = await self._base.fetchall(
            f"SELECT g.memory_id FROM graph_entries AS g JOIN {memories_joined(viewer)} "
            "ON m.id = g.memory_id "
            f"WHERE g.summary LIKE ? ESCAPE '\\' AND {where} ORDER BY g.memory_id DESC LIMIT ?",
            [pattern, *params, int(limit)],
        )
        return int(counted[0][0]), [int(r[0]) for r in rows]

    # -- entry vectors -----------------------------------------------------

    async def pending_vectors(
        self, fingerprint: str, limit: int, *, after_id: int = 0
    ) -> builtins.list[tuple[PendingEntry, np.ndarray | None]]:
        """Entries without a vector of ``fingerprint``, each with a vector to reuse.

        Ordered by memory id, starting after ``after_id`` (a cursor for one pass).
        The vector to reuse is the memory's document vector when the summary is its content
        word for word (so it need not be embedded twice; a turn's vector holds the
        turn before it too, :mod:`spade_memory.storage.embeddings`), else ``None``.
        """
        rows = await self._base.fetchall(
            "SELECT g.memory_id, g.summary, g.updated_at, "
            "CASE WHEN g.summary = m.content THEN d.vector END, d.dim "
            "FROM graph_entries AS g JOIN memories AS m ON m.id = g.memory_id "
            "LEFT JOIN graph_embeddings AS v ON v.memory_id = g.memory_id AND v.fingerprint = ? "
            "LEFT JOIN embeddings AS d ON d.memory_id = g.memory_id AND d.fingerprint = ? "
            "WHERE v.memory_id IS NULL AND g.memory_id > ? ORDER BY g.memory_id LIMIT ?",
            (fingerprint, fingerprint, int(after_id), int(limit)),
        )
        return [
            (
                PendingEntry(int(r[0]), str(r[1]), float(r[2])),
                None if r[3] is None else np.frombuffer(r[3], dtype=np.float32, count=int(r[4])),
            )
            for r in rows
        ]

    async def put_vectors(
        self, fingerprint: str, items: Sequence[tuple[PendingEntry, np.ndarray]]
    ) -> builtins.list[int]:
        """Store entry vectors, each made of its :class:`PendingEntry`; return the ids stored.

        An entry deleted or rewritten since it was read is skipped, so a stale vector
        is never kept: it is written only if the entry, read again in the write
        transaction, still has the summary and ``updated_at`` it was read with. The
        summary is compared too, since two writes may share a clock reading (a coarse
        or injected clock): a graph written again while the old summary was being
        embedded never keeps the old summary's vector.
        """
        stored: builtins.list[int] = []
        if not items:
            return stored
        async with self._base.transaction() as db:
            for entry, vector in items:
                array = np.ascontiguousarray(vector, dtype=np.float32)
                if array.ndim != 1 or not np.all(np.isfinite(array)):
                    raise StorageError(
                        f"refusing a malformed graph vector for memory {entry.memory_id}"
                    )
                cursor = await db.execute(
                    "INSERT INTO graph_embeddings (memory_id, fingerprint, dim, vector) "
                    "SELECT memory_id, ?, ?, ? FROM graph_entries "
                    "WHERE memory_id = ? AND summary = ? AND updated_at = ? "
                    "ON CONFLICT (memory_id) DO UPDATE SET fingerprint = excluded.fingerprint, "
                    "dim = excluded.dim, vector = excluded.vector",
                    (
                        fingerprint,
                        int(array.shape[0]),
                        array.tobytes(),
                        entry.memory_id,
                        entry.text,  # the summary embedded
                        entry.updated_at,
                    ),
                )
                if cursor.rowcount:
                    stored.append(entry.memory_id)
                await cursor.close()
        return stored

    async def load_vectors(self, fingerprint: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """Every entry vector of ``fingerprint``: ``(ids, matrix)``."""
        rows = await self._base.fetchall(
            "SELECT memory_id, vector FROM graph_embeddings WHERE fingerprint = ? AND dim = ?",
            (fingerprint, int(dim)),
        )
        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        matrix = np.zeros((len(rows), dim), dtype=np.float32)
        for index, row in enumerate(rows):
            matrix[index] = np.frombuffer(row[1], dtype=np.float32, count=dim)
        return ids, matrix
