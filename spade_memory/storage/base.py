"""The base memory: one agent's long-term memories in SQLite, through aiosqlite.

One long-lived connection per agent (so ``:memory:`` works and nothing is
re-opened per call), WAL journal, a busy timeout, ``synchronous`` as configured.
Every write is one ``BEGIN IMMEDIATE`` transaction behind an asyncio lock; a
write is acknowledged once its transaction commits. SQLite is the single source
of truth: rows, FTS rows and embedding vectors all live here.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite
import numpy as np

from ..config import StorageConfig
from ..errors import StorageCorrupted, StorageError, StoreClosedError
from ..models import Memory
from .files import quarantine
from .migrations import backup_database, migrate

__all__ = ["BaseMemoryStore", "IndexedText", "NewMemory"]

logger = logging.getLogger(__name__)

_COLUMNS = (
    "id, uid, category, content, context, confidence, importance, status, "
    "source_conversation, source_sender, created_at, updated_at, last_accessed, "
    "access_count, metadata"
)
_UPDATABLE = frozenset(
    {"category", "content", "context", "confidence", "importance", "status", "metadata"}
)
_BM25_WEIGHTS = "1.0, 0.3"  # content tokens, context tokens
_SQL_CHUNK = 500


@dataclass(frozen=True, slots=True)
class IndexedText:
    """The tokenised text of a memory, as indexed by FTS5 (tokens joined by spaces)."""

    content_tokens: str
    context_tokens: str = ""


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A memory about to be inserted (validated by the caller)."""

    uid: str
    category: str
    content: str
    context: str | None
    confidence: float
    importance: float
    created_at: float
    source_conversation: str | None = None
    source_sender: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    status: str = "active"
    updated_at: float | None = None
    last_accessed: float | None = None
    access_count: int = 0


def _row_to_memory(row: Sequence[Any]) -> Memory:
    try:
        metadata = json.loads(row[14]) if row[14] else {}
    except json.JSONDecodeError:
        metadata = {"_unreadable_metadata": row[14]}
    return Memory(
        id=int(row[0]),
        uid=row[1],
        category=row[2],
        content=row[3],
        context=row[4],
        confidence=float(row[5]),
        importance=float(row[6]),
        status=row[7],
        source_conversation=row[8],
        source_sender=row[9],
        created_at=float(row[10]),
        updated_at=float(row[11]),
        last_accessed=None if row[12] is None else float(row[12]),
        access_count=int(row[13]),
        metadata=metadata if isinstance(metadata, dict) else {"value": metadata},
    )


def _placeholders(count: int) -> str:
    return ",".join("?" * count)


def fts_query(terms: Iterable[str]) -> str:
    """An FTS5 MATCH expression matching any of ``terms`` (quoted, OR-ed)."""
    quoted = ['"' + term.replace('"', '""') + '"' for term in terms if term]
    return " OR ".join(quoted)


