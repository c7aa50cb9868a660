"""The graph tables: written and removed with their memory, trigram search, migration."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from factories import UNDO_SCOPES

from spade_memory.config import MemoryConfig, StorageConfig
from spade_memory.errors import StorageError
from spade_memory.manager import MemoryManager
from spade_memory.storage.base import BaseMemoryStore, IndexedText, NewMemory
from spade_memory.storage.graph_store import GraphStore
from spade_memory.storage.schema import MIGRATIONS
from spade_memory.text.graph import Entity, MemoryGraph


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[MemoryManager]:
    config = MemoryConfig(root=tmp_path, embedder="hashing")
    async with await MemoryManager.open("g@localhost", config) as opened:
        await opened.maintenance.wait()  # the check on open, before writing
        yield opened


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return list(db.execute(sql))


def db_path(memory: MemoryManager) -> Path:
    assert memory.root is not None
    return memory.root / memory.identity.database_name


async def test_a_memory_and_its_graph_are_written_together(tmp_path: Path) -> None:
    storage = StorageConfig(derive_in_background=False)  # derived before the acknowledgement
    config = MemoryConfig(root=tmp_path, embedder="hashing", storage=storage)
    async with await MemoryManager.open("g@localhost", config) as memory:
        stored = await memory.store("Bob and Alice are on the payments team.")
        assert await memory.base_store.count_pending_derivations() == 0
        path = db_path(memory)
        _graph_of_the_payments_team(path, stored.id)


async def test_a_memory_and_its_graph_are_there_after_a_flush(memory: MemoryManager) -> None:
    stored = await memory.store("Bob and Alice are on the payments team.")
    await memory.flush()  # derived right after the store
    _graph_of_the_payments_team(db_path(memory), stored.id)


def _graph_of_the_payments_team(path: Path, stored_id: int) -> None:
    nodes = {r[0] for r in rows(path, "SELECT key FROM graph_nodes")}
    assert nodes == {"bob", "alice", "payments team"}
    edges = rows(path, "SELECT relation, memory_id FROM graph_edges")
    assert ("works_with", stored_id) in edges
    entry = rows(path, "SELECT memory_id, relation_type FROM graph_entries")
    assert entry == [(stored_id, "works_with")]
    assert len(rows(path, "SELECT * FROM graph_entry_nodes")) == 3
    assert len(rows(path, "SELECT * FROM memory_atoms")) == 1


async def test_a_failed_insert_leaves_neither_memory_nor_graph(tmp_path: Path) -> None:
    store = await BaseMemoryStore.open(
        tmp_path / "m.db", agent="a@x", storage=StorageConfig(synchronous="NORMAL")
    )
    try:
        graph = MemoryGraph(entities=(Entity("alice", "name", "Alice"),), summary="Alice")
        new = NewMemory(
            uid="same", category="fact", content="Alice", context=None,
            confidence=1.0, importance=0.5, created_at=1.0,
        )  # fmt: skip
        await store.insert(new, IndexedText("alice"), graph=graph)
        with pytest.raises(StorageError):  # the uid repeats: the whole batch is refused
            await store.insert_many(
                [(new, IndexedText("alice"))] * 1 + [(new, IndexedText("alice"))],
                graphs=[graph, graph],
            )
        assert await GraphStore(store).entry_count() == 1
        assert await store.count() == 1
    finally:
        await store.aclose()


async def test_forgetting_removes_edges_entries_and_orphan_nodes(memory: MemoryManager) -> None:
    first = await memory.store("Bob and Alice are on the payments team.")
    await memory.store("Bob likes espresso.")
    await memory.flush()  # graph rows are derived right after the store
    path = db_path(memory)
    await memory.forget(first.id)
    assert {r[0] for r in rows(path, "SELECT key FROM graph_nodes")} == {"bob", "espresso"}
    assert rows(path, f"SELECT * FROM graph_edges WHERE memory_id = {first.id}") == []
    assert rows(path, f"SELECT * FROM graph_entries WHERE memory_id = {first.id}") == []
    assert rows(path, f"SELECT * FROM memory_atoms WHERE memory_id = {first.id}") == []
    assert rows(path, f"SELECT rowid FROM graph_entries_fts WHERE rowid = {first.id}") == []


async def test_updating_content_replaces_the_graph(memory: MemoryManager) -> None:
    stored = await memory.store("Alice works at Acme.")
    await memory.update(stored.id, content="Alice works at Globex.")
    path = db_path(memory)
    assert {r[0] for r in rows(path, "SELECT key FROM graph_nodes")} == {"alice", "globex"}
    await memory.update(stored.id, importance=0.9)  # no new content: graph untouched
    assert {r[0] for r in rows(path, "SELECT key FROM graph_nodes")} == {"alice", "globex"}


async def test_one_entity_is_one_node_however_written(memory: MemoryManager) -> None:
    await memory.store("ALICE likes tea.")
    await memory.store("Ａｌｉｃｅ likes coffee.")
    await memory.store("Alice's car is red.")
    await memory.flush()  # graph rows are derived right after the store
    keys = [r[0] for r in rows(db_path(memory), "SELECT key FROM graph_nodes")]
    assert keys.count("alice") == 1


async def test_trigram_search_and_short_query_fallback(memory: MemoryManager) -> None:
    await memory.store("Zhang Wei met Priyanka in Reykjavik.")
    await memory.store("张伟住在北京。")
    await memory.flush()  # graph rows are derived right after the store
    graph = GraphStore(memory.base_store)
    count, hits = await graph.search_entries("reykjav", limit=5)
    assert count == 1 and len(hits) == 1
    assert await graph.search_entries("re", limit=5) == (0, [])  # too short for trigrams
    count, ids = await graph.like_entries("北京", limit=5)
    assert count == 1 and len(ids) == 1
    count, ids = await graph.like_entries("100%_", limit=5)  # wildcards are literal
    assert (count, ids) == (0, [])


async def test_a_version_1_database_migrates_and_gets_its_graph(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None)
    async with await MemoryManager.open("old@localhost", config) as memory:
        await memory.maintenance.wait()  # the check on open, before writing
        stored = await memory.store("Alice works at Acme.")
        path = db_path(memory)
    with sqlite3.connect(path) as db:  # wind the file back to schema version 1
        for statement in (
            *UNDO_SCOPES,
            "DROP INDEX memories_by_previous",
            "DROP INDEX memories_by_conversation",
            "ALTER TABLE memories DROP COLUMN previous_id",
            "DROP TABLE graph_entries_fts",
            "DROP TABLE graph_embeddings",
            "DROP TABLE graph_entry_nodes",
            "DROP TABLE graph_entries",
            "DROP TABLE graph_edges",
            "DROP TABLE graph_nodes",
            "DROP TABLE memory_atoms",
            "DELETE FROM meta WHERE key = 'graph_version'",
            "PRAGMA user_version = 1",
        ):
            db.execute(statement)
    async with await MemoryManager.open("old@localhost", config) as memory:
        await memory.maintenance.wait()  # the check on open, before writing
        assert rows(path, "PRAGMA user_version")[0][0] == len(MIGRATIONS)
        assert list((tmp_path / "backup").glob("*.v1.*.db"))
        found = await memory.search("who does alice work for?", explain=True)
        assert found[0].memory.id == stored.id
        assert found[0].explanation is not None and "graph" in found[0].explanation.routes
        assert [a.text for a in await memory.live_atoms(stored.id)] == ["Alice works at Acme."]


async def test_nodes_count_the_entries_that_name_them(memory: MemoryManager) -> None:
    first = await memory.store("Bob and Alice are on the payments team.")
    await memory.store("Bob likes espresso.")
    await memory.flush()  # graph rows are derived right after the store
    graph = GraphStore(memory.base_store)
    counts = {n.key: n.entries for n in await graph.nodes_by_keys(["bob", "alice"])}
    assert counts == {"bob": 2, "alice": 1}
    await memory.forget(first.id)
    counts = {n.key: n.entries for n in await graph.nodes_by_keys(["bob", "alice"])}
    assert counts == {"bob": 1}  # alice is gone with her only memory
    await graph.recount_nodes()
    assert {n.key: n.entries for n in await graph.nodes_by_keys(["bob"])} == {"bob": 1}


async def test_neighbours_follow_the_newest_edges_and_only_typed_ones_from_hubs(
    memory: MemoryManager,
) -> None:
    await memory.store("Alice works with Bob.")
    for name in ("Carol", "Dave", "Erin"):
        await memory.store(f"Alice and {name} met in Lisbon.")
    await memory.flush()  # graph rows are derived right after the store
    graph = GraphStore(memory.base_store)
    ids = {n.key: n.id for n in await graph.nodes_by_keys(["alice", "bob", "carol", "erin"])}
    everyone = {row[1].id for row in await graph.neighbour_hits([ids["alice"]])}
    assert {ids["bob"], ids["carol"], ids["erin"]} <= everyone
    # the two newest edges each way: the oldest links (Bob, Carol) are left out
    newest = await graph.neighbour_hits([ids["alice"]], per_node=2)
    assert ids["erin"] in {row[1].id for row in newest}
    assert ids["bob"] not in {row[1].id for row in newest}
    typed = await graph.neighbour_hits([ids["alice"]], typed_only={ids["alice"]})
    assert [(row[1].id, row[2]) for row in typed] == [(ids["bob"], "works_with")]
    counts = {row[1].id: row[1].entries for row in await graph.neighbour_hits([ids["alice"]])}
    assert counts[ids["bob"]] == 1 and counts[ids["erin"]] == 1  # entries naming each


async def test_edges_of_a_node_are_read_from_the_index_newest_first(
    memory: MemoryManager,
) -> None:
    await memory.store("Alice works with Bob.")
    plan = await memory.base_store.fetchall(
        "EXPLAIN QUERY PLAN SELECT target_id FROM graph_edges "
        "WHERE source_id = ? AND relation != 'related_to' ORDER BY rowid DESC LIMIT 5",
        (1,),
    )
    details = " ".join(str(row[-1]) for row in plan)
    assert "graph_edges_typed_by_source" in details
    assert "TEMP B-TREE" not in details  # no sort of the node's edges
    plan = await memory.base_store.fetchall(
        "EXPLAIN QUERY PLAN SELECT source_id FROM graph_edges "
        "WHERE target_id = ? ORDER BY rowid DESC LIMIT 5",
        (1,),
    )
    details = " ".join(str(row[-1]) for row in plan)
    assert "graph_edges_by_target" in details and "TEMP B-TREE" not in details
