"""``run_on_connection`` hands work to aiosqlite's own thread, inside its transaction."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import aiosqlite
import pytest

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