class BaseMemoryStore:
    """The SQLite base memory of one agent. Open with :meth:`open`."""

    def __init__(self, db: aiosqlite.Connection, *, agent: str, label: str) -> None:
        self._db = db
        self._agent = agent
        self._label = label
        self._write_lock = asyncio.Lock()
        self._closed = False

    # -- lifecycle -------------------------------------------------------

    @classmethod
    async def open(
        cls,
        path: Path | None,
        *,
        agent: str,
        storage: StorageConfig,
        categories: Sequence[str] = (),
        backup_dir: Path | None = None,
        now: float = 0.0,
    ) -> BaseMemoryStore:
        """Open (creating or migrating) the base memory of ``agent``.

        Args:
            path: the database file, or ``None`` for an in-memory database.
            agent: the owner's normalised bare JID; a file owned by another agent
                is refused.
            storage: journal and durability settings.
            categories: category names recorded in the categories table.
            backup_dir: where a backup is written before a migration.
            now: the time recorded for newly created rows.

        Raises:
            StorageCorrupted: the file is not a readable database of this agent;
                it was moved aside.
            MigrationError: a schema migration failed; the backup was restored.
        """
        label = path.name if path is not None else f"in-memory database of {agent}"
        try:
            db = await aiosqlite.connect(
                ":memory:" if path is None else str(path), isolation_level=None
            )
        except sqlite3.Error as exc:
            raise StorageError(f"could not open {label}: {exc}") from exc
        store = cls(db, agent=agent, label=label)
        try:
            await store._configure(storage, in_memory=path is None)
            await migrate(db, backup_dir=backup_dir, label=path.stem if path else "memory")
            await store._claim(categories, now)
        except sqlite3.DatabaseError as exc:
            await db.close()
            if path is not None and path.exists():
                moved = quarantine(path, f"not a readable SQLite database: {exc}")
                for suffix in ("-wal", "-shm"):
                    side = path.with_name(path.name + suffix)
                    if side.exists():
                        with contextlib.suppress(OSError):
                            side.replace(moved.with_name(moved.name + suffix))
                raise StorageCorrupted(
                    f"{path} is not a readable memory database ({exc}); it was moved to "
                    f"{moved}. Restore it from backup/ or start with an empty memory "
                    "by leaving it there.",
                    path=path,
                    quarantined_to=moved,
                ) from exc
            raise StorageError(f"could not open {label}: {exc}") from exc
        except BaseException:
            await db.close()
            raise
        return store

    async def _configure(self, storage: StorageConfig, *, in_memory: bool) -> None:
        db = self._db
        if not in_memory:
            async with db.execute("PRAGMA journal_mode = WAL") as cursor:
                row = await cursor.fetchone()
            if row is None or str(row[0]).lower() != "wal":
                raise sqlite3.DatabaseError(f"could not enable WAL (got {row!r})")
        await db.execute(f"PRAGMA busy_timeout = {int(storage.busy_timeout_ms)}")
        await db.execute(f"PRAGMA synchronous = {storage.synchronous}")
        await db.execute("PRAGMA foreign_keys = ON")
        await db.execute("PRAGMA temp_store = MEMORY")
        # Touch the schema so a damaged file fails here, inside open().
        async with db.execute("SELECT count(*) FROM sqlite_master") as cursor:
            await cursor.fetchone()

    async def _claim(self, categories: Sequence[str], now: float) -> None:
        owner = await self.meta_get("agent")
        if owner is not None and owner != self._agent:
            raise sqlite3.DatabaseError(f"this database belongs to {owner!r}, not {self._agent!r}")
        async with self._transaction() as db:
            if owner is None:
                await db.execute(
                    "INSERT INTO meta (key, value) VALUES ('agent', ?)", (self._agent,)
                )
            await db.executemany(
                "INSERT OR IGNORE INTO categories (name, created_at) VALUES (?, ?)",
                [(name, now) for name in categories],
            )
            await db.execute("INSERT OR IGNORE INTO agent_stats (agent) VALUES (?)", (self._agent,))

    async def aclose(self) -> None:
        """Close the connection; idempotent. Later calls raise StoreClosedError."""
        if self._closed:
            return
        self._closed = True
        async with self._write_lock:
            await self._db.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def agent(self) -> str:
        return self._agent

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the base memory of {self._agent} is closed")

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        self._check_open()
        async with self._write_lock:
            self._check_open()
            try:
                await self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StorageError(f"{self._label}: could not start a write: {exc}") from exc
            try:
                yield self._db
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    await asyncio.shield(self._db.execute("ROLLBACK"))
                raise
            try:
                await self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    await asyncio.shield(self._db.execute("ROLLBACK"))
                raise StorageError(f"{self._label}: could not commit: {exc}") from exc

    async def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
        self._check_open()
        try:
            rows = await self._db.execute_fetchall(sql, params)
        except sqlite3.Error as exc:
            raise StorageError(f"{self._label}: query failed: {exc}") from exc
        return list(rows)

    # -- meta ------------------------------------------------------------

    async def meta_get(self, key: str) -> str | None:
        rows = await self._fetchall("SELECT value FROM meta WHERE key = ?", (key,))
        return None if not rows else str(rows[0][0])

    async def meta_set(self, key: str, value: str) -> None:
        async with self._transaction() as db:
            await db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    # -- writes ----------------------------------------------------------

    async def insert(self, new: NewMemory, text: IndexedText) -> Memory:
        """Insert one memory and its FTS row in one transaction."""
        return (await self.insert_many([(new, text)]))[0]

    async def insert_many(
        self, items: Sequence[tuple[NewMemory, IndexedText]]
    ) -> builtins.list[Memory]:
        """Insert memories and their FTS rows in one transaction."""
        if not items:
            return []
        ids: builtins.list[int] = []
        try:
            async with self._transaction() as db:
                for new, text in items:
                    cursor = await db.execute(
                        "INSERT INTO memories (uid, category, content, context, confidence, "
                        "importance, status, source_conversation, source_sender, created_at, "
                        "updated_at, last_accessed, access_count, metadata) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                            json.dumps(dict(new.metadata), ensure_ascii=False),
                        ),
                    )
                    memory_id = int(cursor.lastrowid or 0)
                    await cursor.close()
                    await db.execute(
                        "INSERT INTO memories_fts (rowid, content_tokens, context_tokens) "
                        "VALUES (?, ?, ?)",
                        (memory_id, text.content_tokens, text.context_tokens),
                    )
                    ids.append(memory_id)
                last = max(item[0].created_at for item in items)
                await db.execute(
                    "UPDATE agent_stats SET stores = stores + ?, last_store_at = ? WHERE agent = ?",
                    (len(items), last, self._agent),
                )
        except sqlite3.IntegrityError as exc:
            raise StorageError(f"{self._label}: insert refused: {exc}") from exc
        except sqlite3.Error as exc:
            raise StorageError(f"{self._label}: insert failed: {exc}") from exc
        found = await self.get_many(ids)
        return [found[i] for i in ids]

    async def update(
        self,
        memory_id: int,
        changes: Mapping[str, Any],
        *,
        text: IndexedText | None,
        now: float,
    ) -> Memory | None:
        """Change fields of a memory; re-index its text when ``text`` is given.

        A content change drops the stored vector, so it is embedded again.
        Returns the updated memory, or ``None`` when no such memory exists.
        """
        unknown = set(changes) - _UPDATABLE
        if unknown:
            raise ValueError(f"cannot update fields {sorted(unknown)}")
        values = dict(changes)
        if "metadata" in values:
            values["metadata"] = json.dumps(dict(values["metadata"]), ensure_ascii=False)
        assignments = ", ".join(f"{name} = ?" for name in values)
        params = [*values.values(), now, memory_id]
        try:
            async with self._transaction() as db:
                cursor = await db.execute(
                    f"UPDATE memories SET {assignments}{', ' if assignments else ''}"
                    "updated_at = ? WHERE id = ?",
                    params,
                )
                changed = cursor.rowcount
                await cursor.close()
                if not changed:
                    return None
                if text is not None:
                    await db.execute("DELETE FROM memories_fts WHERE rowid = ?", (memory_id,))
                    await db.execute(
                        "INSERT INTO memories_fts (rowid, content_tokens, context_tokens) "
                        "VALUES (?, ?, ?)",
                        (memory_id, text.content_tokens, text.context_tokens),
                    )
                if "content" in changes:
                    await db.execute("DELETE FROM embeddings WHERE memory_id = ?", (memory_id,))
                await db.execute(
                    "UPDATE agent_stats SET updates = updates + 1 WHERE agent = ?", (self._agent,)
                )
        except sqlite3.Error as exc:
            raise StorageError(f"{self._label}: update failed: {exc}") from exc
        return await self.get(memory_id)

    async def delete(self, memory_id: int) -> bool:
        """Delete a memory with its FTS row and vector. Returns False if absent."""
        try:
            async with self._transaction() as db:
                cursor = await db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
                removed = cursor.rowcount
                await cursor.close()
                if removed:
                    await db.execute("DELETE FROM memories_fts WHERE rowid = ?", (memory_id,))
                    await db.execute("DELETE FROM embeddings WHERE memory_id = ?", (memory_id,))
                    await db.execute(
                        "UPDATE agent_stats SET forgets = forgets + 1 WHERE agent = ?",
                        (self._agent,),
                    )
        except sqlite3.Error as exc:
            raise StorageError(f"{self._label}: delete failed: {exc}") from exc
        return bool(removed)

    async def touch(self, memory_ids: Iterable[int], when: float) -> None:
        """Record one access of each memory (coalesced by the caller)."""
        counts: dict[int, int] = {}
        for memory_id in memory_ids:
            counts[memory_id] = counts.get(memory_id, 0) + 1
        if not counts:
            return
        async with self._transaction() as db:
            await db.executemany(
                "UPDATE memories SET last_accessed = ?, access_count = access_count + ? "
                "WHERE id = ?",
                [(when, n, memory_id) for memory_id, n in counts.items()],
            )

    async def record_search(self, when: float) -> None:
        async with self._transaction() as db:
            await db.execute(
                "UPDATE agent_stats SET searches = searches + 1, last_search_at = ? "
                "WHERE agent = ?",
                (when, self._agent),
            )

    # -- reads -----------------------------------------------------------

    async def get(self, memory_id: int) -> Memory | None:
        rows = await self._fetchall(f"SELECT {_COLUMNS} FROM memories WHERE id = ?", (memory_id,))
        return _row_to_memory(rows[0]) if rows else None

    async def get_by_uid(self, uid: str) -> Memory | None:
        rows = await self._fetchall(f"SELECT {_COLUMNS} FROM memories WHERE uid = ?", (uid,))
        return _row_to_memory(rows[0]) if rows else None

    async def get_many(self, memory_ids: Iterable[int]) -> dict[int, Memory]:
        """Load many memories in as few queries as possible (chunks of 500)."""
        wanted = list(dict.fromkeys(int(i) for i in memory_ids))
        found: dict[int, Memory] = {}
        for start in range(0, len(wanted), _SQL_CHUNK):
            chunk = wanted[start : start + _SQL_CHUNK]
            rows = await self._fetchall(
                f"SELECT {_COLUMNS} FROM memories WHERE id IN ({_placeholders(len(chunk))})",
                chunk,
            )
            for row in rows:
                memory = _row_to_memory(row)
                found[memory.id] = memory
        return found

    @staticmethod
    def _filters(
        categories: Sequence[str] | None, statuses: Sequence[str] | None, alias: str = ""
    ) -> tuple[str, builtins.list[Any]]:
        clauses: builtins.list[str] = []
        params: builtins.list[Any] = []
        if statuses:
            clauses.append(f"{alias}status IN ({_placeholders(len(statuses))})")
            params.extend(statuses)
        if categories:
            clauses.append(f"{alias}category IN ({_placeholders(len(categories))})")
            params.extend(categories)
        return (" AND ".join(clauses) or "1"), params

    async def list(
        self,
        *,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
        limit: int = 20,
        offset: int = 0,
    ) -> builtins.list[Memory]:
        """Memories, newest first, filtered by category and status."""
        where, params = self._filters(categories, statuses)
        rows = await self._fetchall(
            f"SELECT {_COLUMNS} FROM memories WHERE {where} "
            "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
            [*params, int(limit), int(offset)],
        )
        return [_row_to_memory(row) for row in rows]

    async def iter_all(self, batch: int = 1000) -> AsyncIterator[Memory]:
        """Every memory of every status, oldest id first, in batches."""
        last = 0
        while True:
            rows = await self._fetchall(
                f"SELECT {_COLUMNS} FROM memories WHERE id > ? ORDER BY id LIMIT ?",
                (last, batch),
            )
            if not rows:
                return
            for row in rows:
                yield _row_to_memory(row)
            last = int(rows[-1][0])

    async def keyword_search(
        self,
        terms: Sequence[str],
        *,
        limit: int,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
    ) -> builtins.list[tuple[int, float]]:
        """BM25 over the FTS index: ``(memory id, score)`` best first, score > 0.

        Filters run inside the SQL, before the candidate cut.
        """
        match = fts_query(terms)
        if not match or limit <= 0:
            return []
        where, params = self._filters(categories, statuses, alias="m.")
        rows = await self._fetchall(
            f"SELECT f.rowid, bm25(memories_fts, {_BM25_WEIGHTS}) AS rank "
            "FROM memories_fts AS f JOIN memories AS m ON m.id = f.rowid "
            f"WHERE memories_fts MATCH ? AND {where} ORDER BY rank LIMIT ?",
            [match, *params, int(limit)],
        )
        return [(int(row[0]), -float(row[1])) for row in rows]

    async def filtered_ids(
        self,
        *,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
    ) -> np.ndarray:
        """Ids of the memories passing the filters (for filtered vector search)."""
        where, params = self._filters(categories, statuses)
        rows = await self._fetchall(f"SELECT id FROM memories WHERE {where}", params)
        return np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))

    async def count(
        self,
        *,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
    ) -> int:
        where, params = self._filters(categories, statuses)
        rows = await self._fetchall(f"SELECT count(*) FROM memories WHERE {where}", params)
        return int(rows[0][0])

    async def counts_by(self, column: str) -> dict[str, int]:
        if column not in ("category", "status"):
            raise ValueError(column)
        rows = await self._fetchall(f"SELECT {column}, count(*) FROM memories GROUP BY {column}")
        return {str(row[0]): int(row[1]) for row in rows}

    async def agent_stats(self) -> dict[str, Any]:
        rows = await self._fetchall(
            "SELECT stores, updates, forgets, searches, last_store_at, last_search_at "
            "FROM agent_stats WHERE agent = ?",
            (self._agent,),
        )
        keys = ("stores", "updates", "forgets", "searches", "last_store_at", "last_search_at")
        return dict(zip(keys, rows[0], strict=True)) if rows else dict.fromkeys(keys, 0)

    # -- embeddings --------------------------------------------------------

    async def pending_embeddings(
        self, fingerprint: str, limit: int, *, after_id: int = 0
    ) -> builtins.list[tuple[int, str, float]]:
        """Memories without a vector of ``fingerprint``: ``(id, content, updated_at)``.

        Ordered by id, starting after ``after_id`` (a cursor for one pass).
        """
        rows = await self._fetchall(
            "SELECT m.id, m.content, m.updated_at FROM memories AS m "
            "LEFT JOIN embeddings AS e ON e.memory_id = m.id AND e.fingerprint = ? "
            "WHERE e.memory_id IS NULL AND m.id > ? ORDER BY m.id LIMIT ?",
            (fingerprint, int(after_id), int(limit)),
        )
        return [(int(r[0]), str(r[1]), float(r[2])) for r in rows]

    async def count_pending_embeddings(self, fingerprint: str) -> int:
        rows = await self._fetchall(
            "SELECT count(*) FROM memories AS m "
            "LEFT JOIN embeddings AS e ON e.memory_id = m.id AND e.fingerprint = ? "
            "WHERE e.memory_id IS NULL",
            (fingerprint,),
        )
        return int(rows[0][0])

    async def put_embeddings(
        self,
        fingerprint: str,
        items: Sequence[tuple[int, float, np.ndarray]],
    ) -> tuple[builtins.list[int], int]:
        """Store vectors for ``(id, updated_at, vector)``; return the ids stored and last seq.

        A memory deleted or changed since it was read for embedding is skipped
        (its ``updated_at`` no longer matches), so a stale vector is never kept.
        """
        if not items:
            return [], await self.max_embedding_seq()
        stored: builtins.list[int] = []
        async with self._transaction() as db:
            rows = await db.execute_fetchall("SELECT value FROM meta WHERE key = 'embedding_seq'")
            seq = int(next(iter(rows))[0]) if rows else 0
            for memory_id, updated_at, vector in items:
                array = np.ascontiguousarray(vector, dtype=np.float32)
                if array.ndim != 1 or not np.all(np.isfinite(array)):
                    raise StorageError(f"refusing a malformed vector for memory {memory_id}")
                seq += 1
                cursor = await db.execute(
                    "INSERT INTO embeddings (memory_id, fingerprint, dim, vector, seq) "
                    "SELECT id, ?, ?, ?, ? FROM memories WHERE id = ? AND updated_at = ? "
                    "ON CONFLICT (memory_id) DO UPDATE SET fingerprint = excluded.fingerprint, "
                    "dim = excluded.dim, vector = excluded.vector, seq = excluded.seq",
                    (fingerprint, int(array.shape[0]), array.tobytes(), seq, memory_id, updated_at),
                )
                if cursor.rowcount:
                    stored.append(memory_id)
                await cursor.close()
            await db.execute(
                "INSERT INTO meta (key, value) VALUES ('embedding_seq', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(seq),),
            )
        return stored, seq

    async def load_vectors(
        self, fingerprint: str, dim: int, *, after_seq: int = 0
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Vectors of ``fingerprint`` with ``seq > after_seq``: ``(ids, matrix, max seq)``."""
        rows = await self._fetchall(
            "SELECT memory_id, vector, seq FROM embeddings "
            "WHERE fingerprint = ? AND dim = ? AND seq > ? ORDER BY seq",
            (fingerprint, int(dim), int(after_seq)),
        )
        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        matrix = np.zeros((len(rows), dim), dtype=np.float32)
        for index, row in enumerate(rows):
            matrix[index] = np.frombuffer(row[1], dtype=np.float32, count=dim)
        max_seq = int(rows[-1][2]) if rows else int(after_seq)
        return ids, matrix, max_seq

    async def vectors_for(
        self, fingerprint: str, dim: int, memory_ids: Iterable[int]
    ) -> dict[int, np.ndarray]:
        """The stored vectors of some memories (those that have one)."""
        wanted = list(dict.fromkeys(int(i) for i in memory_ids))
        found: dict[int, np.ndarray] = {}
        for start in range(0, len(wanted), _SQL_CHUNK):
            chunk = wanted[start : start + _SQL_CHUNK]
            rows = await self._fetchall(
                "SELECT memory_id, vector FROM embeddings WHERE fingerprint = ? AND dim = ? "
                f"AND memory_id IN ({_placeholders(len(chunk))})",
                [fingerprint, int(dim), *chunk],
            )
            for row in rows:
                found[int(row[0])] = np.frombuffer(row[1], dtype=np.float32, count=dim)
        return found

    async def embedding_ids(self, fingerprint: str) -> np.ndarray:
        rows = await self._fetchall(
            "SELECT memory_id FROM embeddings WHERE fingerprint = ?", (fingerprint,)
        )
        return np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))

    async def max_embedding_seq(self) -> int:
        value = await self.meta_get("embedding_seq")
        return int(value) if value else 0

    # -- health ------------------------------------------------------------

    async def integrity_check(self) -> builtins.list[str]:
        """``PRAGMA integrity_check`` messages (``["ok"]`` when healthy)."""
        rows = await self._fetchall("PRAGMA integrity_check")
        return [str(row[0]) for row in rows]

    async def backup_to(self, target: Path) -> Path:
        """Copy the live database to ``target`` with SQLite's backup API."""
        self._check_open()
        async with self._write_lock:
            return await backup_database(self._db, target)
