"""The named queries of maintenance in storage: each finds what was planted, and only that."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from spade_memory.config import StorageConfig
from spade_memory.errors import StorageError
from spade_memory.storage import graph_shadow, lifecycle
from spade_memory.storage.base import BaseMemoryStore, IndexedText, NewMemory
from spade_memory.storage.checks import GRAPH_ORPHAN_TABLES, ConsistencyQueries
from spade_memory.storage.database_copies import BackupFile, make_standalone
from spade_memory.storage.graph_shadow import GraphShadowFile, ShadowLocked
from spade_memory.storage.shadow import ShadowTables

FINGERPRINT = "test-embedder"
DIM = 4


def new(content: str, **fields: object) -> NewMemory:
    return NewMemory(
        uid=uuid.uuid4().hex,
        category="fact",
        content=content,
        context=None,
        confidence=1.0,
        importance=0.5,
        created_at=time.time(),
        **fields,  # type: ignore[arg-type]
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[BaseMemoryStore]:
    opened = await BaseMemoryStore.open(
        tmp_path / "a.db", agent="a@x", storage=StorageConfig(), categories=("fact",)
    )
    try:
        yield opened
    finally:
        await opened.aclose()


async def insert(store: BaseMemoryStore, *contents: str) -> list[int]:
    memories = await store.insert_many(
        [(new(content), IndexedText.of(content)) for content in contents]
    )
    return [memory.id for memory in memories]


async def embed(store: BaseMemoryStore, ids: list[int]) -> None:
    pending = await store.pending_embeddings(FINGERPRINT, 1000)
    vectors = [(p, np.ones(DIM, dtype=np.float32)) for p in pending if p.memory_id in ids]
    await store.put_embeddings(FINGERPRINT, DIM, vectors)


async def execute(store: BaseMemoryStore, sql: str, params: tuple[object, ...] = ()) -> None:
    async with store.transaction() as db:
        await db.execute(sql, params)


async def unchecked(store: BaseMemoryStore, sql: str, params: tuple[object, ...] = ()) -> None:
    """Run a write with foreign keys off: a row of no memory, as damage leaves one."""
    async with store.exclusive() as db:
        await db.execute("PRAGMA foreign_keys = OFF")
        try:
            await db.execute(sql, params)
        finally:
            await db.execute("PRAGMA foreign_keys = ON")


async def test_a_sound_memory_shows_no_problem(store: BaseMemoryStore) -> None:
    ids = await insert(store, "alpha", "beta")
    await embed(store, ids)
    queries = ConsistencyQueries(store)
    assert await queries.memories_missing_fts() == []
    assert await queries.orphan_fts_rows() == []
    assert await queries.orphan_vector_ids() == []
    assert await queries.malformed_vector_ids() == []
    assert await queries.memories_missing_vector() == []
    assert await queries.foreign_vector_ids(FINGERPRINT) == []
    assert await queries.wrong_dimension_vector_ids(FINGERPRINT, DIM) == []
    assert (await queries.valid_vector_ids(FINGERPRINT, DIM)).tolist() == ids
    for table in GRAPH_ORPHAN_TABLES:
        assert await queries.graph_orphans(table) == []


async def test_planted_keyword_problems_are_found_outside_and_under_the_lock(
    store: BaseMemoryStore,
) -> None:
    first, second = await insert(store, "alpha", "beta")
    await execute(store, "DELETE FROM memories_fts WHERE rowid = ?", (first,))
    await execute(
        store,
        "INSERT INTO memories_fts (rowid, content_tokens, context_tokens) VALUES (999, 'x', '')",
    )
    queries = ConsistencyQueries(store)
    assert await queries.memories_missing_fts() == [first]
    assert await queries.orphan_fts_rows() == [999]
    async with queries.locked() as locked:
        assert await locked.memories_missing_fts() == [first]
        assert await locked.orphan_fts_rows() == [999]
        assert await locked.keyword_row(first) is None
        assert await locked.keyword_row(second) == (IndexedText.of("beta").content_tokens, "")
        # a row that belongs to a memory is never taken for an orphan
        assert await locked.delete_orphan_fts_rows([second, 999]) == 1
        await locked.write_keyword_row(first, "alpha", "")
    assert await queries.orphan_fts_rows() == []
    assert await queries.memories_missing_fts() == []


async def test_changed_memory_is_not_unchanged(store: BaseMemoryStore) -> None:
    (memory_id,) = await insert(store, "alpha")
    async with ConsistencyQueries(store).locked() as locked:
        assert await locked.memory_unchanged(memory_id, "alpha", None)
        assert not await locked.memory_unchanged(memory_id, "alpha", "a context")
        assert not await locked.memory_unchanged(memory_id, "other", None)


async def test_planted_vector_problems_are_found(store: BaseMemoryStore) -> None:
    sound, short, foreign, bare, halved = await insert(store, "a", "b", "c", "d", "e")
    await embed(store, [sound, short, foreign, halved])
    await execute(store, "UPDATE embeddings SET vector = x'00' WHERE memory_id = ?", (short,))
    await execute(
        store, "UPDATE embeddings SET fingerprint = 'old' WHERE memory_id = ?", (foreign,)
    )
    await execute(
        store,
        "UPDATE embeddings SET dim = ?, vector = substr(vector, 1, ?) WHERE memory_id = ?",
        (DIM // 2, DIM * 2, halved),
    )
    await unchecked(
        store,
        "INSERT INTO embeddings (memory_id, fingerprint, dim, vector, seq) VALUES (?, ?, ?, ?, 99)",
        (777, FINGERPRINT, DIM, np.ones(DIM, dtype=np.float32).tobytes()),
    )
    queries = ConsistencyQueries(store)
    assert await queries.orphan_vector_ids() == [777]
    assert await queries.malformed_vector_ids() == [short]
    assert await queries.memories_missing_vector() == [bare]
    assert await queries.foreign_vector_ids(FINGERPRINT) == [foreign]
    assert await queries.wrong_dimension_vector_ids(FINGERPRINT, DIM) == [halved]
    assert (await queries.valid_vector_ids(FINGERPRINT, DIM)).tolist() == [sound, 777]
    well_formed = await queries.well_formed_vectors_after(0, 10)
    assert [memory_id for memory_id, _ in well_formed] == [sound, foreign, halved, 777]
    async with queries.locked() as locked:
        assert await locked.delete_orphan_vectors([sound, 777]) == [777]
        deleted = await locked.delete_wrong_dimension_vectors(
            FINGERPRINT, DIM, [sound, foreign, halved]
        )
        assert deleted == [halved]
        ids, matrix = await locked.valid_vectors_of(FINGERPRINT, DIM, [sound, short, foreign])
        assert ids.tolist() == [sound] and matrix.shape == (1, DIM)
        await locked.delete_vectors([short])
    assert await queries.malformed_vector_ids() == []
    assert await queries.orphan_vector_ids() == []
    assert await queries.wrong_dimension_vector_ids(FINGERPRINT, DIM) == []
    assert await queries.memories_missing_vector() == [short, bare, halved]  # embedded again


async def test_planted_graph_orphans_are_found_and_deleted(store: BaseMemoryStore) -> None:
    (memory_id,) = await insert(store, "Alice met Bob in Paris")
    queries = ConsistencyQueries(store)
    await execute(store, "DELETE FROM memory_atoms WHERE memory_id = ?", (memory_id,))
    assert await queries.memories_missing_graph() == [memory_id]
    await execute(
        store,
        "INSERT INTO graph_nodes (id, key, type, value, created_at) "
        "VALUES (4242, 'orphan', 'entity', 'orphan', 0)",
    )
    assert await queries.graph_orphans("graph_nodes") == [None]  # a node names no memory
    async with queries.locked() as locked:
        assert await locked.graphless_among([memory_id, 4242]) == {memory_id}
        assert await locked.delete_graph_orphans() >= 1
    assert await queries.graph_orphans("graph_nodes") == []


async def test_set_status_moves_only_memories_of_the_previous_status(
    store: BaseMemoryStore,
) -> None:
    first, second = await insert(store, "a", "b")
    changed = await lifecycle.set_status(
        store, [first], "archived", previous="active", metadata=lambda raw: '{"x": 1}'
    )
    assert changed == [first]
    again = await lifecycle.set_status(
        store, [first, second], "archived", previous="archived", metadata=lambda raw: "{}"
    )
    assert again == [first]  # the second is active: left alone
    memory = await store.get(second)
    assert memory is not None and memory.status == "active"


async def test_decay_batch_writes_what_decide_returns_and_ends(store: BaseMemoryStore) -> None:
    ids = await insert(store, "a", "b", "c")
    seen: list[int] = []

    def decide(rows: list[lifecycle.DecayRow]) -> list[tuple[float, int, int]]:
        seen.extend(int(row[0]) for row in rows)
        return [(0.125, 0, int(row[0])) for row in rows]

    assert await lifecycle.decay_batch(store, 0, 2, decide) == ids[1]
    assert await lifecycle.decay_batch(store, ids[1], 2, decide) == ids[2]
    assert await lifecycle.decay_batch(store, ids[2], 2, decide) is None
    assert seen == ids
    assert {m.importance for m in (await store.get_many(ids)).values()} == {0.125}


async def test_shadow_verification_names_a_missing_row(store: BaseMemoryStore) -> None:
    first, second = await insert(store, "alpha", "beta")
    shadow = ShadowTables(store, "fts", fingerprint=None)
    assert not await shadow.exists()
    async with shadow.transaction() as writer:
        await writer.start("rebuild:fts", json.dumps({"cursor": 0}))
    assert await shadow.exists()
    async with shadow.transaction() as writer:
        await writer.write(first, ("alpha", ""))
        failure = await writer.first_failure()
    assert failure is not None and failure.startswith("1 rows failed")
    await insert(store, "gamma")  # logged by the change log's trigger
    upto, logged = await shadow.logged(10)
    assert upto > 0 and len(logged) == 1
    async with shadow.transaction() as writer:
        await writer.write(second, ("beta", ""))
        await writer.write(logged[0], ("gamma", ""))
        assert await writer.first_failure() is None
        assert await writer.swap("rebuild:fts") == 1
    assert not await shadow.exists()
    assert await store.meta_get("rebuild:fts") is None


async def test_a_held_shadow_file_is_reported_locked(tmp_path: Path) -> None:
    path = tmp_path / "shadow.graph-rebuild"
    holder, other = GraphShadowFile("a@x"), GraphShadowFile("a@x")
    await holder.open(path)
    try:
        await holder.create([], {"token": "t"})
        assert await holder.state() == {"token": "t"}
        with pytest.raises(ShadowLocked):  # on opening or on the first read
            await other.open(path)
            await other.state()
    finally:
        await other.close()
        await holder.close()


async def test_change_log_of_the_graph_starts_and_drops(store: BaseMemoryStore) -> None:
    table = "rebuild_log_graph"
    assert not await graph_shadow.change_log_exists(store, table)
    await graph_shadow.start_change_log(
        store, table, "content", checkpoint_key="rebuild:graph", checkpoint="{}"
    )
    assert await graph_shadow.change_log_exists(store, table)
    (memory_id,) = await insert(store, "logged")
    upto, ids = await graph_shadow.logged(store, table, 10)
    assert ids == [memory_id]
    await graph_shadow.forget_logged(store, table, upto, ids)
    assert (await graph_shadow.logged(store, table, 10))[1] == []
    await graph_shadow.drop_change_log_of(store, table, checkpoint_key="rebuild:graph")
    assert not await graph_shadow.change_log_exists(store, table)
    assert await store.meta_get("rebuild:graph") is None


async def test_backup_file_reports_its_owner_and_restores(
    store: BaseMemoryStore, tmp_path: Path
) -> None:
    await insert(store, "kept")
    backup = await store.backup_to(tmp_path / "copy.db")
    make_standalone(backup)
    assert not Path(f"{backup}-wal").exists()
    target = tmp_path / "restored.db"
    with BackupFile(backup) as source:
        facts = source.facts()
        assert (facts.status, facts.owner) == ("ok", "a@x")
        source.restore_into(target, save_to=None)
    assert target.stat().st_size > 0


def test_backup_file_refuses_what_is_not_a_database(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"not a database at all" * 100)
    with BackupFile(bogus) as source, pytest.raises(StorageError, match="not a readable"):
        source.facts()
