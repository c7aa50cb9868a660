"""The consistency check: every inconsistency made by hand is found, repaired, and
search then answers exactly as the healthy memory did."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from maint_support import FACTS, Opener, answers, fill

from spade_memory.config import MaintenanceConfig
from spade_memory.embedding.hashing import shared_hashing
from spade_memory.identity import AgentIdentity
from spade_memory.maintenance.consistency import ConsistencyChecker
from spade_memory.manager import MemoryManager

IDENTITY = AgentIdentity.of("alice@localhost")


def run_sql(root: Path, *statements: str) -> None:
    """Change the closed database behind the memory's back (foreign keys off)."""
    connection = sqlite3.connect(root / IDENTITY.database_name)
    try:
        for statement in statements:
            connection.execute(statement)
        connection.commit()
    finally:
        connection.close()


def ghost_vector() -> bytes:
    vector = shared_hashing().embed_documents(["a ghost that haunts the index"])[0]
    return np.asarray(vector, dtype=np.float32).tobytes()


DAMAGE: dict[str, tuple[tuple[str, ...], set[str]]] = {
    "row without keyword row": (
        ("DELETE FROM memories_fts WHERE rowid IN (2, 5)",),
        {"fts_missing"},
    ),
    "keyword row without memory": (
        (
            "INSERT INTO memories_fts (rowid, content_tokens, context_tokens) "
            "VALUES (9999, 'green tea lisbon offic', '')",
        ),
        {"fts_orphaned"},
    ),
    "keyword row of other text": (
        ("UPDATE memories_fts SET content_tokens = 'zebra' WHERE rowid = 3",),
        {"fts_stale"},
    ),
    "vector missing": (
        ("DELETE FROM embeddings WHERE memory_id = 4",),
        {"vectors_missing", "index_extra"},
    ),
    "vector of no memory": (
        (
            "INSERT INTO embeddings (memory_id, fingerprint, dim, vector, seq) "
            f"VALUES (9999, '{shared_hashing().fingerprint}', 256, "
            f"x'{ghost_vector().hex()}', 100000)",
        ),
        {"vectors_orphaned"},
    ),
    "vector cut short": (
        ("UPDATE embeddings SET vector = x'00112233' WHERE memory_id = 6",),
        {"vectors_malformed", "index_extra"},
    ),
    "vector of another embedder": (
        ("UPDATE embeddings SET fingerprint = 'another-embedder' WHERE memory_id = 7",),
        {"vectors_wrong_fingerprint", "index_extra"},
    ),
    "vector shorter than its embedder makes": (
        ("UPDATE embeddings SET dim = 128, vector = substr(vector, 1, 512) WHERE memory_id = 7",),
        {"vectors_wrong_dimension", "index_extra"},
    ),
    "graph rows of no memory": (
        (
            "INSERT INTO graph_nodes (key, type, value, created_at) "
            "VALUES ('ghost', 'thing', 'Ghost', 0)",
            "INSERT INTO graph_entries (memory_id, summary, relation_type, updated_at) "
            "VALUES (9999, 'Ghost of the Lisbon office', NULL, 0)",
            "INSERT INTO graph_entries_fts (rowid, summary) VALUES (9999, 'Ghost of the office')",
            "INSERT INTO graph_entry_nodes (memory_id, node_id) "
            "SELECT 9999, id FROM graph_nodes WHERE key = 'ghost'",
            "INSERT INTO memory_atoms (memory_id, position, text, key, type, importance, "
            "ttl_seconds, created_at, reinforced_at, expires_at) "
            "VALUES (9999, 0, 'Ghost', 'ghost', 'fact', 0.5, 1000, 0, 0, 1e12)",
            "INSERT INTO graph_edges (source_id, target_id, relation, weight, memory_id) "
            "SELECT a.id, b.id, 'related_to', 1.0, 9999 FROM graph_nodes AS a, graph_nodes AS b "
            "WHERE a.key = 'ghost' AND b.id != a.id LIMIT 1",
        ),
        {"graph_orphaned"},
    ),
    "graph missing": (
        tuple(
            f"DELETE FROM {table} WHERE {column} = 8"
            for table, column in (
                ("memory_atoms", "memory_id"),
                ("graph_edges", "memory_id"),
                ("graph_entry_nodes", "memory_id"),
                ("graph_embeddings", "memory_id"),
                ("graph_entries", "memory_id"),
                ("graph_entries_fts", "rowid"),
            )
        ),
        {"graph_missing"},
    ),
}


