"""Group commit of concurrent single inserts, and memories returned without a re-read."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import pytest

from spade_memory.config import StorageConfig
from spade_memory.errors import StorageError
from spade_memory.models import Memory
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


def _is_commit(sql: str) -> bool:
    # SQLite traces a statement run from inside another (the one-hop work of
    # run_on_connection runs inside its SELECT) with a leading "-- ".
    return sql.strip().removeprefix("--").strip().upper() == "COMMIT"


async def commits_of(store: BaseMemoryStore) -> list[str]:
    """Records the COMMITs the store's connection runs (SQLite's statement trace)."""
    commits: list[str] = []

    def trace(sql: str) -> None:
        if _is_commit(sql):
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


async def test_a_leader_cancelled_during_commit_leaves_the_others_committed_once(
    tmp_path: Path,
) -> None:
    # The leader of a group is cancelled while its COMMIT runs on the connection's
    # thread: the transaction commits all the same. The others of the group must
    # get their memories (not an error, not a second copy).
    store = await open_store(tmp_path / "a.db")
    committing, go_on = threading.Event(), threading.Event()

    def trace(sql: str) -> None:
        if _is_commit(sql):
            committing.set()
            go_on.wait(10)

    try:
        await run_on_connection(store._db, lambda db: db.set_trace_callback(trace))
        await store._group.gate.acquire()  # a group forms while the gate is held
        leader = asyncio.create_task(store.insert(new("a"), text("a")))
        other = asyncio.create_task(store.insert(new("b"), text("b")))
        for _ in range(3):
            await asyncio.sleep(0)
        store._group.gate.release()
        while not committing.is_set():
            await asyncio.sleep(0.001)
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leader
        go_on.set()
        got = await asyncio.wait_for(other, timeout=10)
        assert got.content == "b"
        contents = sorted(m.content for m in await store.list(limit=10))
        assert contents == ["a", "b"]  # the commit began: "a" is written too
        assert got == await store.get(got.id)
    finally:
        go_on.set()
        await store.aclose()


async def test_a_leader_cancelled_before_its_commit_began_leaves_the_others_to_commit(
    tmp_path: Path,
) -> None:
    # The group's transaction is handed over but rolled back (its leader gave up
    # before the COMMIT): the others are inserted again, once, and the leader's not.
    store = await open_store(tmp_path / "a.db")
    started, gate = threading.Event(), threading.Event()

    def hold(_: object) -> bool:
        started.set()
        return gate.wait(10)

    try:
        await store._group.gate.acquire()
        leader = asyncio.create_task(store.insert(new("a"), text("a")))
        others = [asyncio.create_task(store.insert(new(name), text(name))) for name in "bc"]
        for _ in range(3):
            await asyncio.sleep(0)
        busy = asyncio.create_task(run_on_connection(store._db, hold))
        while not started.is_set():  # the thread is busy: the group's transaction waits
            await asyncio.sleep(0.001)
        store._group.gate.release()
        while not store._write_lock.locked():  # the group is handed over
            await asyncio.sleep(0)
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leader
        gate.set()
        assert await busy is True
        got = await asyncio.wait_for(asyncio.gather(*others), timeout=10)
        assert [m.content for m in got] == ["b", "c"]
        contents = sorted(m.content for m in await store.list(limit=10))
        assert contents == ["b", "c"]
    finally:
        gate.set()
        await store.aclose()


async def test_random_cancellations_lose_and_double_nothing(tmp_path: Path) -> None:
    # Many concurrent inserts, some cancelled at random moments: every insert whose
    # caller got a memory is stored once, as returned; nothing is stored twice.
    store = await open_store(tmp_path / "a.db")
    rng = random.Random(7)
    try:
        for round_ in range(60):
            names = [f"r{round_} memory {i}" for i in range(8)]
            tasks = [asyncio.create_task(store.insert(new(n), text(n))) for n in names]
            while waiting := [task for task in tasks if not task.done()]:
                await asyncio.sleep(rng.random() * 0.001)
                if rng.random() < 0.5:  # the oldest waiting insert leads its group
                    waiting[0 if store._group.gate.locked() else -1].cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for outcome in results:
                assert isinstance(outcome, Memory | asyncio.CancelledError), outcome
            stored = {m.content: m for m in await store.list(limit=1000)}
            for name, outcome in zip(names, results, strict=True):
                if isinstance(outcome, Memory):
                    assert stored[name] == outcome
        contents = [m.content for m in await store.list(limit=1000)]
        assert len(contents) == len(set(contents))
        assert not store._group.queue
    finally:
        await store.aclose()
