"""The one write path of the base memory: its write lock and its transactions.

Every write of the base memory is a ``BEGIN IMMEDIATE`` transaction begun here,
behind the store's write lock, in one of two forms:

- :meth:`Writer.transaction`: statement by statement from async code (each
  statement one hop to the connection's thread), rolled back if the block raises;
- :meth:`Writer.run`: the whole transaction (``BEGIN IMMEDIATE``, the work,
  ``COMMIT``) in one hop (:mod:`spade_memory.storage.on_thread`), for writes of
  many small statements such as an insert with its graph.

:meth:`Writer.exclusive` hands over the connection behind the lock with no
transaction begun, for what SQLite refuses inside one (``ATTACH``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from typing import Generic, TypeVar

import aiosqlite

from ..errors import StorageError
from .damage import DamageGuard
from .on_thread import run_on_connection

__all__ = ["WriteFailed", "WriteOutcome", "Writer"]

T = TypeVar("T")


class WriteFailed(sqlite3.Error):
    """A write transaction could not begin or commit (``what`` says which)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class WriteOutcome:
    """Whether a write run by :meth:`Writer.run` was committed, known even when its
    caller was cancelled while it ran: ``None`` until the run ends, ``True`` when it
    committed or had begun to commit when its caller was cancelled, else ``False``."""

    __slots__ = ("committed",)

    def __init__(self) -> None:
        self.committed: bool | None = None


class _Whole(Generic[T]):
    """One transaction run whole on the connection's thread.

    ``abandoned`` is set by the waiting caller when it is cancelled: a transaction
    not yet committing then rolls back instead, so nothing its caller gave up on is
    written (as when each statement was a hop of its own).
    """

    def __init__(self, work: Callable[[sqlite3.Connection], T], *, durable: bool = True) -> None:
        self.work = work
        self.durable = durable
        self.abandoned = False
        self.committing = False
        self._gate = threading.Lock()  # between the caller's abandon and the COMMIT

    def abandon(self) -> bool:
        """Roll back unless committing already (set by the cancelled caller); whether
        it was: the transaction is then written unless its COMMIT fails."""
        with self._gate:
            self.abandoned = True
            return self.committing

    def __call__(self, db: sqlite3.Connection) -> T:
        if self.abandoned:
            raise WriteFailed("the write was cancelled before it began")
        if self.durable:
            return self._run(db)
        # Not synced at its commit (WAL, synchronous NORMAL): the next synced commit
        # or checkpoint takes its frames to the disk with it. A power cut before
        # that loses it whole, never half, and nothing later survives without it.
        setting = db.execute("PRAGMA synchronous").fetchone()[0]
        if int(setting) < 2:  # already OFF or NORMAL
            return self._run(db)
        db.execute("PRAGMA synchronous = NORMAL")
        try:
            return self._run(db)
        finally:
            db.execute(f"PRAGMA synchronous = {int(setting)}")

    def _run(self, db: sqlite3.Connection) -> T:
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise WriteFailed("could not start a write") from exc
        try:
            result = self.work(db)
            with self._gate:
                if self.abandoned:
                    raise WriteFailed("the write was cancelled before it committed")
                self.committing = True
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise WriteFailed("could not commit") from exc
        return result


class Writer:
    """The write lock of one connection and the transactions begun behind it.

    Args:
        db: the store's connection.
        label: names the database in error messages.
        check_open: raises when the store is closed.
        guard: sees every error of a transaction; one saying the file is damaged
            is raised as the guard's :class:`~spade_memory.errors.StorageCorrupted`.
    """

    def __init__(
        self,
        db: aiosqlite.Connection,
        *,
        label: str,
        check_open: Callable[[], None],
        guard: DamageGuard | None = None,
    ) -> None:
        self._db = db
        self._label = label
        self._check_open = check_open
        self._guard = guard
        self.lock = asyncio.Lock()

    async def _damaged(self, exc: BaseException) -> None:
        """Raise the guard's error (from ``exc``) when ``exc`` shows damage of the file."""
        if self._guard is not None and not isinstance(exc, asyncio.CancelledError):
            error = await self._guard.seen(exc)
            if error is not None:
                raise error from exc

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``) behind the lock.

        Raises:
            StorageError: the transaction could not begin or commit.
        """
        self._check_open()
        async with self.lock:
            self._check_open()
            try:
                await self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                await self._damaged(exc)
                raise StorageError(f"{self._label}: could not start a write: {exc}") from exc
            except asyncio.CancelledError:
                # The BEGIN was queued and may still run: end it before the lock is let go.
                with contextlib.suppress(sqlite3.Error):
                    await asyncio.shield(self._db.execute("ROLLBACK"))
                raise
            try:
                yield self._db
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error, ValueError):
                    await asyncio.shield(self._db.execute("ROLLBACK"))
                await self._damaged(exc)
                raise
            try:
                await self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error, ValueError):
                    await asyncio.shield(self._db.execute("ROLLBACK"))
                await self._damaged(exc)
                raise StorageError(f"{self._label}: could not commit: {exc}") from exc

    async def run(
        self,
        work: Callable[[sqlite3.Connection], T],
        *,
        durable: bool = True,
        outcome: WriteOutcome | None = None,
    ) -> T:
        """Run ``work`` as one whole transaction in one hop, behind the lock.

        ``work`` runs between ``BEGIN IMMEDIATE`` and ``COMMIT`` on the connection's
        thread and must neither commit nor roll back; if it raises, the transaction
        is rolled back and its error reaches the caller. A caller cancelled before
        the ``COMMIT`` began leaves nothing written. ``durable=False``: the commit
        is not synced to the disk (``synchronous=NORMAL`` for it), for a write a
        power cut may undo because it is made again (a derivation and the clearing
        of its mark, together). ``outcome`` learns whether it was committed, also
        when the caller is cancelled.

        Raises:
            WriteFailed: the transaction could not begin or commit, or its caller
                was cancelled before it committed.
            sqlite3.Error: a statement of ``work`` failed (rolled back).
        """
        self._check_open()
        async with self.lock:
            self._check_open()
            whole = _Whole(work, durable=durable)
            try:
                result = await run_on_connection(self._db, whole)
            except asyncio.CancelledError:
                committing = whole.abandon()  # rolled back unless its COMMIT has begun
                if outcome is not None:
                    outcome.committed = committing
                raise
            except Exception as exc:
                if outcome is not None:
                    outcome.committed = False
                await self._damaged(exc)
                raise
            if outcome is not None:
                outcome.committed = True
            return result

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[aiosqlite.Connection]:
        """The connection behind the lock, with no transaction begun.

        For what SQLite refuses inside a transaction (``ATTACH``, ``DETACH``): the
        caller begins and ends its own transactions and must leave none open.
        """
        self._check_open()
        async with self.lock:
            self._check_open()
            try:
                yield self._db
            except Exception as exc:
                await self._damaged(exc)
                raise
