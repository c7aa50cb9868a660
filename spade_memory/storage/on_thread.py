"""Work run on the thread of an aiosqlite connection, many statements in one hop.

aiosqlite runs every statement as one call handed to the connection's own
thread; a write of many small statements (a memory's graph is about twenty)
spends more time in those hand-overs than in SQLite. :func:`run_on_connection`
hands a whole piece of work over at once, through public API only (aiosqlite's
and the ``sqlite3`` module's), in one of two ways:

- on a connection opened with :func:`connect` (the base store's), whose
  ``sqlite3`` connection is a :class:`HandOverConnection`: the work is given to
  ``aiosqlite.Connection.executescript`` in place of a script, and the
  ``sqlite3`` connection, called with it on its thread, runs it instead of
  parsing SQL. This costs what one statement's hand-over costs (the method
  taken over is one the work's statements never use, so they run at C speed);
- on any other aiosqlite connection: a SQL function registered once on it
  (``Connection.create_function``, with its ``sqlite3`` connection taken from
  ``Cursor.connection``) runs the work from inside one
  ``SELECT spade_memory_run(token)``. SQLite lets a function run statements of
  its own on the connection that calls it, and that ``SELECT`` reads no table
  (it opens no transaction, holds no lock), so the work's statements run as if
  issued one by one. It costs more per call than the first way (the statement
  and its function call, and the global interpreter lock let go and taken back
  around them: some 25 to 45 microseconds more per hand-over on a busy machine),
  and SQLite traces the work's statements with a leading ``-- `` (as those of a
  trigger).

Either way the work runs in its place in aiosqlite's queue, between the
statements before and after it, on the thread that owns the connection.

:func:`unattended` builds an aiosqlite connection whose thread is a daemon, so
a connection its owner never closed does not keep the process from exiting (a
thread takes its daemon flag from the thread that creates it, and aiosqlite
creates its thread when the connection object is made). Every connection of
this package that outlives one call is made through it.

A thread of the store's own, with a ``sqlite3`` connection of its own, was
weighed too: it cannot share an in-memory database with the aiosqlite connection
every read goes through, and one ``sqlite3`` connection used from two threads
would let a read run in the middle of a write's statements.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import aiosqlite

__all__ = [
    "RUN_FUNCTION",
    "HandOverConnection",
    "connect",
    "prepare_connection",
    "run_on_connection",
    "unattended",
]

T = TypeVar("T")

RUN_FUNCTION = "spade_memory_run"
"""The name of the SQL function that runs handed-over work."""

_RUN = f"SELECT {RUN_FUNCTION}(?)"


class _Call(Generic[T]):
    """One piece of work and, once it ran, its outcome."""

    __slots__ = ("done", "error", "result", "work")

    def __init__(self, work: Callable[[sqlite3.Connection], T]) -> None:
        self.work = work
        self.done = False
        self.result: T | None = None
        self.error: BaseException | None = None

    def run(self, connection: sqlite3.Connection) -> None:
        try:
            self.result = self.work(connection)
        except BaseException as exc:  # handed back to the awaiting caller
            self.error = exc
        self.done = True

    def outcome(self) -> T:
        if self.error is not None:
            error, self.error = self.error, None  # no cycle through the traceback
            raise error
        return self.result  # type: ignore[return-value]


class HandOverConnection(sqlite3.Connection):
    """A ``sqlite3`` connection that runs work handed to :meth:`executescript` in place of SQL.

    Open it through :func:`connect`; every other statement runs as usual.
    """

    def executescript(self, sql_script: Any, /) -> sqlite3.Cursor:
        # Not ``execute``: the work's own statements keep their unwrapped C method.
        if type(sql_script) is _Call:  # handed over by run_on_connection, on this thread
            sql_script.run(self)
            return cast(sqlite3.Cursor, None)  # aiosqlite wraps it; nothing reads it
        return super().executescript(sql_script)


def unattended(database: str | Path, **kwargs: Any) -> aiosqlite.Connection:
    """``aiosqlite.connect(database, **kwargs)`` whose thread never keeps the process alive.

    The connection object is made on a short-lived daemon thread, so the thread
    aiosqlite makes for it is a daemon too. Await it (or ``async with`` it) as
    aiosqlite's own. A process that exits with it open loses nothing committed:
    SQLite finds every committed transaction in the file (or its write-ahead
    log) when the database is opened again, and rolls back one left unfinished.
    """
    made: list[aiosqlite.Connection] = []
    failed: list[BaseException] = []

    def make() -> None:
        try:
            made.append(aiosqlite.connect(database, **kwargs))
        except BaseException as exc:  # handed back to the caller below
            failed.append(exc)

    maker = threading.Thread(target=make, name="spade-memory-connect", daemon=True)
    maker.start()
    maker.join()
    if failed:
        raise failed[0]
    return made[0]


async def connect(database: str | Path, **kwargs: Any) -> aiosqlite.Connection:
    """``aiosqlite.connect`` whose connection takes work in one hop the cheap way.

    ``kwargs`` go to ``sqlite3.connect`` (as with aiosqlite), except ``factory``.
    The connection's thread is a daemon (:func:`unattended`).
    """
    db = await unattended(database, factory=HandOverConnection, **kwargs)
    try:
        await prepare_connection(db)
    except BaseException:
        await db.close()
        raise
    return db


class _Runner:
    """The function registered on one connection and the work waiting for it."""

    def __init__(self) -> None:
        self.connection: sqlite3.Connection | None = None
        self.hands_over = False  # a HandOverConnection: no SQL function needed
        self.pending: dict[int, _Call[Any]] = {}
        self.tokens = itertools.count(1)
        self.ready: asyncio.Lock | None = asyncio.Lock()

    def __call__(self, token: int) -> None:
        # On the connection's thread, inside ``SELECT spade_memory_run(token)``.
        call = self.pending.pop(token, None)
        if call is not None and self.connection is not None:
            call.run(self.connection)


_RUNNERS: weakref.WeakKeyDictionary[aiosqlite.Connection, _Runner] = weakref.WeakKeyDictionary()


async def prepare_connection(db: aiosqlite.Connection) -> None:
    """Make ``db`` ready for :func:`run_on_connection` (done by its first call if not)."""
    runner = _RUNNERS.get(db)
    if runner is None:
        runner = _RUNNERS[db] = _Runner()
    if runner.ready is None:
        return
    async with runner.ready:
        if runner.ready is None:  # prepared while this call waited
            return
        cursor = await db.cursor()
        try:
            runner.connection = cursor.connection
        finally:
            await cursor.close()
        if isinstance(runner.connection, HandOverConnection):
            runner.hands_over = True
        else:
            await db.create_function(RUN_FUNCTION, 1, runner)
        runner.ready = None


async def run_on_connection(db: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``work`` on the thread that owns ``db``'s connection, in one hop.

    ``work`` either runs inside a transaction the caller began (and must not
    commit or roll back), or begins and ends a whole transaction of its own (and
    must leave none open, whatever it raises). What it returns or raises reaches
    the caller. A caller cancelled while the work waits in the connection's queue
    does not take it back: it runs all the same, as a queued statement would.
    """
    runner = _RUNNERS.get(db)
    if runner is None or runner.ready is not None:
        await prepare_connection(db)
        runner = _RUNNERS[db]
    call: _Call[T] = _Call(work)
    if runner.hands_over:
        await db.executescript(cast(str, call))  # HandOverConnection.executescript runs it
        return call.outcome()
    token = next(runner.tokens)
    runner.pending[token] = call
    try:
        await db.execute_fetchall(_RUN, (token,))
    except asyncio.CancelledError:
        raise
    except BaseException:
        runner.pending.pop(token, None)  # never queued (closed), or failed around the work
        if not call.done:
            raise
    return call.outcome()
