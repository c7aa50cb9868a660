"""The base memory's one write path: whole transactions in one hop, and step by step."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from pathlib import Path

import aiosqlite
import pytest
from factories import held

import spade_memory
from spade_memory.errors import StorageError, StoreClosedError
from spade_memory.storage import on_thread
from spade_memory.storage.writer import WriteFailed, WriteOutcome, Writer


async def open_writer(path: Path) -> tuple[aiosqlite.Connection, Writer]:
    db = await on_thread.connect(path, isolation_level=None)
    await db.execute("CREATE TABLE t (x INTEGER UNIQUE)")
    return db, Writer(db, label="t.db", check_open=lambda: None)


def rows(path: Path) -> list[int]:
    with sqlite3.connect(path) as other:  # what another connection sees: committed rows
        return [int(r[0]) for r in other.execute("SELECT x FROM t ORDER BY x")]


async def test_run_commits_the_whole_work_in_one_transaction(tmp_path: Path) -> None:
    db, writer = await open_writer(tmp_path / "t.db")
    try:

        def work(conn: sqlite3.Connection) -> bool:
            conn.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])
            return conn.in_transaction

        assert await writer.run(work) is True  # the work ran inside the writer's BEGIN
        assert not db.in_transaction
        assert rows(tmp_path / "t.db") == [1, 2]
    finally:
        await db.close()


async def test_run_rolls_back_everything_when_the_work_fails(tmp_path: Path) -> None:
    db, writer = await open_writer(tmp_path / "t.db")
    try:

        def clash(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES (5)")
            conn.execute("INSERT INTO t VALUES (5)")

        with pytest.raises(sqlite3.IntegrityError):
            await writer.run(clash)
        assert not db.in_transaction and rows(tmp_path / "t.db") == []
        assert not writer.lock.locked()
    finally:
        await db.close()


async def test_a_run_given_up_before_its_commit_writes_nothing(tmp_path: Path) -> None:
    db, writer = await open_writer(tmp_path / "t.db")
    started, go_on = threading.Event(), threading.Event()
    try:

        def slow(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES (7)")
            started.set()
            go_on.wait(10)

        task = asyncio.create_task(writer.run(slow))
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()  # the work is running: it finishes, then rolls back
        with pytest.raises(asyncio.CancelledError):
            await task
        go_on.set()
        assert await writer.run(lambda conn: conn.in_transaction) is True  # after it, in turn
        assert not db.in_transaction and rows(tmp_path / "t.db") == []
    finally:
        go_on.set()
        await db.close()


async def test_a_busy_database_fails_to_begin(tmp_path: Path) -> None:
    db, writer = await open_writer(tmp_path / "t.db")
    await db.execute("PRAGMA busy_timeout = 0")
    other = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(WriteFailed, match="could not start a write"):
            await writer.run(lambda conn: None)
        with pytest.raises(StorageError, match="could not start a write"):
            async with writer.transaction():
                pass
        other.execute("ROLLBACK")
    finally:
        other.close()
        await db.close()


async def test_transaction_steps_and_runs_take_turns_behind_one_lock(tmp_path: Path) -> None:
    db, writer = await open_writer(tmp_path / "t.db")
    try:
        order: list[str] = []

        async def stepwise() -> None:
            async with writer.transaction() as conn:
                order.append("step begins")
                await conn.execute("INSERT INTO t VALUES (1)")
                await asyncio.sleep(0.01)
                order.append("step ends")

        def whole(conn: sqlite3.Connection) -> None:
            order.append("run")
            conn.execute("INSERT INTO t VALUES (2)")

        first = asyncio.create_task(stepwise())
        await asyncio.sleep(0)
        await asyncio.gather(first, writer.run(whole))
        assert order == ["step begins", "step ends", "run"]
        with pytest.raises(RuntimeError):
            async with writer.transaction() as conn:
                await conn.execute("INSERT INTO t VALUES (3)")
                raise RuntimeError("rolled back")
        assert rows(tmp_path / "t.db") == [1, 2]
    finally:
        await db.close()


async def test_a_closed_store_is_refused_before_the_lock(tmp_path: Path) -> None:
    db = await on_thread.connect(tmp_path / "t.db", isolation_level=None)

    def closed() -> None:
        raise StoreClosedError("closed")

    writer = Writer(db, label="t.db", check_open=closed)
    try:
        with pytest.raises(StoreClosedError):
            await writer.run(lambda conn: None)
        with pytest.raises(StoreClosedError):
            async with writer.transaction():
                pass
    finally:
        await db.close()


def test_storage_begins_transactions_of_the_base_memory_in_the_writer_only() -> None:
    # Every write transaction on the store's connection is begun by storage/writer.py;
    # migrations.py migrates the schema while the store opens, before it is handed out.
    storage = Path(spade_memory.__file__).parent / "storage"
    begin = re.compile(r"""["']BEGIN\b""")
    base_side = {
        "base.py",
        "memory_writes.py",
        "graph.py",
        "graph_store.py",
        "atoms.py",
        "embeddings.py",
        "memory_reads.py",
        "database_open.py",
        "vectors.py",
    }
    offenders = [
        name
        for name in sorted(base_side)
        if (storage / name).exists() and begin.search((storage / name).read_text("utf-8"))
    ]
    assert offenders == []



@pytest.mark.parametrize(
    ("where", "committed", "written"), [("commit", True, [9]), ("work", False, [])]
)
async def test_a_cancelled_caller_learns_whether_its_write_was_committed(
    tmp_path: Path, where: str, committed: bool, written: list[int]
) -> None:
    db, writer = await open_writer(tmp_path / "t.db")
    started, go_on = threading.Event(), threading.Event()
    outcome = WriteOutcome()
    try:

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES (9)")

        task = asyncio.create_task(
            writer.run(held(work, where, started, go_on), outcome=outcome)
        )
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # known at once: a COMMIT under way goes on, a work not yet committing rolls back
        assert outcome.committed is committed
        go_on.set()
        await writer.run(lambda conn: None)  # after it, in turn
        assert rows(tmp_path / "t.db") == written
    finally:
        go_on.set()
        await db.close()
