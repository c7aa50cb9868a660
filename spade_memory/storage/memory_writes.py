"""The write path of the base memory: inserts, updates, deletes.

Every transaction is begun by the store's writer (:mod:`spade_memory.storage.writer`).
An insert runs whole on the connection's thread (the writer's ``BEGIN IMMEDIATE``,
the memory rows of :class:`InsertTransaction` with their FTS rows, the stats, the
graphs, ``COMMIT`` in one hop). Single inserts arriving while a transaction runs are
committed together in the next one (:mod:`spade_memory.storage.group_commit`).
Updates, deletes and access counts run in the writer's transaction statement by
statement.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import aiosqlite

from ..errors import StorageError
from ..models import Memory, Scope
from ..text.content_key import content_key
from ..text.graph import MemoryGraph
from .derivation import Deferred, clear_pending, mark_pending, renew_pending
from .embeddings import DEPENDENTS_SQL
from .given_graph import forget_given, keep_given
from .graph import (
    delete_graph,
    delete_graph_rows,
    reinforce_atoms,
    resettle_memory,
    write_graph,
    write_graph_rows,
)
from .memory_rows import (
    COLUMNS,
    IndexedText,
    NewMemory,
    Transaction,
    new_to_memory,
    row_to_memory,
)
from .on_thread import run_on_connection
from .writer import WriteFailed, Writer

__all__ = [
    "UPDATABLE",
    "InsertTransaction",
    "StaleRead",
    "WriteFailed",
    "delete_memory",
    "delete_rows",
    "insert_rows",
    "run_insert",
    "touch_work",
    "update_memory",
]

UPDATABLE = frozenset(
    {"category", "content", "context", "confidence", "importance", "status", "metadata", "scope"}
)
"""The fields :func:`update_memory` may change."""

_INSERT_MEMORY = (
    "INSERT INTO memories (uid, category, content, context, confidence, importance, "
    "status, source_conversation, source_sender, created_at, updated_at, last_accessed, "
    "access_count, metadata, previous_id, owner, visibility, content_key) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
)
# Stored copies of a memory: active, same key, category and scope (a conversation's
# own memory only within its conversation); readers of shared ones compared apart.
_COPIES = (
    "SELECT id, CASE WHEN visibility = 'shared' THEN (SELECT json_group_array(r.reader) "
    "FROM memory_readers AS r WHERE r.memory_id = memories.id) END "
    "FROM memories WHERE content_key = ? AND category = ? AND status = 'active' "
    "AND owner IS ? AND visibility = ? "
    "AND (visibility != 'conversation' OR source_conversation IS ?) AND id <= ? "
    "ORDER BY id DESC LIMIT 8"
)
_NO_ID_BOUND = 2**63 - 1
# Told again: one more access, the higher importance and confidence of the two; its
# times move forward only (an imported copy carries the time it was told elsewhere).
_REINFORCE_MEMORY = (
    "UPDATE memories SET access_count = access_count + 1, "
    "last_accessed = max(coalesce(last_accessed, created_at), ?1), "
    "updated_at = max(updated_at, ?1), "
    "importance = max(importance, ?2), confidence = max(confidence, ?3) WHERE id = ?4"
)
_KEEP_ALIAS = "INSERT OR IGNORE INTO memory_aliases (uid, memory_id) VALUES (?, ?)"
_INSERT_READER = "INSERT OR IGNORE INTO memory_readers (memory_id, reader) VALUES (?, ?)"
_LAST_TURN = "SELECT id FROM memories WHERE source_conversation = ? ORDER BY id DESC LIMIT 1"
_INSERT_FTS = "INSERT INTO memories_fts (rowid, content_tokens, context_tokens) VALUES (?, ?, ?)"


async def refresh_content_key(db: aiosqlite.Connection, memory_id: int) -> None:
    """Key memory ``memory_id`` under its text as it is now, so that storing that text
    again finds it as a copy, and storing its old text no longer does (inside the
    transaction that changed its content or context)."""
    rows = await db.execute_fetchall(
        "SELECT content, context FROM memories WHERE id = ?", (memory_id,)
    )
    for content, context in rows:
        await db.execute(
            "UPDATE memories SET content_key = ? WHERE id = ?",
            (content_key(content, context), memory_id),
        )


def _copy_key(new: NewMemory, key: bytes) -> tuple[Any, ...]:
    """What two memories share when one is a copy of the other (see ``_COPIES``)."""
    scope = new.scope
    conversation = new.source_conversation if scope.visibility == "conversation" else None
    return (key, new.category, scope.owner, scope.visibility, conversation, scope.shared_with)


def _copy_of(
    new: NewMemory,
    key: bytes,
    made: dict[tuple[Any, ...], int],
    held_through: int,
    db: sqlite3.Connection,
) -> int | None:
    """The id of a stored (or, unless ``new.held_copies_only``, just inserted) active
    copy of ``new``, if any; ``held_through`` is the highest id stored before."""
    same = _copy_key(new, key)
    if new.held_copies_only:
        bound = held_through
    elif same in made:
        return made[same]
    else:
        bound = _NO_ID_BOUND
    scope = new.scope
    params = (key, new.category, scope.owner, scope.visibility, new.source_conversation, bound)
    for memory_id, readers in db.execute(_COPIES, params).fetchall():
        if frozenset(json.loads(readers) if readers else ()) == scope.shared_with:
            return int(memory_id)
    return None


def insert_rows(
    rows: Sequence[tuple[NewMemory, IndexedText, str]],
    agent: str,
    last: float,
    db: sqlite3.Connection,
) -> tuple[list[int], set[int]]:
    """Insert memories and their FTS rows and count them (on the connection's thread).

    A memory of a conversation is linked to its previous turn: the newest memory
    of the same ``source_conversation`` before it, read inside this transaction
    (so rows of one conversation in one transaction chain in their order).

    A memory with ``dedupe`` set that has an active copy (same content key,
    category and scope; stored before or earlier in this transaction) is not
    inserted: the copy is reinforced (one more access, the higher importance and
    confidence) and its id stands in for it.

    Returns:
        The id of each row, and the positions of the rows that reinforced a copy
        rather than being inserted (a copy inserted earlier in the same call is
        not one of them: it was inserted).
    """
    ids: list[int] = []
    reinforced: set[int] = set()
    made: dict[tuple[Any, ...], int] = {}
    last_turn: dict[str, int] = {}
    (held_through,) = db.execute(
        "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'memories'"
    ).fetchone()
    for position, (new, text, metadata) in enumerate(rows):
        key = content_key(new.content, new.context)
        copy = _copy_of(new, key, made, int(held_through), db) if new.dedupe else None
        if copy is not None:
            db.execute(
                _REINFORCE_MEMORY,
                (new.created_at, new.importance, new.confidence, copy),
            )
            if new.held_copies_only:  # an imported copy: its uid now stands for the copy
                db.execute(_KEEP_ALIAS, (new.uid, copy))
            ids.append(copy)
            reinforced.add(position)
            continue
        previous: int | None = None
        conversation = new.source_conversation
        if conversation is not None:
            if conversation in last_turn:
                previous = last_turn[conversation]
            else:
                found = db.execute(_LAST_TURN, (conversation,)).fetchone()
                previous = None if found is None else int(found[0])
        # RETURNING: the id comes back with the insert.
        cursor = db.execute(
            _INSERT_MEMORY,
            (
                new.uid,
                new.category,
                new.content,
                new.context,
                new.confidence,
                new.importance,
                new.status,
                new.source_conversation,
                new.source_sender,
                new.created_at,
                new.updated_at if new.updated_at is not None else new.created_at,
                new.last_accessed,
                new.access_count,
                metadata,
                previous,
                new.scope.owner,
                new.scope.visibility,
                key,
            ),
        )
        memory_id = int(cursor.fetchone()[0])
        cursor.close()
        if new.dedupe and new.status == "active":  # an archived row is no copy to reinforce
            made[_copy_key(new, key)] = memory_id
        if new.scope.shared_with:
            db.executemany(_INSERT_READER, [(memory_id, r) for r in sorted(new.scope.shared_with)])
        if conversation is not None:
            last_turn[conversation] = memory_id
        db.execute(_INSERT_FTS, (memory_id, text.content_tokens, text.context_tokens))
        ids.append(memory_id)
    db.execute(
        "UPDATE agent_stats SET stores = stores + ?, last_store_at = ? WHERE agent = ?",
        (len(rows), last, agent),
    )
    return ids, reinforced


class InsertTransaction:
    """The statements of one insert transaction, run whole on the connection's thread
    by the store's writer (see ``insert_many``); it begins and commits it."""

    def __init__(
        self,
        rows: Sequence[tuple[NewMemory, IndexedText, str]],
        agent: str,
        last: float,
        graphs: Sequence[MemoryGraph | Deferred | None] | None,
        graph_time: float | None,
    ) -> None:
        self.rows = rows
        self.agent = agent
        self.last = last
        self.graphs = graphs
        self.graph_time = graph_time
        self.reinforced: dict[int, Memory] = {}  # copies told again, as they now are

    @classmethod
    def of(
        cls,
        items: Sequence[tuple[NewMemory, IndexedText]],
        agent: str,
        graphs: Sequence[MemoryGraph | Deferred | None] | None,
        graph_time: float | None,
    ) -> InsertTransaction:
        """The transaction inserting ``items`` (their metadata as JSON) for ``agent``."""
        rows = [
            (new, text, json.dumps(dict(new.metadata), ensure_ascii=False)) for new, text in items
        ]
        last = max(item[0].created_at for item in items)
        return cls(rows, agent, last, graphs, graph_time)

    def memories(self, ids: Sequence[int]) -> list[Memory]:
        """The memories written under ``ids``, built from what was written (no read
        back), or as read at the end of the transaction for a reinforced copy."""
        return [
            self.reinforced.get(memory_id) or new_to_memory(memory_id, new, metadata)
            for memory_id, (new, _, metadata) in zip(ids, self.rows, strict=True)
        ]

    def __call__(self, db: sqlite3.Connection) -> list[int]:
        """The rows, FTS rows, stats and graphs; inside the writer's transaction.

        A reinforced copy gets no new graph: its atoms are reinforced instead, and
        it is read back as it now is. A :class:`Deferred` graph is not written: the
        memory is marked for the derivation pipeline instead, in this transaction.
        """
        ids, reinforced = insert_rows(self.rows, self.agent, self.last, db)
        if self.graphs is not None:
            rows = zip(self.rows, ids, self.graphs, strict=True)
            for position, ((new, _, _), memory_id, graph) in enumerate(rows):
                if graph is None:
                    continue
                when = new.created_at if self.graph_time is None else self.graph_time
                # when it was told: its claims are ordered by it, not by the import
                told = new.created_at if new.updated_at is None else new.updated_at
                if position in reinforced:
                    reinforce_atoms(memory_id, graph.reinforcement_factor, when, db, told=told)
                    renew_pending(memory_id, when, db, told=told)  # not derived yet: no atoms
                elif isinstance(graph, Deferred):
                    mark_pending(memory_id, graph, self.graph_time, db, told=told)
                    keep_given(memory_id, graph.entities, graph.relations, db)
                else:
                    write_graph_rows(memory_id, graph, when, db, told=told)
                    keep_given(memory_id, graph.given_entities, graph.given_relations, db)
        if reinforced:
            told_again = sorted({ids[position] for position in reinforced})
            found = db.execute(
                f"SELECT {COLUMNS} FROM memories WHERE id IN ({', '.join('?' * len(told_again))})",
                told_again,
            ).fetchall()
            self.reinforced = {int(row[0]): row_to_memory(row) for row in found}
        return ids


async def run_insert(writer: Writer, label: str, write: InsertTransaction) -> list[int]:
    """Run ``write`` as one whole transaction of ``writer``; its memory ids.

    Raises:
        StorageError: the transaction failed (nothing of it was written).
    """
    try:
        # The whole transaction (BEGIN, the rows with their FTS rows, the
        # stats, the graphs, COMMIT) in one hop to the connection's thread:
        # a hop cost more in handing over than its statements in running.
        return await writer.run(write)
    except WriteFailed as exc:
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        raise StorageError(f"{label}: {exc.what}{cause}") from exc
    except sqlite3.IntegrityError as exc:
        raise StorageError(f"{label}: insert refused: {exc}") from exc
    except sqlite3.Error as exc:
        raise StorageError(f"{label}: insert failed: {exc}") from exc


async def update_memory(
    transaction: Transaction,
    agent: str,
    label: str,
    memory_id: int,
    changes: Mapping[str, Any],
    *,
    text: IndexedText | None,
    now: float,
    graph: MemoryGraph | None,
    read: tuple[str, str | None, str, str | None, str] | None = None,
) -> bool:
    """Change fields of a memory (see ``BaseMemoryStore.update``); False if absent.

    ``read`` is the content, context and category ``text`` and ``graph`` were made
    from, and the owner and visibility the change was allowed on; if the memory no
    longer holds them (another update came first), nothing is written and
    :class:`StaleRead` is raised.
    """
    unknown = set(changes) - UPDATABLE
    if unknown:
        raise ValueError(f"cannot update fields {sorted(unknown)}")
    values = dict(changes)
    if "metadata" in values:
        values["metadata"] = json.dumps(dict(values["metadata"]), ensure_ascii=False)
    scope: Scope | None = values.pop("scope", None)
    if scope is not None:
        values["owner"] = scope.owner
        values["visibility"] = scope.visibility
    assignments = ", ".join(f"{name} = ?" for name in values)
    params: list[Any] = [*values.values(), now, memory_id]
    guard = ""
    if read is not None:
        guard = (
            " AND content = ? AND context IS ? AND category = ? AND owner IS ? AND visibility = ?"
        )
        params.extend(read)
    try:
        async with transaction() as db:
            cursor = await db.execute(
                f"UPDATE memories SET {assignments}{', ' if assignments else ''}"
                f"updated_at = ? WHERE id = ?{guard}",
                params,
            )
            changed = cursor.rowcount
            await cursor.close()
            if not changed:
                if read is not None and await _exists(db, memory_id):
                    raise StaleRead(f"memory {memory_id} changed since it was read")
                return False
            if values.keys() & {"content", "context"}:
                await refresh_content_key(db, memory_id)
            if scope is not None:
                await db.execute("DELETE FROM memory_readers WHERE memory_id = ?", (memory_id,))
                await db.executemany(
                    _INSERT_READER, [(memory_id, r) for r in sorted(scope.shared_with)]
                )
            if text is not None:
                await db.execute("DELETE FROM memories_fts WHERE rowid = ?", (memory_id,))
                await db.execute(
                    "INSERT INTO memories_fts (rowid, content_tokens, context_tokens) "
                    "VALUES (?, ?, ?)",
                    (memory_id, text.content_tokens, text.context_tokens),
                )
            if "content" in changes:
                await db.execute("DELETE FROM embeddings WHERE memory_id = ?", (memory_id,))
            elif "category" in changes or "scope" in changes:
                # its turn before may no longer be its vector's context, or become it
                await db.execute(
                    "DELETE FROM embeddings WHERE memory_id = ? AND EXISTS "
                    "(SELECT 1 FROM memories WHERE id = ? AND previous_id IS NOT NULL)",
                    (memory_id, memory_id),
                )
            if changes.keys() & {"content", "category", "scope"}:
                await db.execute(DEPENDENTS_SQL, (memory_id,))
            if graph is not None:
                await delete_graph(db, memory_id)
                await write_graph(db, memory_id, graph, now=now)
                await run_on_connection(db, partial(clear_pending, memory_id))
            elif scope is not None:  # its claims now hold in another scope
                await run_on_connection(db, partial(resettle_memory, memory_id))
            await db.execute(
                "UPDATE agent_stats SET updates = updates + 1 WHERE agent = ?", (agent,)
            )
    except sqlite3.Error as exc:
        raise StorageError(f"{label}: update failed: {exc}") from exc
    return True


class StaleRead(Exception):
    """A memory changed between the read an update was computed from and its write."""


async def _exists(db: aiosqlite.Connection, memory_id: int) -> bool:
    cursor = await db.execute("SELECT 1 FROM memories WHERE id = ?", (memory_id,))
    row = await cursor.fetchone()
    await cursor.close()
    return row is not None


def delete_rows(memory_id: int, agent: str, db: sqlite3.Connection) -> bool:
    """Delete a memory with its FTS row, vector, graph and sources, inside the caller's
    transaction (on the connection's thread); False if it was absent."""
    delete_graph_rows(memory_id, db)
    removed = db.execute("DELETE FROM memories WHERE id = ?", (memory_id,)).rowcount
    if removed:
        db.execute("DELETE FROM memories_fts WHERE rowid = ?", (memory_id,))
        db.execute("DELETE FROM embeddings WHERE memory_id = ?", (memory_id,))
        db.execute(DEPENDENTS_SQL, (memory_id,))
        clear_pending(memory_id, db)
        forget_given(memory_id, db)
        db.execute("UPDATE agent_stats SET forgets = forgets + 1 WHERE agent = ?", (agent,))
    return bool(removed)


async def delete_memory(transaction: Transaction, agent: str, label: str, memory_id: int) -> bool:
    """Delete a memory with its FTS row, vector and graph. Returns False if absent."""
    try:
        async with transaction() as db:
            return await run_on_connection(db, partial(delete_rows, memory_id, agent))
    except sqlite3.Error as exc:
        raise StorageError(f"{label}: delete failed: {exc}") from exc


def touch_work(
    memory_ids: Iterable[int],
    when: float,
    *,
    agent: str,
    searches: int = 0,
    last_search_at: float | None = None,
) -> Callable[[sqlite3.Connection], None] | None:
    """The writes that record one access of each memory and ``searches`` searches of
    ``agent`` (the last at ``last_search_at``), as one transaction's work on the
    connection's thread (coalesced by the caller); ``None`` when there is nothing."""
    counts: dict[int, int] = {}
    for memory_id in memory_ids:
        counts[memory_id] = counts.get(memory_id, 0) + 1
    if not counts and searches <= 0:
        return None

    def work(db: sqlite3.Connection) -> None:
        if counts:
            db.executemany(
                "UPDATE memories SET last_accessed = ?, access_count = access_count + ? "
                "WHERE id = ?",
                [(when, n, memory_id) for memory_id, n in counts.items()],
            )
        if searches > 0:
            db.execute(
                "UPDATE agent_stats SET searches = searches + ?, last_search_at = "
                "max(coalesce(last_search_at, 0), ?) WHERE agent = ?",
                (searches, when if last_search_at is None else last_search_at, agent),
            )

    return work
