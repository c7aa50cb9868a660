"""Entities and relations named for a memory when it was stored stay with it: a graph
rebuild, a repair of a missing graph and an update of its text extract them again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from factories import UNDO_GIVEN

from spade_memory.config import MaintenanceConfig, MemoryConfig, StorageConfig
from spade_memory.errors import InvalidToolInput
from spade_memory.manager import MemoryManager
from spade_memory.models import Scope, Viewer

JID = "alice@localhost"
SUPPLIES = {"source": "Acme Corp", "relation": "supplies", "target": "Alice"}


def config(root: Path, *, background: bool = True) -> MemoryConfig:
    return MemoryConfig(
        root=root,
        embedder=None,
        storage=StorageConfig(derive_in_background=background),
        maintenance=MaintenanceConfig(check_on_open=False),
    )


async def named(memory: MemoryManager, memory_id: int) -> tuple[set[str], set[str]]:
    around = await memory.neighbours(memory_id)
    return {node.value for node in around.nodes}, {edge[1] for edge in around.edges}


async def store_supplier(memory: MemoryManager) -> int:
    await memory.store("The Porto office opens at 9.")
    met = await memory.store(
        "Met the new supplier today", entities=["Acme Corp"], relations=[SUPPLIES]
    )
    await memory.flush()
    assert await named(memory, met.id) == ({"Acme Corp", "Alice", "supplier today"}, {"supplies"})
    return met.id


@pytest.mark.parametrize("background", [True, False])
async def test_a_graph_rebuild_keeps_what_was_named(tmp_path: Path, background: bool) -> None:
    async with await MemoryManager.open(JID, config(tmp_path, background=background)) as memory:
        met = await store_supplier(memory)
        assert await memory.rebuild_graph() == 2
        assert "Acme Corp" in (await named(memory, met))[0]
        assert (await named(memory, met))[1] == {"supplies"}
        hits = await memory.search("who supplies Alice?")
        assert [hit.memory.id for hit in hits][:1] == [met]


async def test_a_repaired_graph_and_an_updated_text_keep_what_was_named(tmp_path: Path) -> None:
    async with await MemoryManager.open(JID, config(tmp_path)) as memory:
        met = await store_supplier(memory)
        path = memory.base_store.path
    assert path is not None
    with sqlite3.connect(path) as db:  # the graph lost (a damaged index, say)
        db.execute("DELETE FROM graph_entry_nodes WHERE memory_id = ?", (met,))
        db.execute("DELETE FROM graph_edges WHERE memory_id = ?", (met,))
        db.execute("DELETE FROM graph_entries WHERE memory_id = ?", (met,))
        db.execute("DELETE FROM memory_atoms WHERE memory_id = ?", (met,))
    async with await MemoryManager.open(JID, config(tmp_path)) as memory:
        report = await memory.maintenance.check(repair=True)
        assert report.found.get("graph_missing") == 1
        assert await named(memory, met) == ({"Acme Corp", "Alice", "supplier today"}, {"supplies"})
        await memory.update(met, content="Met the new supplier this morning")
        await memory.flush()
        assert "Acme Corp" in (await named(memory, met))[0]
        await memory.forget(met)
        with sqlite3.connect(path) as db:
            assert db.execute("SELECT count(*) FROM memory_given").fetchone() == (0,)


async def test_an_older_database_keeps_what_is_named_for_memories_still_pending(
    tmp_path: Path,
) -> None:
    async with await MemoryManager.open(JID, config(tmp_path)) as memory:
        await memory._engine.deriver.aclose()  # its derivation stopped: the mark stays
        met = (await memory.store("Met the new supplier today", entities=["Acme Corp"])).id
        path = memory.base_store.path
    assert path is not None
    with sqlite3.connect(path) as db:
        db.executescript(";".join(UNDO_GIVEN) + ";")
    async with await MemoryManager.open(JID, config(tmp_path)) as memory:
        await memory.flush()
        assert await memory.rebuild_graph() == 1
        assert "Acme Corp" in (await named(memory, met))[0]


async def test_an_older_database_settles_claims_in_their_scopes_once_migrated(
    tmp_path: Path,
) -> None:
    # An older version superseded a claim by one of another scope (bob's Paris by
    # the agent's own Berlin), which reads as standing: the migration settles it by
    # bob's own newer Rome.
    async with await MemoryManager.open(JID, config(tmp_path)) as memory:
        bob = Scope.private("bob@localhost")
        paris = await memory.store("Carol lives in Paris.", scope=bob)
        berlin = await memory.store("Carol lives in Berlin.")
        await memory.store("Carol lives in Rome.", scope=bob)
        await memory.flush()
        (berlin_atom,) = await memory.atoms(berlin.id)
        path = memory.base_store.path
    assert path is not None
    with sqlite3.connect(path) as db:
        db.executescript(";".join(UNDO_GIVEN) + ";")
        db.execute(
            "UPDATE memory_atoms SET status = 'superseded', superseded_by = ? WHERE memory_id = ?",
            (berlin_atom.id, paris.id),
        )
    async with await MemoryManager.open(JID, config(tmp_path)) as memory:
        found = await memory.recall("where does Carol live", viewer=Viewer(jid="bob@localhost"))
        mine = sorted(r.memory.content for r in found if r.memory.scope.visibility == "private")
        assert mine == ["Carol lives in Rome."]


@pytest.mark.parametrize("background", [True, False])
async def test_what_was_named_travels_with_an_export(tmp_path: Path, background: bool) -> None:
    async with await MemoryManager.open(JID, config(tmp_path / "a", background=background)) as a:
        met = await store_supplier(a)
        data = await a.export()
    (exported,) = [m for m in data["memories"] if m["id"] == met]
    assert exported["entities"] == ["Acme Corp"] and exported["relations"] == [SUPPLIES]
    assert all("entities" not in m for m in data["memories"] if m["id"] != met)
    other = "bob@localhost"
    async with await MemoryManager.open(other, config(tmp_path / "b", background=background)) as b:
        assert await b.import_data(data) == (2, 0)
        await b.flush()
        (moved,) = [m for m in await b.list() if m.uid == exported["uid"]]
        assert await named(b, moved.id) == ({"Acme Corp", "Alice", "supplier today"}, {"supplies"})
        assert await b.rebuild_graph() == 2  # and it stays with the memory there
        assert "Acme Corp" in (await named(b, moved.id))[0]
        assert (await b.export())["memories"][-1]["relations"] == [SUPPLIES]


async def test_bad_named_relations_in_an_export_are_refused(tmp_path: Path) -> None:
    async with await MemoryManager.open(JID, config(tmp_path)) as memory:
        bad = {
            "format": "spade_memory.export",
            "version": 2,
            "memories": [{"content": "Met the supplier", "relations": [{"source": "A"}]}],
        }
        with pytest.raises(InvalidToolInput, match="memory 1 of the export is invalid"):
            await memory.import_data(bad)
        assert await memory.list() == []
