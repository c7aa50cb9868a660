"""``run_on_connection`` hands work to aiosqlite's own thread, inside its transaction."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from pathlib import Path

import aiosqlite
import pytest

import spade_memory
from spade_memory.config import StorageConfig
from spade_memory.storage import on_thread
from spade_memory.storage.base import BaseMemoryStore
from spade_memory.storage.graph import run_on_connection


async def test_work_runs_on_the_connection_thread_in_its_transaction(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "t.db") as db:
        await db.execute("CREATE TABLE t (x INTEGER)")
        await db.commit()
        await db.execute("BEGIN IMMEDIATE")

        def work(conn: sqlite3.Connection) -> tuple[int, bool]:
            conn.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])
            return threading.get_ident(), conn.in_transaction

        ident, in_transaction = await run_on_connection(db, work)
        assert ident != threading.get_ident()
        assert in_transaction
        await db.rollback()  # the work was part of the open transaction
        async with db.execute("SELECT count(*) FROM t") as cursor:
            assert await cursor.fetchone() == (0,)


async def test_errors_of_the_work_reach_the_caller(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "t.db") as db:

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("SELECT * FROM missing")

        with pytest.raises(sqlite3.OperationalError, match="missing"):
            await run_on_connection(db, work)


async def test_work_may_begin_and_commit_a_transaction_of_its_own(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "t.db", isolation_level=None) as db:
        await db.execute("CREATE TABLE t (x INTEGER)")

        def commit(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (1)")
            conn.execute("COMMIT")
            return conn.in_transaction

        def roll_back(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (2)")
            conn.execute("ROLLBACK")
            return conn.in_transaction

        assert await run_on_connection(db, commit) is False
        assert await run_on_connection(db, roll_back) is False
        assert not db.in_transaction
    with sqlite3.connect(tmp_path / "t.db") as other:  # committed to the file
        assert other.execute("SELECT x FROM t").fetchall() == [(1,)]


async def test_work_failing_inside_the_callers_transaction_leaves_it_to_the_caller(
    tmp_path: Path,
) -> None:
    async with aiosqlite.connect(tmp_path / "t.db", isolation_level=None) as db:
        await db.execute("CREATE TABLE t (x INTEGER UNIQUE)")
        await db.execute("BEGIN IMMEDIATE")
        await db.execute("INSERT INTO t VALUES (1)")

        def clash(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES (2)")
            conn.execute("INSERT INTO t VALUES (1)")

        with pytest.raises(sqlite3.IntegrityError):
            await run_on_connection(db, clash)
        assert db.in_transaction  # neither committed nor rolled back by the failure
        assert await db.execute_fetchall("SELECT x FROM t ORDER BY x") == [(1,), (2,)]
        await db.execute("COMMIT")


async def test_any_exception_of_the_work_reaches_the_caller_as_raised() -> None:
    class Odd(BaseException):
        pass

    async with aiosqlite.connect(":memory:") as db:

        def work(conn: sqlite3.Connection) -> None:
            raise Odd("from the work")

        with pytest.raises(Odd, match="from the work"):
            await run_on_connection(db, work)
        assert await run_on_connection(db, lambda conn: 7) == 7  # still usable


async def test_queued_work_runs_in_order_with_statements_and_after_a_cancel() -> None:
    async with aiosqlite.connect(":memory:", isolation_level=None) as db:
        await db.execute("CREATE TABLE t (x INTEGER)")
        gate = threading.Event()
        busy = asyncio.create_task(run_on_connection(db, lambda conn: gate.wait(10)))
        await asyncio.sleep(0.01)
        given_up = asyncio.create_task(
            run_on_connection(db, lambda conn: conn.execute("INSERT INTO t VALUES (1)"))
        )
        await asyncio.sleep(0.01)
        given_up.cancel()  # queued behind the busy work: it still runs, as a statement would
        after = asyncio.create_task(db.execute_fetchall("SELECT count(*) FROM t"))
        gate.set()
        assert await busy is True
        with pytest.raises(asyncio.CancelledError):
            await given_up
        assert list(await after) == [(1,)]


async def test_a_closed_connection_is_refused() -> None:
    db = await aiosqlite.connect(":memory:")
    assert await run_on_connection(db, lambda conn: 1) == 1
    await db.close()
    with pytest.raises(ValueError):
        await run_on_connection(db, lambda conn: 2)


async def test_the_work_runs_inside_a_transaction_of_a_store(tmp_path: Path) -> None:
    store = await BaseMemoryStore.open(
        tmp_path / "a.db", agent="a@x", storage=StorageConfig(), categories=("fact",)
    )
    try:
        async with store.transaction() as db:
            seen = await run_on_connection(db, lambda conn: conn.in_transaction)
        assert seen is True
    finally:
        await store.aclose()


def test_no_module_uses_private_attributes_of_aiosqlite() -> None:
    # ``_execute`` and ``_conn`` are aiosqlite's own; the package uses its public API.
    package = Path(spade_memory.__file__).parent
    private = re.compile(r"\._execute\b|\._conn\b")
    offenders = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if private.search(line)
    ]
    assert offenders == []


async def test_a_hand_over_connection_takes_work_in_place_of_a_script(tmp_path: Path) -> None:
    db = await on_thread.connect(tmp_path / "t.db", isolation_level=None)
    try:
        await db.executescript("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (0);")
        traced: list[str] = []
        await db.set_trace_callback(traced.append)

        def own(conn: sqlite3.Connection) -> tuple[int, bool]:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (1)")
            conn.execute("COMMIT")
            return threading.get_ident(), conn.in_transaction

        ident, in_transaction = await run_on_connection(db, own)
        assert ident != threading.get_ident() and not in_transaction
        assert traced == ["BEGIN IMMEDIATE", "INSERT INTO t VALUES (1)", "COMMIT"]  # not nested
        await db.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.IntegrityError):
            await run_on_connection(
                db, lambda conn: conn.execute("INSERT INTO t (rowid, x) VALUES (1, 9)")
            )
        assert db.in_transaction  # the caller's transaction, left to the caller
        await db.execute("ROLLBACK")
        with pytest.raises(sqlite3.OperationalError, match="no such function"):
            await db.execute(f"SELECT {on_thread.RUN_FUNCTION}(1)")  # no SQL function needed
    finally:
        await db.close()
    with sqlite3.connect(tmp_path / "t.db") as other:
        assert other.execute("SELECT x FROM t ORDER BY x").fetchall() == [(0,), (1,)]
