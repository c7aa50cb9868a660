"""The reads and the write of consolidation: near-duplicate memories merged into one.

:func:`active_vectors` reads what the comparison needs; :func:`merge_memories`
writes one merge in one transaction, after checking that no member changed since
it was read (:mod:`spade_memory.maintenance.consolidation` decides what merges).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..models import Memory
from ..text.graph import MemoryGraph
from .embeddings import DEPENDENTS_SQL
from .given_graph import KEEP_GIVEN, given_values, read_given, union_given
from .graph import delete_graph, write_graph
from .memory_rows import COLUMNS, row_to_memory
from .memory_writes import refresh_content_key
from .scope_filter import readers_key
from .sql import placeholders

if TYPE_CHECKING:
    from .base import BaseMemoryStore

__all__ = ["MergedFields", "active_vectors", "merge_memories"]


@dataclass(frozen=True, slots=True)
class MergedFields:
    """What the surviving memory of a merge holds afterwards."""

    content: str
    importance: float
    confidence: float
    access_count: int
    last_accessed: float | None
    metadata: str
    updated_at: float


async def active_vectors(base: BaseMemoryStore, fingerprint: str, dim: int) -> list[Any]:
    """``(id, category, metadata JSON, vector blob, seq, scope key)`` of every active
    memory with a well-formed vector of ``fingerprint`` and ``dim``, by id. The scope
    key (JSON text) is equal for two memories exactly when their scopes are: owner,
    visibility, the conversation of a conversation scope, the readers of a shared one."""
    return await base.fetchall(
        "SELECT m.id, m.category, m.metadata, e.vector, e.seq, json_array(m.owner, "
        "m.visibility, CASE WHEN m.visibility = 'conversation' THEN m.source_conversation END, "
        f"CASE WHEN m.visibility = 'shared' THEN {readers_key('m')} END) "
        "FROM memories AS m "
        "JOIN embeddings AS e ON e.memory_id = m.id WHERE m.status = 'active' "
        "AND e.fingerprint = ? AND e.dim = ? AND length(e.vector) = e.dim * 4 ORDER BY m.id",
        (fingerprint, dim),
    )


async def merge_memories(
    base: BaseMemoryStore,
    survivor: int,
    others: Sequence[int],
    *,
    expected: Mapping[int, Memory],
    fields: MergedFields,
    text: tuple[str, str, MemoryGraph] | None,
) -> bool:
    """Merge ``others`` into ``survivor`` in one transaction; False if any member changed.

    Args:
        survivor: the memory kept.
        others: the memories deleted (with their keyword rows, vectors and graphs).
        expected: each member as read; a member changed since (its text, scope,
            category or metadata updated, or told again), or no longer active,
            cancels the merge.
        fields: what the survivor holds afterwards.
        text: ``(content tokens, context tokens, graph)`` when the survivor's text
            changed: its keyword row and graph are written again, its vector dropped.
    """
    ids = list(expected)
    async with base.transaction() as db:
        rows = await db.execute_fetchall(
            f"SELECT {COLUMNS} FROM memories WHERE id IN ({placeholders(len(ids))})", ids
        )
        now_held = {memory.id: memory for memory in map(row_to_memory, rows)}
        if any(
            not _unchanged(read, now_held.get(memory_id)) for memory_id, read in expected.items()
        ):
            return False
        await db.execute(
            "UPDATE memories SET content = ?, importance = ?, confidence = ?, access_count = ?, "
            "last_accessed = ?, metadata = ?, updated_at = ? WHERE id = ?",
            (
                fields.content,
                fields.importance,
                fields.confidence,
                fields.access_count,
                fields.last_accessed,
                fields.metadata,
                fields.updated_at,
                survivor,
            ),
        )
        await refresh_content_key(db, survivor)
        if text is not None:
            content_tokens, context_tokens, graph = text
            await db.execute("DELETE FROM memories_fts WHERE rowid = ?", (survivor,))
            await db.execute(
                "INSERT INTO memories_fts (rowid, content_tokens, context_tokens) VALUES (?, ?, ?)",
                (survivor, content_tokens, context_tokens),
            )
            await db.execute("DELETE FROM embeddings WHERE memory_id = ?", (survivor,))
            await db.execute(DEPENDENTS_SQL, (survivor,))
            await delete_graph(db, survivor)
            await write_graph(db, survivor, graph, now=fields.updated_at)
            await db.execute("DELETE FROM derive_pending WHERE memory_id = ?", (survivor,))
        # A copy the agent was told otherwise (no message it was formed from) makes
        # the survivor a memory told otherwise too: forgetting the conversation it
        # was formed from no longer takes it.
        told_otherwise = await db.execute_fetchall(
            f"SELECT 1 FROM memories AS m WHERE m.id IN ({placeholders(len(others))}) "
            "AND NOT EXISTS (SELECT 1 FROM memory_sources AS s "
            "WHERE s.memory_id = m.id AND s.formed = 1) LIMIT 1",
            list(others),
        )
        if told_otherwise:
            await db.execute(
                "UPDATE memory_sources SET formed = 0 WHERE memory_id = ?", (survivor,)
            )
        await _keep_given_of_all(db, survivor, others)
        for other in others:
            # The survivor keeps the sources of its merged copies: formed from them if it
            # was formed itself, else told again by them (forgetting their conversation
            # never takes a memory the agent was told otherwise).
            await db.execute(
                "INSERT OR IGNORE INTO memory_sources (memory_id, message_id, session_id, formed) "
                "SELECT ?, message_id, session_id, CASE WHEN EXISTS (SELECT 1 FROM "
                "memory_sources WHERE memory_id = ? AND formed = 1) THEN formed ELSE 0 END "
                "FROM memory_sources WHERE memory_id = ?",
                (survivor, survivor, other),
            )
            # its uid, and those it stood for, stand for the survivor now: an import of
            # an export holding it finds it held
            await db.execute(
                "UPDATE memory_aliases SET memory_id = ? WHERE memory_id = ?", (survivor, other)
            )
            await db.execute(
                "INSERT OR IGNORE INTO memory_aliases (uid, memory_id) "
                "SELECT uid, ? FROM memories WHERE id = ?",
                (survivor, other),
            )
            await delete_graph(db, other)
            await db.execute("DELETE FROM memories WHERE id = ?", (other,))
            await db.execute("DELETE FROM memories_fts WHERE rowid = ?", (other,))
            await db.execute("DELETE FROM embeddings WHERE memory_id = ?", (other,))
            await db.execute(DEPENDENTS_SQL, (other,))
    return True


async def _keep_given_of_all(db: Any, survivor: int, others: Sequence[int]) -> None:
    """The survivor keeps the entities and relations named for any memory of the merge
    (a graph rebuild or repair extracts them with its text)."""
    ids = [survivor, *others]
    given = await read_given(db.execute_fetchall, ids)
    if not given.keys() - {survivor}:
        return  # nothing named for the others: the survivor's stays as it is
    entities, relations = union_given(given[i] for i in ids if i in given)
    await db.execute(KEEP_GIVEN, given_values(survivor, entities, relations))


def _unchanged(read: Memory, now: Memory | None) -> bool:
    """Whether a member of a merge is still active and as it was read (what the merge
    was made of, and the scope and category it keeps)."""
    return (
        now is not None
        and now.status == "active"
        and (now.content, now.context, now.category, now.scope, now.metadata, now.updated_at)
        == (read.content, read.context, read.category, read.scope, read.metadata, read.updated_at)
    )
