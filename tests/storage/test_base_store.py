from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from spade_memory.config import StorageConfig
from spade_memory.errors import MigrationError, StorageCorrupted, StorageError, StoreClosedError
from spade_memory.storage.base import BaseMemoryStore, IndexedText, NewMemory
from spade_memory.storage.schema import MIGRATIONS, Migration


def new(content: str, category: str = "fact", **fields: object) -> NewMemory:
    return NewMemory(
        uid=uuid.uuid4().hex,
        category=category,
        content=content,
        context=None,
        confidence=1.0,
        importance=0.5,
        created_at=time.time(),
        **fields,  # type: ignore[arg-type]
    )


def text(content: str) -> IndexedText:
    return IndexedText(content.lower())


async def open_store(path: Path | None, agent: str = "a@x") -> BaseMemoryStore:
    return await BaseMemoryStore.open(
        path, agent=agent, storage=StorageConfig(), categories=("fact", "preference")
    )


async def test_round_trip_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = await open_store(path)
    stored = await store.insert(new("alpha beta", metadata={"k": "v"}), text("alpha beta"))
    await store.aclose()
    store = await open_store(path)
    try:
        again = await store.get(stored.id)
        assert again == stored
        assert again is not None and again.metadata == {"k": "v"}
        hits = await store.keyword_search(["beta"], limit=5)
        assert [hit[0] for hit in hits] == [stored.id]
        assert await store.integrity_check() == ["ok"]
    finally:
        await store.aclose()


async def test_in_memory_database_works_and_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = await open_store(None)
    try:
        memory = await store.insert(new("gamma"), text("gamma"))
        assert (await store.keyword_search(["gamma"], limit=3))[0][0] == memory.id
        assert await store.list() == [memory]
    finally:
        await store.aclose()
    assert list(tmp_path.iterdir()) == []


