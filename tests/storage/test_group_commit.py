"""Group commit of concurrent single inserts, and memories returned without a re-read."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import pytest

from spade_memory.config import StorageConfig
from spade_memory.errors import StorageError
from spade_memory.storage.base import BaseMemoryStore, IndexedText, NewMemory
from spade_memory.storage.graph import run_on_connection


def new(content: str, *, uid: str | None = None, **fields: object) -> NewMemory:
    return NewMemory(
        uid=uid or uuid.uuid4().hex,
        category="fact",
        content=content,
        context=None,
        confidence=1.0,
        importance=0.5,
        created_at=time.time(),
        **fields,  # type: ignore[arg-type]
    )


def text(content: str) -> IndexedText:
    return IndexedText(content.lower())


async def open_store(path: Path) -> BaseMemoryStore:
    return await BaseMemoryStore.open(
        path, agent="a@x", storage=StorageConfig(), categories=("fact",)
    )


async def commits_of(store: BaseMemoryStore) -> list[str]:
    """Records the COMMITs the store's connection runs (SQLite's statement trace)."""
    commits: list[str] = []

    def trace(sql: str) -> None:
        if sql.strip().upper() == "COMMIT":
            commits.append(sql)

    await run_on_connection(store._db, lambda db: db.set_trace_callback(trace))
    return commits


async def test_concurrent_inserts_share_transactions_and_all_persist(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = await open_store(path)
    commits = await commits_of(store)
    contents = [f"memory number {i}" for i in range(40)]
    try:
        stored = await asyncio.gather(*(store.insert(new(c), text(c)) for c in contents))
        assert [memory.content for memory in stored] == contents
        assert len({memory.id for memory in stored}) == len(contents)
        assert 1 <= len(commits) < len(contents)  # grouped: fewer commits than inserts
    finally:
        await store.aclose()
    with sqlite3.connect(path) as raw:
        rows = dict(raw.execute("SELECT id, content FROM memories").fetchall())
        fts = raw.execute("SELECT count(*) FROM memories_fts").fetchone()[0]
        stores = raw.execute("SELECT stores FROM agent_stats").fetchone()[0]
    assert rows == {memory.id: memory.content for memory in stored}
    assert fts == len(contents) and stores == len(contents)


async def test_returned_memory_equals_the_row_read_back(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        inserted = await store.insert(
            new("with metadata", metadata={"k": [1, 2], "s": "é"}, access_count=3),
            text("with metadata"),
        )
        assert await store.get(inserted.id) == inserted
        many = await store.insert_many([(new("x"), text("x")), (new("y"), text("y"))])
        found = await store.get_many(memory.id for memory in many)
        assert [found[memory.id] for memory in many] == many
    finally:
        await store.aclose()


async def test_one_bad_insert_in_a_group_fails_alone(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        await store.insert(new("first", uid="taken"), text("first"))
        results = await asyncio.gather(
            store.insert(new("good one"), text("good one")),
            store.insert(new("duplicate", uid="taken"), text("duplicate")),
            store.insert(new("good two"), text("good two")),
            return_exceptions=True,
        )
        assert isinstance(results[1], StorageError)
        good = [r for r in results if not isinstance(r, BaseException)]
        assert sorted(memory.content for memory in good) == ["good one", "good two"]
        assert await store.count() == 3
    finally:
        await store.aclose()


async def test_cancelled_leaders_leave_the_others_to_be_committed(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        await store._write_lock.acquire()  # every transaction waits until released
        first = asyncio.create_task(store.insert(new("first"), text("first")))
        await asyncio.sleep(0)
        second = asyncio.create_task(store.insert(new("second"), text("second")))
        third = asyncio.create_task(store.insert(new("third"), text("third")))
        for _ in range(3):
            await asyncio.sleep(0)
        first.cancel()  # leading a group of itself
        with pytest.raises(asyncio.CancelledError):
            await first
        for _ in range(3):
            await asyncio.sleep(0)
        second.cancel()  # now leading a group of itself and "third"
        with pytest.raises(asyncio.CancelledError):
            await second
        store._write_lock.release()
        committed = await asyncio.wait_for(third, timeout=10)
        assert committed.content == "third"
        assert [m.content for m in await store.list(limit=10)] == ["third"]
    finally:
        await store.aclose()


async def test_an_insert_cancelled_once_handed_over_is_rolled_back(tmp_path: Path) -> None:
    # The whole transaction runs in one call on the connection's thread; a caller
    # cancelled while that call waits in the thread's queue leaves nothing written.
    store = await open_store(tmp_path / "a.db")
    gate = threading.Event()
    try:
        busy = asyncio.create_task(run_on_connection(store._db, lambda _: gate.wait(10)))
        insert = asyncio.create_task(store.insert(new("given up"), text("given up")))
        while not store._write_lock.locked():  # handed over in the step taking the lock
            await asyncio.sleep(0)
        insert.cancel()
        with pytest.raises(asyncio.CancelledError):
            await insert
        gate.set()
        assert await busy is True
        kept = await store.insert(new("kept"), text("kept"))
        assert [m.content for m in await store.list(limit=10)] == ["kept"]
        assert kept.content == "kept" and not store._db.in_transaction
    finally:
        gate.set()
        await store.aclose()


async def test_a_failed_commit_group_leaves_no_transaction_open(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        await store.insert(new("first", uid="same"), text("first"))
        with pytest.raises(StorageError, match="insert refused"):
            await store.insert(new("again", uid="same"), text("again"))
        assert not store._db.in_transaction
        assert [m.content for m in await store.list(limit=10)] == ["first"]
    finally:
        await store.aclose()
