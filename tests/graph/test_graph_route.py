"""The graph route and the dual-route retriever: expansion, fusion, timeouts, failures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from factories import fill

from spade_memory.config import MemoryConfig, RetrievalConfig
from spade_memory.errors import StorageError
from spade_memory.manager import MemoryManager
from spade_memory.retrieval.graph import GraphHits, GraphRetriever, hub_threshold

Opener = Callable[..., Awaitable[MemoryManager]]  # the open_memory fixture (conftest.py)

TEAM = [
    "Bob and Alice are on the payments team.",
    "Bob's team ships the billing service every Friday.",
    "Dave manages the payments team.",
    "The cafeteria serves pasta on Mondays.",
    "Carol moved to Berlin last year.",
] + [
    f"Note {i}: the weather report for the harbour, the trains and the ferries." for i in range(25)
]


def config(embedder: Any = "hashing", **retrieval: Any) -> MemoryConfig:
    return MemoryConfig(
        in_memory=True,
        embedder=embedder,
        retrieval=RetrievalConfig(cache_ttl_seconds=0, **retrieval),
    )


@pytest.fixture
async def team(open_memory: Opener) -> MemoryManager:
    memory = await open_memory("team@localhost", config())
    await fill(memory, TEAM)
    await memory.flush()
    return memory


async def contents(memory: MemoryManager, query: str, limit: int = 5) -> list[str]:
    return [r.memory.content for r in await memory.search(query, limit=limit)]


@pytest.mark.parametrize("graph", [True, False])
async def test_a_question_reaches_memories_through_a_shared_entity(
    graph: bool, open_memory: Opener
) -> None:
    # Keywords only, so that vectors do not return every memory of a small store.
    m = await open_memory("kw@localhost", config(None, graph_route=graph))
    await fill(m, TEAM)
    await m.flush()  # the graph route reads the graph derived right after the store
    found = await contents(m, "who does Alice work with?")
    assert TEAM[0] in found
    # About Bob's team: no word of it names Alice; only the graph links it.
    assert (TEAM[1] in found) is graph
    assert (TEAM[2] in found) is graph  # the payments team, one hop away


async def test_explain_shows_both_routes_and_the_weights_used(team: MemoryManager) -> None:
    results = await team.search("who does Alice work with?", limit=5, explain=True)
    by_content = {r.memory.content: r.explanation for r in results}
    both = by_content[TEAM[0]]
    assert both is not None and {"graph", "keyword"} <= set(both.routes)
    assert both.document_score is not None and both.graph_score is not None
    linked = by_content[TEAM[1]]
    assert linked is not None and "graph" in linked.routes
    assert linked.graph_score is not None and linked.keyword_score is None
    weights = both.weights
    # a relationship question: +0.2 for the graph, renormalised
    assert weights["route_graph"] == pytest.approx(0.55 / 1.2)
    assert weights["route_document"] == pytest.approx(0.65 / 1.2)
    assert weights["both_routes_bonus"] == 0.08


async def test_two_hops_reach_further_than_one(open_memory: Opener) -> None:
    texts = [
        "Alice works with Bob.",
        "Bob is a friend of Carol.",
        "Carol works at Heron Labs.",
    ] + [f"Filler {i} about rain and buses." for i in range(20)]
    for hops, reached in ((1, False), (2, True)):
        hop_config = config(None, graph_hops=hops)
        memory = await open_memory("hop@localhost", hop_config)
        await fill(memory, texts)
        await memory.flush()
        assert (texts[2] in await contents(memory, "Alice", limit=10)) is reached


async def test_chinese_relations_are_followed(open_memory: Opener) -> None:
    texts = ["张伟和李娜一起工作。", "李娜在腾讯上班。", "今天天气很好。"]
    memory = await open_memory("zh@localhost", config())
    await fill(memory, texts)
    await memory.flush()
    found = await contents(memory, "张伟的同事在哪里上班？")
    assert texts[1] in found


async def test_a_slow_graph_route_leaves_the_document_results(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    never = asyncio.Event()

    async def stuck(self: GraphRetriever, *args: object, **kwargs: object) -> GraphHits:
        await never.wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(GraphRetriever, "search", stuck)
    m = await open_memory("slow@localhost", config(route_timeout_seconds=0.2))
    await fill(m, TEAM)
    with caplog.at_level(logging.WARNING):
        results = await m.search("Alice payments", explain=True)
    assert results[0].memory.content == TEAM[0]
    assert all(r.explanation and r.explanation.graph_score is None for r in results)
    assert "graph route took longer" in caplog.text


async def test_a_failing_graph_route_leaves_the_document_results(
    team: MemoryManager, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(self: GraphRetriever, *args: object, **kwargs: object) -> GraphHits:
        raise RuntimeError("graph tables unreadable")

    monkeypatch.setattr(GraphRetriever, "search", broken)
    with caplog.at_level(logging.ERROR):
        results = await team.search("Alice payments")
    assert results[0].memory.content == TEAM[0]
    assert "graph route failed" in caplog.text


async def test_a_search_that_hangs_past_its_bound_is_stopped(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    never = asyncio.Event()

    async def hang(*args: object, **kwargs: object) -> dict[int, Any]:
        await never.wait()
        return {}

    m = await open_memory("hang@localhost", config(route_timeout_seconds=0.05))
    await m.store("Alice is on the payments team.")
    monkeypatch.setattr(m.base_store, "get_many_indexed", hang)
    with pytest.raises(StorageError, match=r"longer than 1\.1 s"):
        await m.search("Alice")


async def test_graph_entries_get_their_own_vectors(team: MemoryManager) -> None:
    indexer = team.indexer
    assert indexer is not None
    entries = await team.base_store.fetchall("SELECT count(*) FROM graph_entries")
    vectors = await team.base_store.fetchall("SELECT count(*) FROM graph_embeddings")
    assert entries[0][0] == vectors[0][0] > 0
    first = (await team.list(limit=100))[-1]
    await team.update(first.id, content="Alice and Erin are on the fraud team.")
    await team.flush()
    again = await team.base_store.fetchall(
        "SELECT count(*) FROM graph_embeddings WHERE memory_id = ?", (first.id,)
    )
    assert again[0][0] == 1
    hits = await team.search("Erin fraud team", limit=1)
    assert hits[0].memory.id == first.id


async def test_graph_vectors_survive_a_reopen(tmp_path: Any, open_memory: Opener) -> None:
    file_config = MemoryConfig(root=tmp_path, embedder="hashing")
    memory = await open_memory("keep@localhost", file_config)
    await fill(memory, TEAM)
    await memory.flush()
    await memory.aclose()
    memory = await open_memory("keep@localhost", file_config)
    found = await contents(memory, "who does Alice work with?")
    assert TEAM[1] in found


async def test_category_filters_apply_to_the_graph_route(open_memory: Opener) -> None:
    memory = await open_memory("cat@localhost", config())
    await memory.store("Bob and Alice are on the payments team.", category="fact")
    await memory.store("Bob prefers tea.", category="preference")
    found = await memory.search("who works with Alice?", category="fact", limit=10)
    assert {r.memory.category for r in found} == {"fact"}


def test_the_hub_size_is_a_share_of_the_memories_within_bounds() -> None:
    assert hub_threshold(1_000, 0.2) == 200
    assert hub_threshold(10, 0.2) == 20  # a small memory: nothing is common enough
    assert hub_threshold(0, 0.5) == 20
    assert hub_threshold(1_000_000, 0.2) == 1_000  # a hub however large the memory


async def test_a_relation_question_goes_on_from_the_topic_to_its_people(
    open_memory: Opener,
) -> None:
    """Person -> topic -> person: the team's other member is reached twice (through
    the team and through the person of the team), a memory about the team alone
    once; a question about something else does not follow the topic at all."""
    texts = [
        "Marta joined the payments team.",
        "Jonas leads the payments team.",
        "The payments team moved to the third floor.",
    ] + [f"Filler {i} about rain and buses." for i in range(20)]
    memory = await open_memory("relhops@localhost", config(None))
    await fill(memory, texts)
    await memory.flush()
    found = await memory.search("Who does Marta work with?", limit=5, explain=True)
    graph = {r.memory.content: r.explanation.graph_score for r in found if r.explanation}
    person, team = graph.get(texts[1]) or 0.0, graph.get(texts[2]) or 0.0
    assert person - team > 0.2 and team > 0  # one hop alone: about 0.7 and 0.64
    # a question about something else reaches the team (a typed relation), not its people
    other = await memory.search("What does Marta do on Fridays?", limit=5, explain=True)
    scores = {r.memory.content: r.explanation.graph_score for r in other if r.explanation}
    assert (scores.get(texts[1]) or 0.0) < person - 0.2
