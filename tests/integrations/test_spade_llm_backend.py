"""SpadeMemoryBackend: spade_llm's MemoryBackend interface over a real spade_memory memory."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from spade_llm.memory import AgentBaseMemory, create_base_memory_tools
from spade_llm.memory.backends.base import MemoryBackend, MemoryEntry

from spade_memory.config import MemoryConfig
from spade_memory.errors import (
    ConfigError,
    InvalidAgentId,
    InvalidToolInput,
    StoreClosedError,
)
from spade_memory.integrations.spade_llm import SpadeMemoryBackend, SpadeMemoryEntry
from spade_memory.manager import MemoryManager

AGENT = "alice@localhost"
ROTATION = "The staging database password rotates every 30 days"
OTHERS = [
    "The cafeteria on the second floor closes at 3 pm",
    "Bob prefers answers in Chinese",
    "The nightly backup of the wiki runs at 2 am",
]


@pytest.fixture
async def backend() -> AsyncIterator[SpadeMemoryBackend]:
    opened = SpadeMemoryBackend(jid=AGENT, config=MemoryConfig(in_memory=True, embedder="hashing"))
    await opened.initialize()
    yield opened
    await opened.cleanup()


def entry(content: str = ROTATION, **fields: object) -> MemoryEntry:
    fields.setdefault("category", "fact")
    return MemoryEntry(agent_id=AGENT, content=content, **fields)  # type: ignore[arg-type]


async def test_spade_llm_tools_find_with_ours_what_their_default_backend_misses(
    tmp_path: Path,
) -> None:
    theirs = AgentBaseMemory(AGENT, memory_path=str(tmp_path / "theirs"))
    ours = AgentBaseMemory(
        AGENT,
        backend=SpadeMemoryBackend(
            jid=AGENT, config=MemoryConfig(root=tmp_path / "ours", embedder="hashing")
        ),
    )
    found: dict[str, str] = {}
    try:
        for name, memory in (("theirs", theirs), ("ours", ours)):
            store, search, _ = create_base_memory_tools(memory)
            for content in [*OTHERS, ROTATION]:
                said = await store.execute(category="fact", content=content)
                assert said == f"Stored fact memory: {content}"
            found[name] = await search.execute(query="database password rotation", limit=2)
    finally:
        await theirs.cleanup()
        await ours.cleanup()
    assert found["theirs"] == "No memories found for query: database password rotation"
    lines = found["ours"].splitlines()
    assert lines[0].startswith("Found ") and lines[1] == f"- [fact] {ROTATION}"
    assert (tmp_path / "ours").is_dir() and not (tmp_path / "spade_llm").exists()


async def test_is_a_spade_llm_memory_backend(backend: SpadeMemoryBackend) -> None:
    assert isinstance(backend, MemoryBackend)
    assert backend.jid == AGENT and "open" in repr(backend)


async def test_store_and_read_back_keep_every_field(backend: SpadeMemoryBackend) -> None:
    created = datetime(2025, 3, 1, 9, 30, 15, 123456)
    accessed = created + timedelta(days=2, microseconds=7)
    given = entry(
        context="ops handbook",
        confidence=0.8,
        id="mem-0001",
        created_at=created,
        last_accessed=accessed,
        access_count=3,
    )
    assert await backend.store_memory(given) == "mem-0001"
    (back,) = await backend.get_memories_by_category(AGENT, "fact")
    assert isinstance(back, MemoryEntry) and isinstance(back, SpadeMemoryEntry)
    for name in (
        "agent_id",
        "category",
        "content",
        "context",
        "confidence",
        "id",
        "created_at",
        "last_accessed",
        "access_count",
    ):
        assert getattr(back, name) == getattr(given, name), name
    memory = await backend.manager.get(back.memory_id)
    assert memory.uid == "mem-0001" and memory.created_at == created.timestamp()
    assert (back.importance, back.status, back.metadata) == (0.5, "active", {})


async def test_our_extra_fields_round_trip(backend: SpadeMemoryBackend) -> None:
    rich = SpadeMemoryEntry(
        agent_id=AGENT,
        category="preference",
        content="Bob prefers answers in Chinese",
        importance=0.9,
        metadata={"source": "survey"},
    )
    uid = await backend.store_memory(rich)
    (back,) = await backend.get_memories_by_category(AGENT, "preference")
    assert back.id == uid == rich.id
    assert (back.importance, back.metadata) == (0.9, {"source": "survey"})
    assert back.created_at == rich.created_at


async def test_storing_an_existing_id_replaces_it(backend: SpadeMemoryBackend) -> None:
    first = entry(id="same", context="old")
    await backend.store_memory(first)
    await backend.store_memory(
        dataclasses.replace(first, content="The password rotates weekly", confidence=0.4)
    )
    (back,) = await backend.get_recent_memories(AGENT)
    assert (back.id, back.content, back.confidence) == ("same", "The password rotates weekly", 0.4)
    assert back.created_at == first.created_at
    assert (await backend.get_memory_stats(AGENT))["total_memories"] == 1


async def test_a_copy_under_a_new_id_reinforces_the_memory_and_returns_its_id(
    backend: SpadeMemoryBackend,
) -> None:
    assert await backend.store_memory(entry(id="one")) == "one"
    assert await backend.store_memory(entry(id="two")) == "one"  # the same content
    (held,) = await backend.get_recent_memories(AGENT)
    assert held.id == "one" and held.access_count == 1
    assert await backend.delete_memory("one") is True
    assert (await backend.get_memory_stats(AGENT))["total_memories"] == 0


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"category": "opinion"}, "category must be one of fact, pattern"),
        ({"confidence": 1.5}, "confidence"),
        ({"content": "   "}, "content"),
        ({"id": "x" * 65}, "1 to 64 characters"),
        ({"agent_id": "bob@localhost"}, "not of 'bob@localhost'"),
        ({"created_at": "yesterday"}, "created_at must be a datetime"),
    ],
)
async def test_bad_entries_are_refused_and_write_nothing(
    backend: SpadeMemoryBackend, fields: dict[str, object], complaint: str
) -> None:
    bad = entry()
    for name, value in fields.items():
        setattr(bad, name, value)
    with pytest.raises(InvalidToolInput, match=complaint):
        await backend.store_memory(bad)
    assert (await backend.get_memory_stats(AGENT))["total_memories"] == 0


async def test_search_ranks_by_relevance_and_counts_each_access_once(
    backend: SpadeMemoryBackend,
) -> None:
    memory = AgentBaseMemory(AGENT, backend=backend)
    for content in [*OTHERS, ROTATION]:
        await memory.store_memory("fact", content)
    hits = await memory.search_memories("when does the database password rotate?", limit=3)
    assert hits[0].content == ROTATION and hits[0].score is not None
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    await backend.manager.flush()
    stored = await backend.manager.get(hits[0].memory_id)
    assert stored.access_count == 1
    await backend.update_access(hits[0].id)  # a later access does count
    assert (await backend.manager.get(hits[0].memory_id)).access_count == 2
    assert await backend.search_memories("bob@localhost", "password") == []
    assert await backend.search_memories(AGENT, "password", limit=0) == []


async def test_blank_search_gives_the_recent_memories(backend: SpadeMemoryBackend) -> None:
    for content in OTHERS:
        await backend.store_memory(entry(content))
    recent = await backend.search_memories(AGENT, "  ", limit=2)
    assert [e.content for e in recent] == [OTHERS[2], OTHERS[1]]


async def test_recent_follows_last_access(backend: SpadeMemoryBackend) -> None:
    uids = [await backend.store_memory(entry(content)) for content in OTHERS]
    await backend.update_access(uids[0])
    recent = await backend.get_recent_memories(AGENT, limit=3)
    assert [e.id for e in recent] == [uids[0], uids[2], uids[1]]
    assert recent[0].access_count == 1 and recent[0].last_accessed > recent[0].created_at
    assert await backend.get_recent_memories("bob@localhost") == []
    await backend.update_access("no-such-id")  # as spade_llm: nothing happens


async def test_category_listing(backend: SpadeMemoryBackend) -> None:
    await backend.store_memory(entry(OTHERS[0]))
    await backend.store_memory(entry(OTHERS[1], category="preference"))
    listed = await backend.get_memories_by_category(AGENT, "preference", limit=5)
    assert [e.content for e in listed] == [OTHERS[1]]
    assert await backend.get_memories_by_category(AGENT, "opinion") == []
    assert await backend.get_memories_by_category("bob@localhost", "fact") == []
    assert await backend.get_memories_by_category(AGENT, "fact", limit=0) == []


async def test_delete(backend: SpadeMemoryBackend) -> None:
    uid = await backend.store_memory(entry())
    assert await backend.delete_memory(uid) is True
    assert await backend.delete_memory(uid) is False
    assert await backend.search_memories(AGENT, "database password") == []


async def test_stats(backend: SpadeMemoryBackend) -> None:
    empty = await backend.get_memory_stats(AGENT)
    assert empty["total_memories"] == 0 and empty["oldest_memory"] is None
    first = entry(OTHERS[0], created_at=datetime(2024, 1, 2, 3, 4, 5))
    await backend.store_memory(first)
    await backend.store_memory(entry(OTHERS[1], category="preference"))
    stats = await backend.get_memory_stats(AGENT)
    assert stats["total_memories"] == 2
    assert stats["category_counts"] == {"fact": 1, "preference": 1}
    assert stats["oldest_memory"] == "2024-01-02T03:04:05"
    assert datetime.fromisoformat(stats["newest_memory"]) > datetime(2024, 1, 3)
    assert stats["in_memory"] is True
    assert (await backend.get_memory_stats("bob@localhost"))["total_memories"] == 0


async def test_in_memory_mode_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "never"
    owned = SpadeMemoryBackend(
        jid=AGENT, root=root, config=MemoryConfig(in_memory=True, embedder="hashing")
    )
    memory = AgentBaseMemory(AGENT, backend=owned)
    uid = await memory.store_memory("fact", ROTATION, context="ops")
    assert [e.id for e in await memory.search_memories("password rotation")] == [uid]
    assert len(await memory.get_memories_by_category("fact")) == 1
    assert len(await memory.get_recent_memories()) == 1
    assert (await memory.get_memory_stats())["total_memories"] == 1
    assert await memory.delete_memory(uid) is True
    await memory.store_memory("fact", OTHERS[0])
    await memory.cleanup()
    await owned.initialize()  # a new in-memory memory: empty
    assert (await owned.get_memory_stats(AGENT))["total_memories"] == 0
    await owned.cleanup()
    assert list(tmp_path.iterdir()) == []


async def test_owned_memory_opens_closes_and_persists(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path / "memory", embedder="hashing")
    owned = SpadeMemoryBackend(jid="Alice@LocalHost/laptop", config=config)
    assert owned.jid == AGENT and "closed" in repr(owned)
    with pytest.raises(StoreClosedError, match="call initialize"):
        _ = owned.manager
    uid = await owned.store_memory(entry())  # opens on first use, as spade_llm's backend
    manager = owned.manager
    await owned.cleanup()
    assert manager.closed
    await owned.cleanup()  # idempotent
    await owned.initialize()
    assert [e.id for e in await owned.get_recent_memories(AGENT)] == [uid]
    await owned.cleanup()
    assert any((tmp_path / "memory").glob("*_base_memory.db"))


async def test_a_given_manager_stays_open(tmp_path: Path) -> None:
    config = MemoryConfig(in_memory=True, embedder="hashing")
    async with await MemoryManager.open(AGENT, config) as manager:
        given = SpadeMemoryBackend(manager)
        memory = AgentBaseMemory(AGENT, backend=given)
        await memory.store_memory("fact", ROTATION)
        await memory.cleanup()
        assert not manager.closed
        assert [m.content for m in await manager.list()] == [ROTATION]
    with pytest.raises(StoreClosedError, match="was closed"):
        await given.initialize()


def test_construction_is_checked() -> None:
    with pytest.raises(ConfigError, match="give an open MemoryManager"):
        SpadeMemoryBackend()
    with pytest.raises(ConfigError, match="not both"):
        SpadeMemoryBackend(object(), jid=AGENT)  # type: ignore[arg-type]
    with pytest.raises(InvalidAgentId):
        SpadeMemoryBackend(jid="not a jid")


async def test_relevant_memories_for_a_long_conversation(backend: SpadeMemoryBackend) -> None:
    memory = AgentBaseMemory(AGENT, backend=backend)
    await memory.store_memory("fact", ROTATION)
    context = "database password rotation " + "and some more chatter " * 200
    assert len(context) > 2_000
    relevant = await memory.get_relevant_memories(context, limit=3)
    assert [e.content for e in relevant] == [ROTATION]
    assert [e.content for e in await memory.get_relevant_memories(None)] == [ROTATION]


async def test_a_time_at_the_edge_of_the_calendar_is_kept_and_read(
    backend: SpadeMemoryBackend,
) -> None:
    from datetime import timezone

    late = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-12)))
    early = datetime(1, 1, 1, tzinfo=UTC)
    await backend.store_memory(entry("Deploys happen on Fridays", last_accessed=late))
    await backend.store_memory(entry("The build server is jenkins-02", created_at=early))
    recent = await backend.get_recent_memories(AGENT, 10)  # a year 10000 broke every read
    assert sorted(e.content for e in recent) == [
        "Deploys happen on Fridays",
        "The build server is jenkins-02",
    ]
    assert len(await backend.search_memories(AGENT, "build server", 5)) >= 1


async def test_a_limit_given_as_text_is_read_as_spade_llm_reads_it(
    backend: SpadeMemoryBackend,
) -> None:
    await backend.store_memory(entry())
    assert len(await backend.get_memories_by_category(AGENT, "fact", "5")) == 1  # type: ignore[arg-type]
    assert len(await backend.search_memories(AGENT, "password", "5")) == 1  # type: ignore[arg-type]
    with pytest.raises(InvalidToolInput, match="limit must be a whole number"):
        await backend.get_recent_memories(AGENT, "many")  # type: ignore[arg-type]
