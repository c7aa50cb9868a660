"""The base memory: one agent's long-term memories in SQLite, through aiosqlite.

One long-lived connection per agent (so ``:memory:`` works and nothing is
re-opened per call), WAL journal, a busy timeout, ``synchronous`` as configured.
Every write is one ``BEGIN IMMEDIATE`` transaction begun by the store's writer
(``writer``: one asyncio lock, one write path); a write is acknowledged once its
transaction commits. SQLite is the single source of truth: rows, FTS rows and
embedding vectors all live here.

:class:`BaseMemoryStore` owns the connection and its writer; its queries live
beside it: the row layout in ``memory_rows``, the write statements in
``memory_writes``, reads in ``memory_reads``, vectors in ``embeddings``, reads of
a file not opened in ``file_peek`` and the checks made while opening in
``database_open``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import numpy as np

from ..config import StorageConfig
from ..errors import StorageCorrupted, StorageError, StoreClosedError
from ..models import Memory, Viewer
from ..text.graph import MemoryGraph
from . import (
    checksums,
    database_open,
    derivation,
    embeddings,
    file_peek,
    memory_reads,
    memory_writes,
    on_thread,
    structure,
)
from .backup_sequence import take_sequence
from .damage import DamageGuard
from .derivation import Deferred
from .files import create_private
from .given_graph import Given, read_given
from .graph import settle_all_claims
from .group_commit import GroupCommit
from .keyword_plan import KeywordPlanner
from .memory_rows import IndexedText, NewMemory
from .migrations import backup_database, create_database, migrate
from .open_marker import OpenMarker, open_anywhere
from .schema import CLAIMS_KEY
from .scope_filter import memories_joined
from .sql import status_category_filter
from .wal import check_wal
from .writer import WriteFailed, WriteOutcome, Writer

__all__ = ["BaseMemoryStore", "IndexedText", "NewMemory"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_BM25_WEIGHTS = "1.0, 0.3"  # content tokens, context tokens
_SHARE_SECONDS = 30.0  # how long a viewer's visible share is taken as known
_SHARE_VIEWERS = 256

# Database files open in this process (resolved paths), so a restore can refuse them.
_OPEN_PATHS: dict[Path, int] = {}


class BaseMemoryStore:
    """The SQLite base memory of one agent. Open with :meth:`open`."""

    def __init__(
        self, db: aiosqlite.Connection, *, agent: str, label: str, path: Path | None = None
    ) -> None:
        self._db = db
        self._data_version: int | None = None  # see written_elsewhere
        self._agent = agent
        self._label = label
        self._closed = False
        # Damage SQLite reports only when a statement meets it: the file is moved
        # aside as at open, and the store refuses every later call.
        self._damage = DamageGuard(path, label=label, close=self._close_damaged)
        # The one write path: every transaction of this store is begun by its writer.
        self._writer = Writer(db, label=label, check_open=self._check_open, guard=self._damage)
        self._write_lock = self._writer.lock
        self._path: Path | None = None
        self._marker: OpenMarker | None = None
        self._created = False
        # Group commit: single inserts waiting for the next transaction.
        self._group = GroupCommit(self.insert_many, self.get_by_uid)
        self._shares: dict[Viewer, tuple[float, float]] = {}  # viewer -> (when, share)
        self._keyword = KeywordPlanner(
            self._fetchall, bm25_weights=_BM25_WEIGHTS, changes=lambda: db.total_changes
        )

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
        expect_existing: bool = False,
        initial_meta: Mapping[str, str] | None = None,
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
            expect_existing: this agent's memory existed before (the root keeps
                traces of it: registry entry, notes, backups, quarantined files),
                so a database holding no schema was emptied or lost: it is refused
                as damaged instead of starting an empty memory.
            initial_meta: ``meta`` rows written only if this call creates the
                database (facts true of an empty memory, such as a format version).

        Raises:
            StorageCorrupted: the file (or its write-ahead log) is not a readable
                database of this agent; it was moved aside.
            MigrationError: a schema migration failed; the backup was restored.
        """
        label = path.name if path is not None else f"in-memory database of {agent}"
        marker: OpenMarker | None = None
        if path is not None:
            # Seen by other processes from the start, before any file work (a
            # migration, a check): a restore refuses a memory being opened too.
            marker = await asyncio.to_thread(OpenMarker.hold, path)
        try:
            store = await cls._open(
                path, agent, label, storage, categories, backup_dir, now, expect_existing,
                initial_meta,
            )  # fmt: skip
        except BaseException:
            if marker is not None:
                marker.release()
            raise
        if path is not None:
            store._marker = marker
            store._path = path.resolve()
            _OPEN_PATHS[store._path] = _OPEN_PATHS.get(store._path, 0) + 1
        return store

    @classmethod
    async def _open(
        cls,
        path: Path | None,
        agent: str,
        label: str,
        storage: StorageConfig,
        categories: Sequence[str],
        backup_dir: Path | None,
        now: float,
        expect_existing: bool,
        initial_meta: Mapping[str, str] | None,
    ) -> BaseMemoryStore:
        """:meth:`open` once its marker is held."""
        if path is not None:
            try:
                await asyncio.to_thread(check_wal, path)
            except OSError as exc:
                raise StorageError(
                    f"could not check the write-ahead log of {label}: {exc}"
                ) from exc
        created = False
        if path is not None and not expect_existing:
            # A new agent: the whole database (schema, owner, categories) in one
            # private file, synced once, instead of a migration and a claim in WAL.
            created = await asyncio.to_thread(
                create_database,
                path,
                rows=database_open.first_rows(agent, categories, now, initial_meta or {}),
            )
        try:
            if path is not None:
                create_private(path)  # when SQLite would create it, owner-only
            # Many statements in one hop (on_thread.py).
            db = await on_thread.connect(
                ":memory:" if path is None else str(path), isolation_level=None
            )
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"could not open {label}: {exc}") from exc
        store = cls(db, agent=agent, label=label, path=path)
        store._created = created
        try:
            await database_open.configure_connection(
                db,
                storage,
                in_memory=path is None,
                expect_existing=expect_existing,
                check=storage.quick_check_on_open and not created,
            )
            await checksums.install(db)
            if not created:
                await migrate(db, backup_dir=backup_dir, label=path.stem if path else "memory")
                await database_open.claim_database(
                    store.meta_get, store._transaction, agent, categories, now, initial_meta or {}
                )
            await checksums.create_triggers(db)
            if not created and path is not None:
                await store._verify_checksums(storage.verify_all_checksums_below)
        except sqlite3.DatabaseError as exc:
            await db.close()
            if path is not None and path.exists() and database_open.is_damage(exc):
                raise database_open.quarantine_damaged(path, exc) from exc
            raise StorageError(f"could not open {label}: {exc}") from exc
        except BaseException:
            await db.close()
            raise
        return store

    async def _verify_checksums(self, whole_below: int) -> None:
        """Compare the rows' checksums with what the rows hold (see ``checksums``).

        A memory deleted behind the store's back (a hand-made ``DELETE``) is
        logged and its checksum cleared; the consistency check clears the rest.

        Raises:
            Unusable: a row was altered, or appeared without its checksum, behind
                SQLite's back.
        """
        before = await checksums.verified_seq(self._fetchall)
        found = await checksums.verify(self._fetchall, whole_below=whole_below)
        if found.damaged:
            raise database_open.Unusable(
                f"its rows do not match the checksums written with them: {found.describe()}"
            )
        if found.lost:
            logger.warning(
                "%s: %d memories were deleted behind its back (ids %s); the consistency "
                "check clears what they left",
                self._label,
                len(found.lost),
                ", ".join(str(i) for i in found.lost[:20]),
            )
        if found.last_seq > before or found.lost:
            async with self._transaction() as db:
                await checksums.forget_lost(db, found.lost)
                await checksums.set_verified(db, found.last_seq)

    async def checksum_mismatches(self) -> checksums.Mismatch:
        """Every memory's checksum compared with its row (for the deep check)."""
        return await checksums.mismatches(self._fetchall)

    async def aclose(self) -> None:
        """Close the connection; idempotent. Later calls raise StoreClosedError.

        The connection is closed after the work queued on it, also when this call
        is cancelled meanwhile (the end of the event loop cancels a close under
        way) and when damage found in use closed it first: no connection is left
        open, nor work queued on one, once it returns.
        """
        if self._closed:
            # Closed at once when damage was found: done once that close is.
            await self._damage.settled()
            self._release_marker()
            return
        try:
            # Inserts of a cancelled caller's group finish first (group_commit.py).
            await self._group.wait_settled()
        finally:
            if not self._closed:
                self._closed = True
                self._forget_path()
                try:
                    await self._close_connection()
                finally:
                    self._release_marker()

    async def _close_connection(self) -> None:
        """Close the connection once the write under way (if any) is done."""
        try:
            async with self._write_lock:
                await self._db.close()
        except asyncio.CancelledError:
            # Cancelled while a write held the lock: aiosqlite closes the connection
            # after the statements queued on it, and the write's later statements fail.
            await self._db.close()
            raise

    def _release_marker(self) -> None:
        if self._marker is not None:
            self._marker.release()

    @staticmethod
    def is_open(path: Path) -> bool:
        """Whether a store of this process has the database file ``path`` open."""
        return path.resolve() in _OPEN_PATHS

    @staticmethod
    def open_in_any_process(path: Path) -> bool:
        """Whether a store of any process (this one included) has the database file
        ``path`` open; read from the markers open stores hold (``open_marker``).

        Raises:
            StorageError: the markers could not be read.
        """
        return open_anywhere(path.resolve())

    @staticmethod
    def count_in_file(path: Path) -> int | None:
        """How many memories the database file ``path`` holds, read without opening
        it as a memory; ``None`` when it cannot be read."""
        return file_peek.count_memories(path)

    @staticmethod
    def fingerprint_in_file(path: Path) -> str | None:
        """The embedder fingerprint of most vectors in the database file ``path``, read
        without opening it as a memory; ``None`` when it has none or cannot be read."""
        return file_peek.main_fingerprint(path)

    @property
    def path(self) -> Path | None:
        """The database file, or ``None`` for an in-memory database."""
        return self._path

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def created(self) -> bool:
        """Whether :meth:`open` created this database file (it holds no memory yet)."""
        return self._created

    @property
    def agent(self) -> str:
        return self._agent

    async def _close_damaged(self) -> None:
        """Close the connection of a database found damaged (before it is moved aside)."""
        if self._closed:
            return
        self._closed = True
        self._forget_path()
        await self._db.close()

    def _forget_path(self) -> None:
        if self._path is not None and self._path in _OPEN_PATHS:
            _OPEN_PATHS[self._path] -= 1
            if not _OPEN_PATHS[self._path]:
                del _OPEN_PATHS[self._path]

    @property
    def damage(self) -> StorageCorrupted | None:
        """The error this store raises since damage of its file was found, if any."""
        return self._damage.error

    def _check_open(self) -> None:
        self._damage.check()
        if self._closed:
            raise StoreClosedError(f"the base memory of {self._agent} is closed")

    def _transaction(self) -> contextlib.AbstractAsyncContextManager[aiosqlite.Connection]:
        return self._writer.transaction()

    async def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
        self._check_open()
        try:
            rows = await self._db.execute_fetchall(sql, params)
        except sqlite3.Error as exc:
            damaged = await self._damage.seen(exc)
            if damaged is not None:
                raise damaged from exc
            raise StorageError(f"{self._label}: query failed: {exc}") from exc
        return list(rows)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
        """Run one read query on this store's connection (for the graph and atom tables).

        Raises:
            StorageError: the query failed.
            StoreClosedError: the store is closed.
        """
        return await self._fetchall(sql, params)

    async def run_write(
        self,
        work: Callable[[sqlite3.Connection], T],
        what: str,
        *,
        durable: bool = True,
        outcome: WriteOutcome | None = None,
    ) -> T:
        """Run ``work`` as one whole write transaction on the connection's thread
        (:meth:`Writer.run <spade_memory.storage.writer.Writer.run>`, with its
        ``durable`` and ``outcome``); ``what`` names it in errors.

        Raises:
            StorageError: the transaction failed; nothing of it was written.
        """
        try:
            return await self._writer.run(work, durable=durable, outcome=outcome)
        except WriteFailed as exc:
            cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
            raise StorageError(f"{self._label}: {what}: {exc.what}{cause}") from exc
        except sqlite3.Error as exc:
            raise StorageError(f"{self._label}: {what} failed: {exc}") from exc

    async def run_read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work``, reads only, in one hop on the connection's thread (one
        consistent view: no write of this store runs in between).

        Raises:
            StorageError: a query failed.
        """
        self._check_open()
        try:
            return await on_thread.run_on_connection(self._db, work)
        except sqlite3.Error as exc:
            damaged = await self._damage.seen(exc)
            if damaged is not None:
                raise damaged from exc
            raise StorageError(f"{self._label}: query failed: {exc}") from exc

    def transaction(self) -> contextlib.AbstractAsyncContextManager[aiosqlite.Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``) behind the write lock."""
        return self._transaction()

    def exclusive(self) -> contextlib.AbstractAsyncContextManager[aiosqlite.Connection]:
        """The connection behind the write lock, with no transaction begun.

        For what SQLite refuses inside a transaction (``ATTACH``, ``DETACH``): the
        caller begins and ends its own transactions and must leave none open.
        """
        return self._writer.exclusive()

    # -- meta ------------------------------------------------------------

    async def meta_get(self, key: str) -> str | None:
        rows = await self._fetchall("SELECT value FROM meta WHERE key = ?", (key,))
        return None if not rows else str(rows[0][0])

    async def settle_claims_if_asked(self) -> bool:
        """Settle every functional claim in its scope, once, when a migration asked
        for it (:data:`~spade_memory.storage.schema.CLAIMS_KEY`); whether it did."""
        if await self.meta_get(CLAIMS_KEY) is None:
            return False

        def work(db: sqlite3.Connection) -> None:
            settle_all_claims(db)
            db.execute("DELETE FROM meta WHERE key = ?", (CLAIMS_KEY,))

        await self.run_write(work, "settling claims")
        return True

    async def meta_delete(self, key: str) -> None:
        async with self._transaction() as db:
            await db.execute("DELETE FROM meta WHERE key = ?", (key,))

    async def meta_swap(self, key: str, expected: str | None, value: str) -> bool:
        """Set ``key`` to ``value`` only if it still holds ``expected`` (``None``: it is
        unset); whether it did. One write transaction, so of two opens of this memory
        (in this process or another) swapping from the same value, one wins."""
        async with self._transaction() as db:
            cursor = await db.execute("SELECT value FROM meta WHERE key = ?", (key,))
            row = await cursor.fetchone()
            if (None if row is None else str(row[0])) != expected:
                return False
            await db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
        return True

    async def meta_set(self, key: str, value: str) -> None:
        async with self._transaction() as db:
            await db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    # -- writes ----------------------------------------------------------

    async def insert(
        self,
        new: NewMemory,
        text: IndexedText,
        *,
        graph: MemoryGraph | Deferred | None = None,
    ) -> Memory:
        """Insert one memory, its FTS row and its graph; returns once committed.

        Inserts that arrive while a transaction is running are committed together
        in the next one (group commit: one disk sync for all of them). Should that
        shared transaction fail, each of its inserts is retried alone, so one bad
        insert fails only its own call.
        """
        self._check_open()
        return await self._group.insert(new, text, graph)

    async def insert_many(
        self,
        items: Sequence[tuple[NewMemory, IndexedText]],
        *,
        graphs: Sequence[MemoryGraph | Deferred | None] | None = None,
        graph_time: float | None = None,
    ) -> builtins.list[Memory]:
        """Insert memories, their FTS rows and their graphs in one transaction.

        ``graphs``, when given, holds one graph (or ``None``) per item; its atoms
        start their lives at ``graph_time`` (default: each memory's ``created_at``).
        """
        if not items:
            return []
        if graphs is not None and len(graphs) != len(items):
            raise ValueError("graphs must hold one entry per item")
        write = memory_writes.InsertTransaction.of(items, self._agent, graphs, graph_time)
        ids = await memory_writes.run_insert(self._writer, self._label, write)
        return write.memories(ids)

    async def update(
        self,
        memory_id: int,
        changes: Mapping[str, Any],
        *,
        text: IndexedText | None,
        now: float,
        graph: MemoryGraph | None = None,
        read: Memory | None = None,
    ) -> Memory | None:
        """Change fields of a memory; re-index its text when ``text`` is given.

        A content change drops the stored vector, so it is embedded again. A
        ``graph`` replaces the memory's graph in the same transaction.
        Returns the updated memory, or ``None`` when no such memory exists.

        Raises:
            StaleRead: ``read`` (the memory ``text`` and ``graph`` were made from,
                and the change allowed on) no longer has the memory's content,
                context, category, owner or visibility; nothing was written.
        """
        changed = await memory_writes.update_memory(
            self._transaction,
            self._agent,
            self._label,
            memory_id,
            changes,
            text=text,
            now=now,
            graph=graph,
            read=None
            if read is None
            else (
                read.content,
                read.context,
                read.category,
                read.scope.owner,
                read.scope.visibility,
            ),
        )
        return await self.get(memory_id) if changed else None

    async def delete(self, memory_id: int) -> bool:
        """Delete a memory with its FTS row, vector and graph. Returns False if absent."""
        return await memory_writes.delete_memory(
            self._transaction, self._agent, self._label, memory_id
        )

    async def touch(
        self,
        memory_ids: Iterable[int],
        when: float,
        *,
        searches: int = 0,
        last_search_at: float | None = None,
        outcome: WriteOutcome | None = None,
    ) -> None:
        """Record one access of each memory, and ``searches`` searches (the last at
        ``last_search_at``) in the agent's stats, in one transaction (coalesced by
        the caller); ``outcome`` learns whether it was written, also when the caller
        is cancelled while it runs.

        Raises:
            StorageError: it could not be written.
        """
        work = memory_writes.touch_work(
            memory_ids, when, agent=self._agent, searches=searches, last_search_at=last_search_at
        )
        if work is None:
            if outcome is not None:
                outcome.committed = True
            return
        await self.run_write(work, "recording accesses", outcome=outcome)

    # -- reads -----------------------------------------------------------

    async def get(self, memory_id: int, *, viewer: Viewer | None = None) -> Memory | None:
        """The memory ``memory_id``; ``None`` when absent or ``viewer`` does not see it."""
        return await memory_reads.get_memory(self._fetchall, memory_id, viewer)

    async def get_by_uid(self, uid: str) -> Memory | None:
        return await memory_reads.get_by_uid(self._fetchall, uid)

    async def holder_of_uid(self, uid: str) -> Memory | None:
        """The memory of ``uid``, or the one it stands for now (an imported copy that
        reinforced it, a memory merged into it); ``None`` if neither."""
        return await memory_reads.holder_of_uid(self._fetchall, uid)

    async def given(self, memory_ids: Iterable[int]) -> dict[int, Given]:
        """The entities and relations named for these memories when they were stored
        (those named nothing left out); their graphs are extracted with them."""
        return await read_given(self._fetchall, memory_ids)

    async def get_many(self, memory_ids: Iterable[int]) -> dict[int, Memory]:
        """Load many memories in as few queries as possible (chunks of 500)."""
        return await memory_reads.get_many(self._fetchall, memory_ids)

    async def get_many_indexed(
        self, memory_ids: Iterable[int], *, neighbours: bool = False
    ) -> dict[int, tuple[Memory, str | None, int | None]]:
        """Like :meth:`get_many`, each memory with its indexed content tokens (joined by
        spaces, as the keyword index holds them; ``None`` when it has no index row)
        and the id of its previous turn (``None`` outside a conversation or for a
        conversation's first memory).

        With ``neighbours``, also the turns right before and after each of them in
        the same conversation (its previous turn and the memory whose previous turn
        it is), in the same query. One query per 500 ids: the search's second stage,
        its neighbour shares and its final pool read from it.
        """
        return await memory_reads.get_many_indexed(
            self._fetchall, memory_ids, neighbours=neighbours
        )

    async def list(
        self,
        *,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
        limit: int = 20,
        offset: int = 0,
        viewer: Viewer | None = None,
        created_from: float | None = None,
        created_to: float | None = None,
    ) -> builtins.list[Memory]:
        """Memories, newest first, filtered by category, status, viewer and when they
        were stored (``created_from <= created_at < created_to``)."""
        return await memory_reads.list_memories(
            self._fetchall,
            categories=categories,
            statuses=statuses,
            limit=limit,
            offset=offset,
            viewer=viewer,
            created_from=created_from,
            created_to=created_to,
        )

    async def recent_ids(self, limit: int) -> builtins.list[int]:
        """Ids of at most ``limit`` active memories, most recently accessed (or stored) first."""
        return await memory_reads.recent_ids(self._fetchall, limit)

    async def created_range(self) -> tuple[float | None, float | None]:
        """When the oldest and the newest memory were stored (``None`` when there is none)."""
        return await memory_reads.created_range(self._fetchall)

    async def indexed_tokens_and_endings(
        self, memory_ids: Iterable[int]
    ) -> dict[int, tuple[str, str]]:
        """Each memory's indexed content tokens (joined by spaces) and the last
        character of its content, trailing space trimmed; memories with no keyword
        index row are left out. Chunks of 500 ids."""
        return await memory_reads.indexed_tokens_and_endings(self._fetchall, memory_ids)

    async def iter_all(self, batch: int = 1000) -> AsyncIterator[Memory]:
        """Every memory of every status, oldest id first, in batches."""
        async for memory in memory_reads.iter_all(self._fetchall, batch):
            yield memory

    async def document_frequencies(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """How many memories hold each index term, and the memory's size (largest id);
        cached by the keyword planner. ``({}, 0)`` when unavailable."""
        self._check_open()
        return await self._keyword.document_frequencies(terms)

    async def held_terms(self, terms: Sequence[str]) -> dict[str, int]:
        """The document frequency of each of ``terms`` some memory holds (the others
        left out); read afresh, not cached (for the many respellings of a typo)."""
        self._check_open()
        return await self._keyword.held_terms(terms)

    async def keyword_search(
        self,
        terms: Sequence[str],
        *,
        limit: int,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
        viewer: Viewer | None = None,
    ) -> builtins.list[tuple[int, float]]:
        """BM25 over the FTS index: ``(memory id, score)`` best first, score > 0.

        Filters (``viewer``: only what it sees) run inside the SQL, before the
        candidate cut.
        """
        where, params = status_category_filter(categories, statuses, alias="m.", viewer=viewer)
        share = 1.0 if viewer is None else await self._visible_share(viewer)
        # The planner runs one exact OR query, or on large memories narrows from
        # the rarest terms so the work does not grow with the commonest term.
        return await self._keyword.search(
            terms,
            where=where,
            params=params,
            limit=limit,
            share=share,
            joined=memories_joined(viewer),
        )

    async def _visible_share(self, viewer: Viewer) -> float:
        """About which part of the active memories ``viewer`` sees (a hint for how
        many keyword rows to fetch; read again after ``_SHARE_SECONDS``)."""
        now = time.monotonic()
        known = self._shares.get(viewer)
        if known is not None and now - known[0] < _SHARE_SECONDS:
            return known[1]
        seen, total = await asyncio.gather(self.count(viewer=viewer), self.count())
        share = seen / total if total else 1.0
        if len(self._shares) >= _SHARE_VIEWERS:
            self._shares.clear()
        self._shares[viewer] = (now, share)
        return share

    async def filtered_ids(
        self,
        *,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
        viewer: Viewer | None = None,
    ) -> np.ndarray:
        """Ids of the memories passing the filters (for filtered vector search)."""
        return await memory_reads.filtered_ids(
            self._fetchall, categories=categories, statuses=statuses, viewer=viewer
        )

    async def count(
        self,
        *,
        categories: Sequence[str] | None = None,
        statuses: Sequence[str] | None = ("active",),
        viewer: Viewer | None = None,
    ) -> int:
        return await memory_reads.count_memories(
            self._fetchall, categories=categories, statuses=statuses, viewer=viewer
        )

    async def has_memories(self) -> bool:
        """Whether it holds any memory at all (of any status)."""
        return await memory_reads.has_memories(self._fetchall)

    async def has_messages(self) -> bool:
        """Whether it keeps any conversation message."""
        return bool(await self._fetchall("SELECT 1 FROM conversation_messages LIMIT 1"))

    async def all_global(self) -> bool:
        """Whether every memory is global (a viewer of every category sees them all)."""
        return await memory_reads.all_global(self._fetchall)

    async def counts_by(self, column: str) -> dict[str, int]:
        return await memory_reads.counts_by(self._fetchall, column)

    async def agent_stats(self) -> dict[str, Any]:
        return await memory_reads.agent_stats(self._fetchall, self._agent)

    # -- derivation --------------------------------------------------------

    async def pending_derivations(
        self, limit: int, *, after_id: int = 0
    ) -> builtins.list[derivation.PendingMemory]:
        """Memories whose graph is still to be derived, oldest first, past ``after_id``."""
        return await derivation.read_pending(self._fetchall, limit, after_id=after_id)

    async def count_pending_derivations(self) -> int:
        """How many memories wait for their graph."""
        return await derivation.count_pending(self._fetchall)

    async def write_derived(
        self, items: Sequence[tuple[int, MemoryGraph, float]]
    ) -> builtins.list[int]:
        """Write derived graphs and clear their marks in one transaction; the ids written.

        Its commit is not synced: a power cut that undoes it undoes the clearing of
        the marks too, and the memories are derived again on the next open.
        """
        self._check_open()
        return await self.run_write(
            partial(derivation.write_derived, items), "derivation", durable=False
        )

    # -- embeddings --------------------------------------------------------

    async def pending_embeddings(
        self, fingerprint: str, limit: int, *, after_id: int = 0
    ) -> builtins.list[embeddings.PendingVector]:
        """Memories without a vector of ``fingerprint``, each with the text to embed
        (:func:`~spade_memory.storage.embeddings.vector_text`).

        Ordered by id, starting after ``after_id`` (a cursor for one pass).
        """
        return await embeddings.pending_embeddings(self._fetchall, fingerprint, limit, after_id)

    async def vector_texts(self, memory_ids: Sequence[int]) -> dict[int, str]:
        """The text each of these memories' vector is made of (those that exist)."""
        return await embeddings.vector_texts(self._fetchall, memory_ids)

    async def count_pending_embeddings(self, fingerprint: str) -> int:
        return await embeddings.count_pending_embeddings(self._fetchall, fingerprint)

    async def put_embeddings(
        self,
        fingerprint: str,
        dim: int,
        items: Sequence[tuple[embeddings.PendingVector, np.ndarray]],
    ) -> tuple[builtins.list[int], int]:
        """Store vectors of ``fingerprint``, each of ``dim`` values and made of its
        :class:`~spade_memory.storage.embeddings.PendingVector`; return the ids
        stored and the last seq.

        A memory deleted or changed since it was read for embedding (its text, its
        ``updated_at`` or the turn before it, read again in the write transaction)
        is skipped, so a stale vector is never kept.

        Raises:
            StorageError: a vector is not ``dim`` finite values; nothing was stored.
        """
        return await embeddings.put_embeddings(
            self._transaction, self.max_embedding_seq, fingerprint, dim, items
        )

    async def written_elsewhere(self) -> bool:
        """Whether another connection (another process) committed to the database
        since this was last asked (``PRAGMA data_version``); ``True`` the first time."""
        version = await self.data_version()
        changed, self._data_version = version != self._data_version, version
        return changed

    async def data_version(self) -> int:
        """A number that changes whenever another connection (another process)
        commits to the database (``PRAGMA data_version``)."""
        rows = await self._fetchall("PRAGMA data_version", ())
        return int(rows[0][0])

    async def load_vectors(
        self, fingerprint: str, dim: int, *, after_seq: int = 0
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Vectors of ``fingerprint`` with ``seq > after_seq``: ``(ids, matrix, max seq)``."""
        return await embeddings.load_vectors(self._fetchall, fingerprint, dim, after_seq)

    async def vectors_for(
        self, fingerprint: str, dim: int, memory_ids: Iterable[int]
    ) -> dict[int, np.ndarray]:
        """The stored vectors of some memories (those that have one)."""
        return await embeddings.vectors_for(self._fetchall, fingerprint, dim, memory_ids)

    async def name_embedder(self, fingerprint: str) -> bool:
        """Record ``fingerprint`` as the memory's embedder while it holds no vector
        (read back by ``file_peek.main_fingerprint``); whether it was written."""
        return await embeddings.name_embedder(self._fetchall, self._transaction, fingerprint)

    async def vector_counts(self) -> dict[str, int]:
        """How many vectors are stored of each embedder fingerprint."""
        return await embeddings.counts_by_fingerprint(self._fetchall)

    async def count_embedded(self, fingerprint: str) -> int:
        return await embeddings.count_embedded(self._fetchall, fingerprint)

    async def embedding_ids(self, fingerprint: str) -> np.ndarray:
        return await embeddings.embedding_ids(self._fetchall, fingerprint)

    async def max_embedding_seq(self) -> int:
        value = await self.meta_get("embedding_seq")
        return int(value) if value else 0

    # -- health ------------------------------------------------------------

    async def integrity_check(self) -> builtins.list[str]:
        """``PRAGMA integrity_check`` messages (``["ok"]`` when healthy)."""
        rows = await self._fetchall("PRAGMA integrity_check")
        return [str(row[0]) for row in rows]

    async def structure_problems(self) -> builtins.list[str]:
        """What ``PRAGMA integrity_check`` and the full-text indexes' own checks
        report (empty when sound). Not behind the write lock, as any read: the
        whole database is read, and writes need not wait for it."""
        self._check_open()
        return await on_thread.run_on_connection(self._db, structure.structure_problems)

    async def rebuild_indexes(self) -> builtins.list[str]:
        """Build every index and full-text index again (``REINDEX``, full-text
        ``rebuild``); the problems :meth:`structure_problems` finds afterwards."""
        return await self._writer.run(structure.rebuild_indexes)

    async def backup_to(self, target: Path) -> Path:
        """Copy the live database to ``target`` with SQLite's backup API."""
        self._check_open()
        async with self._write_lock:
            return await backup_database(self._db, target)

    async def backup_numbered(self, target: Callable[[int], Path], *, after: int) -> Path:
        """Take the database's next backup number and copy the live database to
        ``target(number)`` with SQLite's backup API; returns the copy's path.

        The number is above ``after`` (the largest among the backups already
        there) and above every number the database gave before
        (:mod:`~spade_memory.storage.backup_sequence`); the copy holds the
        counter that gave it. No write of this process comes between the two.

        Raises:
            StorageError: the number could not be taken or the copy failed.
        """
        self._check_open()
        async with self._writer.exclusive() as db:
            try:
                sequence = await on_thread.run_on_connection(
                    db, partial(take_sequence, after=after)
                )
            except sqlite3.Error as exc:
                raise StorageError(f"{self._label}: could not number a backup: {exc}") from exc
            return await backup_database(db, target(sequence))