async def healthy(open_memory: Opener) -> list[list[tuple[str, float]]]:
    """Fill alice's memory, close it, and return what a fresh open answers."""
    memory = await open_memory()
    await fill(memory)
    await memory.aclose()
    memory = await open_memory()
    found = await answers(memory)
    await memory.aclose()
    return found


async def assert_repairs(memory: MemoryManager, expected: set[str]) -> None:
    dry = await memory.check(deep=True)
    assert expected <= set(dry.found), dry.found
    assert dry.fixed == {}
    repaired = await memory.check(repair=True, deep=True)
    assert repaired.remaining == 0, repaired.to_dict()
    await memory.flush()  # vectors handed to the embedder
    after = await memory.check(deep=True)
    assert after.clean, after.to_dict()


# Made while the memory is open, behind its back: on open, the background
# embedder would mend them before the check could see them.
LIVE = {"vector missing", "vector of another embedder"}


@pytest.mark.parametrize("case", sorted(DAMAGE))
async def test_damage_is_found_and_repaired(open_memory: Opener, root: Path, case: str) -> None:
    reference = await healthy(open_memory)
    statements, expected = DAMAGE[case]
    if case not in LIVE:
        run_sql(root, *statements)
    memory = await open_memory()
    if case in LIVE:
        await memory.flush()
        async with memory.base_store.transaction() as db:
            for statement in statements:
                await db.execute(statement)
    await assert_repairs(memory, expected)
    assert await answers(memory) == reference


async def test_a_memory_row_deleted_by_hand_leaves_no_trace(
    open_memory: Opener, root: Path, tmp_path: Path
) -> None:
    await healthy(open_memory)
    twin = tmp_path / "twin"
    shutil.copytree(root, twin)  # closed files: a copy is a faithful twin
    reference_memory = await open_memory(root=twin)
    await reference_memory.forget(9)
    reference = await answers(reference_memory)
    run_sql(root, "DELETE FROM memories WHERE id = 9")
    memory = await open_memory()
    await assert_repairs(memory, {"fts_orphaned", "vectors_orphaned", "graph_orphaned"})
    assert await answers(memory) == reference


