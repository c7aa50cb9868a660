"""Each point of spade_llm's ``MemoryBackend`` contract the backend meets: access
counts at once, ``db_path``, its content limit, one backend for several agents."""

from __future__ import annotations

from pathlib import Path

import pytest
from spade_llm.memory import AgentBaseMemory
from spade_llm.memory.backends.base import MemoryEntry

from spade_memory import MemoryConfig, MemoryManager
from spade_memory.errors import ConfigError, InvalidToolInput
from spade_memory.identity import AgentIdentity
from spade_memory.integrations.spade_llm import SpadeMemoryBackend

ALICE, BOB = "alice@localhost", "bob@localhost"
RAM = MemoryConfig(in_memory=True, embedder="hashing")


def entry(agent: str, content: str, **fields: object) -> MemoryEntry:
    fields.setdefault("category", "fact")
    return MemoryEntry(agent_id=agent, content=content, **fields)  # type: ignore[arg-type]


async def test_access_counts_show_right_after_a_search() -> None:
    backend = SpadeMemoryBackend(jid=ALICE, config=RAM)
    memory = AgentBaseMemory(ALICE, backend=backend)
    try:
        stored = await memory.store_memory("fact", "The harbour crane lifts forty tonnes")
        for expected in (1, 2):
            hits = await memory.search_memories("harbour crane", limit=5)
            assert [hit.id for hit in hits] == [stored]
            (listed,) = await backend.get_memories_by_category(ALICE, "fact")
            assert listed.access_count == expected  # no wait for the coalesced write
            assert (await backend.manager.get(listed.memory_id)).access_count == expected
        written = await backend.manager.engine.base.get_by_uid(stored)
        assert written is not None and written.access_count == 0  # the write waits
        await backend.manager.flush()
        (listed,) = await backend.get_memories_by_category(ALICE, "fact")
        assert listed.access_count == 2  # written once, counted once
    finally:
        await memory.cleanup()


async def test_update_access_is_counted_at_once_and_reorders_the_recent() -> None:
    backend = SpadeMemoryBackend(jid=ALICE, config=RAM)
    try:
        uids = [
            await backend.store_memory(entry(ALICE, f"note {n} on the tides")) for n in range(3)
        ]
        await backend.update_access(uids[0])
        await backend.update_access(uids[0])
        recent = await backend.get_recent_memories(ALICE, limit=2)
        assert [e.id for e in recent] == [uids[0], uids[2]]
        assert recent[0].access_count == 2
    finally:
        await backend.cleanup()


def test_db_path_says_where_the_memories_are(tmp_path: Path) -> None:
    one = SpadeMemoryBackend(jid=ALICE, root=tmp_path, config=MemoryConfig(embedder=None))
    assert one.db_path == tmp_path / AgentIdentity.of(ALICE).database_name
    assert SpadeMemoryBackend(any_agent=True, root=tmp_path).db_path == tmp_path
    given = tmp_path / "alice_localhost_base_memory.db"
    assert SpadeMemoryBackend(db_path=str(given)).db_path == given
    assert SpadeMemoryBackend(db_path=":memory:").db_path == ":memory:"
    assert SpadeMemoryBackend(jid=ALICE, config=RAM).db_path == ":memory:"
    assert not list(tmp_path.iterdir())  # nothing is made before the first use


@pytest.mark.parametrize(
    "where", [{"db_path": ""}, {"db_path": " "}, {"any_agent": True, "root": ""}]
)
def test_an_empty_folder_is_refused_not_taken_as_the_working_directory(
    where: dict[str, object],
) -> None:
    with pytest.raises(ConfigError, match="must name a folder"):
        SpadeMemoryBackend(**where)  # type: ignore[arg-type]


async def test_given_manager_db_path(fresh_memory: MemoryManager) -> None:
    assert SpadeMemoryBackend(fresh_memory).db_path == ":memory:"


async def test_content_limit_is_ten_thousand_characters_by_default(tmp_path: Path) -> None:
    backend = SpadeMemoryBackend(any_agent=True, root=tmp_path)
    try:
        long = "A" * 10_000
        uid = await backend.store_memory(entry(ALICE, long))
        (kept,) = await backend.get_memories_by_category(ALICE, "fact")
        assert kept.id == uid and kept.content == long
        with pytest.raises(InvalidToolInput, match="content"):
            await backend.store_memory(entry(ALICE, "A" * 10_001))
    finally:
        await backend.cleanup()
    rooted = SpadeMemoryBackend(jid=ALICE, root=tmp_path / "rooted")  # the README's example
    try:
        await rooted.store_memory(entry(ALICE, "A" * 10_000))
    finally:
        await rooted.cleanup()
    strict = SpadeMemoryBackend(jid=ALICE, config=MemoryConfig(in_memory=True, embedder=None))
    try:
        with pytest.raises(InvalidToolInput, match="content"):
            await strict.store_memory(entry(ALICE, "A" * 10_000))  # its config's 8,000
    finally:
        await strict.cleanup()


async def test_one_backend_serves_several_agents_each_in_its_own_store(tmp_path: Path) -> None:
    config = MemoryConfig(embedder=None)
    backend = SpadeMemoryBackend(any_agent=True, root=tmp_path, config=config)
    try:
        mine = await backend.store_memory(entry(ALICE, "Alice keeps the lighthouse keys"))
        theirs = await backend.store_memory(entry("Bob@LocalHost/phone", "Bob keeps the boat keys"))
        assert [e.content for e in await backend.search_memories(ALICE, "keys")] == [
            "Alice keeps the lighthouse keys"
        ]
        assert [e.content for e in await backend.get_recent_memories(BOB)] == [
            "Bob keeps the boat keys"
        ]
        assert (await backend.get_memory_stats(ALICE))["total_memories"] == 1
        assert await backend.get_recent_memories("not a jid") == []
        with pytest.raises(InvalidToolInput, match="JID"):
            await backend.store_memory(entry("not a jid", "lost"))
        await backend.update_access(theirs)
        assert (await backend.get_recent_memories(BOB))[0].access_count == 1
        assert await backend.delete_memory(mine) is True
        assert await backend.get_recent_memories(ALICE) == []
        assert await backend.delete_memory(mine) is False
        opened = [await backend.manager_of(ALICE), await backend.manager_of(BOB)]
    finally:
        await backend.cleanup()
    assert all(manager is not None and manager.closed for manager in opened)
    for jid in (ALICE, BOB):
        assert (tmp_path / AgentIdentity.of(jid).database_name).is_file()
    async with await MemoryManager.open(BOB, MemoryConfig(root=tmp_path, embedder=None)) as bob:
        assert [m.content for m in await bob.list()] == ["Bob keeps the boat keys"]


async def test_db_path_memory_is_in_ram() -> None:
    backend = SpadeMemoryBackend(db_path=":memory:")
    try:
        await backend.store_memory(entry(ALICE, "kept in RAM only"))
        manager = await backend.manager_of(ALICE)
        assert manager is not None and manager.config.in_memory
    finally:
        await backend.cleanup()


def test_one_kind_of_backend_at_a_time(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not both"):
        SpadeMemoryBackend(jid=ALICE, any_agent=True)
    with pytest.raises(ConfigError, match="not both"):
        SpadeMemoryBackend(any_agent=True, db_path=tmp_path)
    with pytest.raises(ConfigError, match="any_agent"):
        SpadeMemoryBackend()
    with pytest.raises(ConfigError, match="manager_of"):
        _ = SpadeMemoryBackend(any_agent=True).manager