async def test_keyword_filters_apply_before_the_cut(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        facts = [await store.insert(new(f"tea fact {i}"), text(f"tea fact {i}")) for i in range(30)]
        pref = await store.insert(new("tea preference", "preference"), text("tea preference"))
        hits = await store.keyword_search(["tea"], limit=1, categories=["preference"])
        assert [hit[0] for hit in hits] == [pref.id]
        await store.update(facts[0].id, {"status": "archived"}, text=None, now=time.time())
        active = await store.keyword_search(["tea"], limit=100)
        assert facts[0].id not in {hit[0] for hit in active}
        assert len(active) == 30
    finally:
        await store.aclose()


async def test_update_reindexes_and_drops_the_stale_vector(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        memory = await store.insert(new("old words"), text("old words"))
        pending = await store.pending_embeddings("fp", 10)
        assert [p[0] for p in pending] == [memory.id]
        stored, seq = await store.put_embeddings("fp", 3, [(pending[0], np.ones(3, np.float32))])
        assert stored == [memory.id] and seq == 1
        updated = await store.update(
            memory.id, {"content": "new words"}, text=text("new words"), now=time.time() + 1
        )
        assert updated is not None and updated.content == "new words"
        assert await store.keyword_search(["old"], limit=5) == []
        assert [h[0] for h in await store.keyword_search(["new"], limit=5)] == [memory.id]
        assert len(await store.embedding_ids("fp")) == 0
        # A vector computed from the old text arrives late: it is refused.
        stale, _ = await store.put_embeddings("fp", 3, [(pending[0], np.ones(3, np.float32))])
        assert stale == []
    finally:
        await store.aclose()


async def test_a_vector_of_the_old_text_is_refused_after_an_update_at_the_same_time(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        memory = await store.insert(new("old words"), text("old words"))
        (read,) = await store.pending_embeddings("fp", 10)
        # updated at the clock reading of the insert: updated_at alone tells nothing
        changes = {"content": "new words"}
        await store.update(memory.id, changes, text=text("new words"), now=memory.updated_at)
        (again,) = await store.pending_embeddings("fp", 10)
        assert again.updated_at == read.updated_at and again.text == "new words"
        stale, _ = await store.put_embeddings("fp", 3, [(read, np.ones(3, np.float32))])
        assert stale == [] and await store.count_pending_embeddings("fp") == 1
        fresh, _ = await store.put_embeddings("fp", 3, [(again, np.ones(3, np.float32))])
        assert fresh == [memory.id] and await store.count_pending_embeddings("fp") == 0
    finally:
        await store.aclose()


async def test_delete_removes_row_fts_and_vector(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        memory = await store.insert(new("delta"), text("delta"))
        pending = await store.pending_embeddings("fp", 10)
        await store.put_embeddings("fp", 3, [(pending[0], np.ones(3, np.float32))])
        assert await store.delete(memory.id)
        assert not await store.delete(memory.id)
        assert await store.get(memory.id) is None
        assert await store.keyword_search(["delta"], limit=5) == []
        assert len(await store.embedding_ids("fp")) == 0
        again = await store.insert(new("delta"), text("delta"))
        assert again.id > memory.id  # ids are never reused
    finally:
        await store.aclose()


async def test_vectors_round_trip_and_load_after_seq(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        memories = await store.insert_many([(new(f"m{i}"), text(f"m{i}")) for i in range(5)])
        pending = await store.pending_embeddings("fp", 100)
        vectors = {m.id: np.full(4, float(m.id), np.float32) for m in memories}
        await store.put_embeddings("fp", 4, [(p, vectors[p.memory_id]) for p in pending[:3]])
        _, _, first_seq = await store.load_vectors("fp", 4)
        await store.put_embeddings("fp", 4, [(p, vectors[p.memory_id]) for p in pending[3:]])
        ids, matrix, seq = await store.load_vectors("fp", 4, after_seq=first_seq)
        assert ids.tolist() == [m.id for m in memories[3:]]
        assert seq == 5
        np.testing.assert_array_equal(matrix[0], vectors[memories[3].id])
        assert await store.count_pending_embeddings("fp") == 0
        assert await store.count_pending_embeddings("other") == 5
    finally:
        await store.aclose()


async def test_malformed_vector_is_refused(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        await store.insert(new("x"), text("x"))
        (pending,) = await store.pending_embeddings("fp", 10)
        with pytest.raises(Exception, match="malformed"):
            await store.put_embeddings("fp", 1, [(pending, np.array([np.nan], np.float32))])
        assert len(await store.embedding_ids("fp")) == 0
    finally:
        await store.aclose()


async def test_a_vector_of_another_length_than_its_embedders_is_refused(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        await store.insert_many([(new("x"), text("x")), (new("y"), text("y"))])
        first, second = await store.pending_embeddings("fp", 10)
        items = [(first, np.ones(3, np.float32)), (second, np.ones(6, np.float32))]
        with pytest.raises(
            StorageError, match="vector of 6 values for memory 2: the vectors of fp have 3"
        ):
            await store.put_embeddings("fp", 3, items)
        assert len(await store.embedding_ids("fp")) == 0  # none of the batch
        stored, _ = await store.put_embeddings("fp", 3, items[:1])
        assert stored == [first.memory_id]
        _, matrix, _ = await store.load_vectors("fp", 3)
        np.testing.assert_array_equal(matrix, np.ones((1, 3), np.float32))
    finally:
        await store.aclose()


async def test_closed_store_refuses_use(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    await store.aclose()
    await store.aclose()
    with pytest.raises(StoreClosedError):
        await store.insert(new("x"), text("x"))
    with pytest.raises(StoreClosedError):
        await store.list()


async def test_another_agents_database_is_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = await open_store(path, agent="a@x")
    await store.insert(new("secret"), text("secret"))
    await store.aclose()
    with pytest.raises(StorageCorrupted) as info:
        await open_store(path, agent="b@x")
    assert info.value.quarantined_to is not None and info.value.quarantined_to.exists()
    assert not path.exists()


async def test_garbage_file_is_quarantined_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageCorrupted) as info:
        await open_store(path)
    moved = info.value.quarantined_to
    assert moved is not None and moved.read_bytes() == b"this is not a database" * 100


async def test_failed_migration_restores_the_backup(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = await open_store(path)
    kept = await store.insert(new("keep me"), text("keep me"))
    await store.aclose()
    bad = (
        *MIGRATIONS,
        Migration(
            len(MIGRATIONS) + 1,
            "a step that fails half way",
            (
                "ALTER TABLE memories ADD COLUMN extra TEXT",
                "DELETE FROM memories",
                "THIS IS NOT SQL",
            ),
        ),
    )
    import spade_memory.storage.base as base_module

    original = base_module.migrate

    async def failing_migrate(db, *, backup_dir, label):  # type: ignore[no-untyped-def]
        return await original(db, backup_dir=backup_dir, label=label, migrations=bad)

    base_module.migrate = failing_migrate  # type: ignore[assignment]
    try:
        with pytest.raises(MigrationError, match="restored"):
            await BaseMemoryStore.open(
                path, agent="a@x", storage=StorageConfig(), backup_dir=tmp_path / "backup"
            )
    finally:
        base_module.migrate = original  # type: ignore[assignment]
    assert list((tmp_path / "backup").glob("*.db"))
    store = await open_store(path)
    try:
        assert await store.get(kept.id) == kept
        columns = [row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(memories)")]
        assert "extra" not in columns
    finally:
        await store.aclose()


async def test_successful_migration_backs_up_first(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = await open_store(path)
    await store.aclose()
    extra = (
        *MIGRATIONS,
        Migration(
            len(MIGRATIONS) + 1, "add an index", ("CREATE INDEX extra_idx ON memories (uid)",)
        ),
    )
    import aiosqlite

    from spade_memory.storage.migrations import migrate

    async with aiosqlite.connect(path, isolation_level=None) as db:
        version = await migrate(db, backup_dir=tmp_path / "backup", label="a", migrations=extra)
    assert version == len(extra)
    backups = list((tmp_path / "backup").glob(f"a.v{len(MIGRATIONS)}.*.db"))
    assert len(backups) == 1
    with sqlite3.connect(backups[0]) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


async def test_a_migration_another_process_took_meanwhile_is_not_taken_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import aiosqlite

    from spade_memory.storage import migrations

    path = tmp_path / "a.db"
    store = await open_store(path)
    await store.aclose()
    n = len(MIGRATIONS)
    extra = (
        *MIGRATIONS,
        # a step that can be run twice, then one that cannot
        Migration(n + 1, "touch the counters", ("UPDATE meta SET value = value",)),
        Migration(n + 2, "a table of its own", ("CREATE TABLE extra_t (z TEXT)",)),
    )
    backup_before = migrations._backup_before

    async def slow_backup(db: aiosqlite.Connection, *args: object) -> Path:
        # While this process backs up, another one opens the memory, migrates it and
        # writes to it (the backup of a large database takes seconds).
        taken = await backup_before(db, *args)  # type: ignore[arg-type]
        async with aiosqlite.connect(path, isolation_level=None) as other:
            await migrations.migrate(other, backup_dir=None, label="a", migrations=extra)
            await other.execute("INSERT INTO extra_t (z) VALUES ('acknowledged')")
        return taken

    monkeypatch.setattr(migrations, "_backup_before", slow_backup)
    async with aiosqlite.connect(path, isolation_level=None) as db:
        version = await migrations.migrate(
            db, backup_dir=tmp_path / "backup", label="a", migrations=extra
        )
    assert version == n + 2
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == n + 2
        assert db.execute("SELECT z FROM extra_t").fetchall() == [("acknowledged",)]


async def test_a_memory_is_marked_open_while_it_is_being_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import spade_memory.storage.base as base_module

    path = tmp_path / "a.db"
    store = await open_store(path)
    await store.aclose()
    migrate = base_module.migrate
    seen: list[bool] = []

    async def watched(db, *, backup_dir, label):  # type: ignore[no-untyped-def]
        # what a restore asks before it writes (it refuses a memory open anywhere)
        seen.append(BaseMemoryStore.open_in_any_process(path))
        return await migrate(db, backup_dir=backup_dir, label=label)

    monkeypatch.setattr(base_module, "migrate", watched)
    store = await open_store(path)
    await store.aclose()
    assert seen == [True]
    assert not BaseMemoryStore.open_in_any_process(path)


async def test_a_failed_open_lets_go_of_its_mark(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageCorrupted):
        await open_store(path)
    assert not BaseMemoryStore.open_in_any_process(path)