async def test_truncated_snapshot_is_rebuilt_on_open(open_memory: Opener, root: Path) -> None:
    reference = await healthy(open_memory)
    snapshot = root / IDENTITY.snapshot_name
    data = snapshot.read_bytes()
    snapshot.write_bytes(data[: len(data) // 2])
    memory = await open_memory()
    assert (await memory.check(deep=True)).clean
    assert await answers(memory) == reference
    assert any(p.name.startswith(snapshot.name + ".corrupt") for p in root.iterdir())


async def test_stale_snapshot_claiming_to_be_current_is_repaired(
    open_memory: Opener, root: Path
) -> None:
    reference = await healthy(open_memory)
    database = root / IDENTITY.database_name
    connection = sqlite3.connect(database)
    good = connection.execute("SELECT memory_id, vector FROM embeddings").fetchall()
    wrong = shared_hashing().embed_documents([f"unrelated text {i}" for i in range(len(good))])
    pairs = zip(wrong, good, strict=True)
    connection.executemany(
        "UPDATE embeddings SET vector = ? WHERE memory_id = ?",
        [(np.asarray(vector, dtype=np.float32).tobytes(), row[0]) for vector, row in pairs],
    )
    connection.commit()
    connection.close()
    (root / IDENTITY.snapshot_name).unlink()
    memory = await open_memory()  # builds FAISS from the wrong vectors, snapshots it on close
    await memory.aclose()
    connection = sqlite3.connect(database)
    connection.executemany(
        "UPDATE embeddings SET vector = ? WHERE memory_id = ?", [(v, i) for i, v in good]
    )
    connection.commit()
    connection.close()
    memory = await open_memory()
    await assert_repairs(memory, {"index_stale"})
    assert await answers(memory) == reference
    await memory.aclose()
    memory = await open_memory()  # the repaired index was snapshotted, not the stale one
    assert await answers(memory) == reference


async def test_faiss_ids_drifting_from_sqlite_are_fixed(open_memory: Opener) -> None:
    reference = await healthy(open_memory)
    memory = await open_memory()
    assert memory.indexer is not None
    memory.indexer.index.remove([3])
    memory.indexer.index.add(np.asarray([4242]), shared_hashing().embed_documents(["ghost"]))
    report = await memory.check()
    assert report.samples["index_missing"] == [3]
    assert report.samples["index_extra"] == [4242]
    await assert_repairs(memory, set())
    assert sorted(memory.indexer.index.ids().tolist()) == list(range(1, len(FACTS) + 1))
    assert await answers(memory) == reference


async def test_check_on_open_runs_in_the_background_and_repairs(
    open_memory: Opener, root: Path
) -> None:
    reference = await healthy(open_memory)
    run_sql(root, "DELETE FROM memories_fts WHERE rowid IN (1, 2)")
    memory = await open_memory(maintenance=MaintenanceConfig(check_on_open=True))
    # Usable at once: a store does not wait for the check.
    stored = await memory.store("Gina collects vintage maps")
    status = await memory.maintenance.wait()
    assert status.state == "done" and status.job == "check"
    assert status.report is not None
    assert status.report.found["fts_missing"] == 2 == status.report.fixed["fts_missing"]
    assert memory.maintenance_status is status
    await memory.forget(stored.id)
    assert await answers(memory) == reference


async def test_status_moves_through_checking_and_repairing(open_memory: Opener, root: Path) -> None:
    await healthy(open_memory)
    run_sql(root, "DELETE FROM memories_fts WHERE rowid = 1")
    memory = await open_memory()
    assert memory.maintenance_status.state == "idle"
    seen: list[tuple[str, int, int]] = []

    def progress(done: int, total: int) -> None:
        status = memory.maintenance_status
        seen.append((status.state, done, total))

    await memory.maintenance.check(repair=True, progress=progress)
    assert seen[0] == ("checking", 0, 4)
    assert seen[-1][1:] == (4, 4)
    assert {state for state, _, _ in seen} <= {"checking", "repairing"}
    assert "repairing" in {state for state, _, _ in seen}
    final = memory.maintenance_status
    assert (final.state, final.done, final.total) == ("done", 4, 4)


async def test_a_failing_check_is_reported_and_the_memory_stays_usable(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await open_memory()
    await fill(memory, FACTS[:3])

    async def broken(*args: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(ConsistencyChecker, "_graph", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        await memory.check()
    status = memory.maintenance_status
    assert status.state == "failed" and status.error == "disk on fire"
    assert (await memory.search("green tea"))[0].memory.content == FACTS[0]


async def test_repair_alongside_writes_leaves_a_consistent_memory(
    open_memory: Opener, root: Path
) -> None:
    await healthy(open_memory)
    run_sql(root, "DELETE FROM memories_fts", "DELETE FROM embeddings WHERE memory_id < 6")
    memory = await open_memory()
    writes = [memory.store(f"Extra fact number {n} about harbours") for n in range(20)]
    results = await asyncio.gather(memory.check(repair=True), *writes)
    assert results[0].found["fts_missing"] == len(FACTS)  # not the memories being stored
    assert results[0].remaining == 0
    await memory.flush()
    assert (await memory.check(deep=True)).clean
    found = await memory.search("harbours", limit=50)
    assert sum("harbours" in r.memory.content for r in found) == 20
