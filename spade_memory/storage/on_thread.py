"""Work run on the thread of an aiosqlite connection, many statements in one hop.

aiosqlite runs every statement as one call handed to the connection's own
thread; a write of many small statements (a memory's graph is about twenty)
spends more time in those hand-overs than in SQLite. :func:`run_on_connection`
hands a whole piece of work over at once, through aiosqlite's public API only:

- once per connection, a SQL function is registered on it
  (``Connection.create_function``) and its ``sqlite3.Connection`` is taken from a
  cursor (``Cursor.connection``);
- each call then runs one statement, ``SELECT spade_memory_run(token)``, whose
  function calls the work with that ``sqlite3.Connection``, on the connection's
  thread, in the statement's place in aiosqlite's queue.

SQLite lets a function run statements of its own on the connection that calls
it (it must only not close the connection nor reset the calling statement), and
the calling ``SELECT`` reads no table: it opens no transaction and holds no lock,
so the work's statements run as if issued one by one: inside the transaction
the caller began, or beginning and ending one of their own.

Two other ways were weighed. A thread owned by the store with its own
``sqlite3`` connection cannot share an in-memory database with the
aiosqlite connection every read goes through, and one connection used from two
threads would let a read run in the middle of a write's statements; aiosqlite's
other callbacks (progress handler, trace, authorizer) may not touch the
database. The extra cost of the function against a bare hand-over is a few
microseconds, within the noise of one hop (``benchmarks/write_latency``).
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import aiosqlite

__all__ = ["RUN_FUNCTION", "prepare_connection", "run_on_connection"]

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


class _Runner:
    """The function registered on one connection and the work waiting for it."""

    def __init__(self) -> None:
        self.connection: sqlite3.Connection | None = None
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
