"""Opening a new agent's memory: what is written, in which order, and what marks it.

A new agent's open writes its database and its registry entry, in that order, and
no interaction file (the first note creates it). The registry entry is what tells
a lost or emptied database from a new agent, so that protection holds for agents
that never wrote a note.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from spade_memory import MaintenanceConfig, MemoryConfig, MemoryManager
from spade_memory.errors import MemoryLost, StorageCorrupted, StorageError
from spade_memory.identity import AgentIdentity
from spade_memory.storage import registry as registry_module
from spade_memory.storage.agent_removal import agent_files, remove_agent, remove_unused_root
from spade_memory.storage.registry import REGISTRY_NAME, Registry

JID = "newcomer@localhost"
IDENTITY = AgentIdentity.of(JID)


def config_for(root: Path) -> MemoryConfig:
    return MemoryConfig(root=root, embedder=None)


async def test_a_new_agent_gets_a_database_then_a_registry_entry_and_no_notes_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[bool, set[str]]] = []
    real = registry_module.files.atomic_write_bytes

    def spy(path: Path, data: bytes, **options: Any) -> None:
        if path.name == REGISTRY_NAME:
            database = tmp_path / IDENTITY.database_name
            seen.append((database.is_file(), set(json.loads(data)["agents"])))
        real(path, data, **options)

    monkeypatch.setattr(registry_module.files, "atomic_write_bytes", spy)
    async with await MemoryManager.open(JID, config_for(tmp_path)):
        pass
    assert seen == [(True, {IDENTITY.stem})], "registered before its database existed"
    assert not (tmp_path / IDENTITY.interactions_name).exists()
    assert not (tmp_path / f".{IDENTITY.interactions_name}.lock").exists()
    async with await MemoryManager.open(JID, config_for(tmp_path)) as memory:
        await memory.add_note("conv", "the first note")
    assert seen == [(True, {IDENTITY.stem})], "a registered agent was written again"
    assert json.loads((tmp_path / IDENTITY.interactions_name).read_bytes())["agent"] == JID


async def test_a_new_agent_can_be_removed_again_but_not_while_open(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    async with await MemoryManager.open(JID, config_for(root)) as memory:
        await memory.store("soon gone")
        await memory.add_note("conv", "gone too")
        with pytest.raises(StorageError, match="is open"):
            remove_agent(root, IDENTITY)
        assert Registry(root).registered(IDENTITY)
    removed = remove_agent(root, IDENTITY)
    assert {path.name for path in removed} >= {
        IDENTITY.database_name,
        IDENTITY.interactions_name,
    }
    assert not Registry(root).registered(IDENTITY)
    assert not any(path.exists() for path in agent_files(root, IDENTITY))
    assert remove_unused_root(root) and not root.exists()


async def test_a_root_holding_another_agent_is_not_removed(tmp_path: Path) -> None:
    async with await MemoryManager.open("other@localhost", config_for(tmp_path)):
        pass
    async with await MemoryManager.open(JID, config_for(tmp_path)):
        pass
    remove_agent(tmp_path, IDENTITY)
    assert not remove_unused_root(tmp_path)
    assert Registry(tmp_path).agents() == {
        AgentIdentity.of("other@localhost").stem: "other@localhost"
    }
    async with await MemoryManager.open("other@localhost", config_for(tmp_path)) as other:
        assert other.recoveries == ()


@pytest.mark.parametrize("damage", ["deleted", "emptied"])
async def test_a_lost_database_of_an_agent_without_notes_is_refused(
    tmp_path: Path, damage: str
) -> None:
    async with await MemoryManager.open(JID, config_for(tmp_path)) as memory:
        await memory.store("a memory that must not silently vanish")
    database = tmp_path / IDENTITY.database_name
    assert not (tmp_path / IDENTITY.interactions_name).exists()
    for side in ("", "-wal", "-shm"):
        database.with_name(database.name + side).unlink(missing_ok=True)
    if damage == "emptied":
        database.write_bytes(b"")
    with pytest.raises(StorageCorrupted) as refused:
        await MemoryManager.open(JID, config_for(tmp_path))
    assert refused.value.path == database
    if damage == "emptied":  # the empty file is moved aside
        assert refused.value.quarantined_to is not None and refused.value.quarantined_to.exists()
    else:  # nothing to move aside: refused as lost
        assert isinstance(refused.value, MemoryLost) and refused.value.quarantined_to is None
    # Told once is not enough: it never starts empty unless asked to.
    with pytest.raises(MemoryLost):
        await MemoryManager.open(JID, config_for(tmp_path))
    async with await MemoryManager.open(JID, config_for(tmp_path), start_empty=True) as memory:
        assert await memory.base_store.count() == 0


async def test_a_database_created_but_not_registered_is_adopted(tmp_path: Path) -> None:
    # As a crash between creating the database and registering the agent leaves it.
    async with await MemoryManager.open(JID, config_for(tmp_path)) as memory:
        stored = await memory.store("kept across the lost registration")
    (tmp_path / REGISTRY_NAME).unlink()
    async with await MemoryManager.open(JID, config_for(tmp_path)) as memory:
        assert (await memory.get(stored.id)).content == stored.content
    assert Registry(tmp_path).agents() == {IDENTITY.stem: JID}


async def test_a_registry_entry_not_matching_its_stem_is_repaired_on_open(
    tmp_path: Path,
) -> None:
    document = {
        "format": registry_module.REGISTRY_FORMAT,
        "version": registry_module.REGISTRY_VERSION,
        "agents": {IDENTITY.stem: {"jid": "someone@else", "created_at": 1.0}},
    }
    (tmp_path / REGISTRY_NAME).write_text(json.dumps(document))
    # A hand-edited entry that does not match its stem is damage: quarantined, rebuilt.
    async with await MemoryManager.open(JID, config_for(tmp_path)):
        pass
    assert Registry(tmp_path).agents() == {IDENTITY.stem: JID}


async def test_a_conflicting_registration_touches_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    impostor = AgentIdentity(jid="impostor@localhost", stem=IDENTITY.stem)
    monkeypatch.setattr(Registry, "_check_identity", staticmethod(lambda identity: None))
    Registry(tmp_path).register(impostor)
    monkeypatch.setattr(registry_module, "_entry_is_valid", lambda stem, jid: True)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(StorageError, match="impostor@localhost"):
        await MemoryManager.open(JID, config_for(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == before


async def test_agents_opened_together_are_all_registered(tmp_path: Path) -> None:
    jids = [f"agent{number}@localhost" for number in range(24)]
    memories = await asyncio.gather(*(MemoryManager.open(j, config_for(tmp_path)) for j in jids))
    try:
        assert sorted(Registry(tmp_path).agents().values()) == sorted(jids)
    finally:
        for memory in memories:
            await memory.aclose()
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


async def test_a_database_this_open_created_is_not_checked_but_a_reopened_one_is(
    tmp_path: Path,
) -> None:
    config = MemoryConfig(
        root=tmp_path, embedder=None, maintenance=MaintenanceConfig(check_on_open=True)
    )
    async with await MemoryManager.open(JID, config) as memory:
        assert memory.base_store.created
        assert (await memory.maintenance.wait()).state == "idle"
        await memory.store("something to check next time")
    async with await MemoryManager.open(JID, config) as memory:
        assert not memory.base_store.created
        status = await memory.maintenance.wait()
        assert (status.state, status.job) == ("done", "check")


async def test_a_damaged_registry_is_rebuilt_from_the_databases_of_agents_without_notes(
    tmp_path: Path,
) -> None:
    noted = AgentIdentity.of("noted@localhost")
    async with await MemoryManager.open(JID, config_for(tmp_path)):
        pass
    async with await MemoryManager.open(noted.jid, config_for(tmp_path)) as memory:
        await memory.add_note("conv", "a note")
    stranger = AgentIdentity.of("stranger@localhost")
    # A database named for one agent but recorded for another proves neither.
    (tmp_path / stranger.database_name).write_bytes(
        (tmp_path / IDENTITY.database_name).read_bytes()
    )
    (tmp_path / REGISTRY_NAME).write_bytes(b"not json")
    assert Registry(tmp_path).agents() == {IDENTITY.stem: JID, noted.stem: noted.jid}
