"""Speaker nodes: chat lines written as "Name: text", and the graph route's use of them."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from factories import fill

from spade_memory.config import MemoryConfig, RetrievalConfig, RetrievalTuning
from spade_memory.errors import ConfigError
from spade_memory.manager import MemoryManager
from spade_memory.text.extraction import EntityExtractor, entry_summary
from spade_memory.text.speakers import SPEAKER_TYPE, speaker_entity, speaker_keys

Opener = Callable[..., Awaitable[MemoryManager]]  # the open_memory fixture (conftest.py)

X = EntityExtractor()


def speaker_of(text: str) -> str | None:
    found = speaker_entity(text, X.mentions(text))
    return None if found is None else found.key


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("Melanie: we went camping with the kids.", "speaker:melanie"),
        ("  Joanna Smith : thanks!", "speaker:joanna smith"),
        ("张伟：我们周末去爬山了。", "speaker:张伟"),
        ("Note: buy milk.", None),  # no name
        ("Hi Caroline: how are you?", None),  # the name does not open the text
        ("Melanie:", None),  # nothing said
        ("Melanie said: hi", None),  # no colon right after the name
        ("Melanie and Caroline went camping.", None),
    ],
)
def test_a_speaker_is_a_name_opening_the_text_before_a_colon(text: str, key: str | None) -> None:
    assert speaker_of(text) == key


def test_the_speaker_node_comes_beside_the_name_and_stays_out_of_the_entry_text() -> None:
    extraction = X.extract("Caroline: Wow, Melanie! The pottery looks great.")
    keys = [entity.key for entity in extraction.entities]
    assert keys == ["caroline", "melanie", "topic:pottery", "speaker:caroline"]
    assert extraction.entities[-1].type == SPEAKER_TYPE
    assert all("speaker" not in (r.source + r.target) for r in extraction.relations)
    assert entry_summary(extraction) == "Caroline; Melanie"  # the name once, as before


def test_a_query_may_name_speakers() -> None:
    keys = X.query_keys("What do Melanie's kids like?")
    assert {"melanie", "speaker:melanie"} <= set(keys)
    assert speaker_keys(["alice", "speaker:alice", ""]) == ["speaker:alice"]


def _chat() -> list[str]:
    # Two speakers name each other in about every line: each name alone is a hub.
    lines: list[str] = []
    for i in range(14):
        lines.append(f"Caroline: Melanie, the weather was nice on walk {i}.")
        lines.append(f"Melanie: Caroline, the trains were late on day {i}.")
    lines.append("Caroline: Melanie, I like pottery.")
    lines.append("Melanie: Yes, I like pottery, Caroline.")
    return lines


def config(**retrieval: Any) -> MemoryConfig:
    return MemoryConfig(
        in_memory=True,
        embedder="hashing",
        retrieval=RetrievalConfig.from_knobs({"cache_ttl_seconds": 0, **retrieval}),
    )


async def test_the_graph_route_prefers_what_the_named_speaker_said(open_memory: Opener) -> None:
    memory = await open_memory("chat@localhost", config())
    chat = _chat()
    await fill(memory, chat)
    await memory.flush()
    results = await memory.search("Does Melanie like pottery?", limit=5, explain=True)
    by_content = {r.memory.content: r.explanation for r in results}
    said, told = by_content[chat[-1]], by_content[chat[-2]]
    assert said is not None and "graph" in said.routes and said.graph_score is not None
    assert told is not None and told.graph_score is None  # Caroline said it
    # About Caroline instead: her line gets the graph score, Melanie's does not.
    results = await memory.search("Does Caroline like pottery?", limit=5, explain=True)
    by_content = {r.memory.content: r.explanation for r in results}
    assert by_content[chat[-2]] is not None and by_content[chat[-2]].graph_score is not None
    assert by_content[chat[-1]] is not None and by_content[chat[-1]].graph_score is None


@pytest.mark.parametrize("graph", [True, False])
async def test_what_the_person_said_ranks_above_what_was_said_to_them(
    graph: bool, open_memory: Opener
) -> None:
    memory = await open_memory(f"chat-{graph}@localhost", config(graph_route=graph))
    chat = _chat()
    await fill(memory, chat)
    await memory.flush()
    found = [r.memory.content for r in await memory.search("Does Melanie like pottery?", limit=5)]
    # Caroline says it too, to Melanie: first by its words alone.
    assert (found.index(chat[-1]) < found.index(chat[-2])) is graph


async def test_one_nearest_neighbour_search_serves_both_routes(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await open_memory("chat-once@localhost", config())
    chat = _chat()
    await fill(memory, chat)
    await memory.flush()
    indexer = memory.indexer
    assert indexer is not None
    depths: list[int] = []
    search = indexer.search

    async def counted(query: Any, k: int, **kwargs: Any) -> Any:
        depths.append(k)
        return await search(query, k, **kwargs)

    monkeypatch.setattr(indexer, "search", counted)
    results = await memory.search("Does Melanie like pottery?", limit=5, explain=True)
    assert len(depths) == 1 and depths[0] >= 100  # deep enough for the speaker step
    by_content = {r.memory.content: r.explanation for r in results}
    assert by_content[chat[-1]] is not None and by_content[chat[-1]].graph_score is not None


async def test_a_failed_speaker_step_leaves_the_graph_route_standing(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    memory = await open_memory("chat-fail@localhost", config())
    chat = _chat()
    await fill(memory, chat)
    await memory.flush()
    rows = await memory.base_store.fetchall("SELECT id FROM graph_nodes WHERE type = 'speaker'")
    speaker_ids = {row[0] for row in rows}
    graph = memory.engine.graph
    entry_nodes = graph.entry_nodes

    async def failing(memory_ids: Any, node_ids: Any) -> Any:
        if speaker_ids & set(node_ids):
            raise RuntimeError("the speakers' entries could not be read")
        return await entry_nodes(memory_ids, node_ids)

    monkeypatch.setattr(graph, "entry_nodes", failing)
    with caplog.at_level(logging.ERROR):
        results = await memory.search("Does Melanie like pottery?", limit=10)
    assert results
    messages = [record.getMessage() for record in caplog.records]
    assert any("leaving them out" in message for message in messages)
    assert not any("route failed" in message for message in messages), messages


async def test_a_speaker_score_of_zero_turns_the_preference_off(open_memory: Opener) -> None:
    memory = await open_memory("chat-off@localhost", config(graph_speaker_score=0.0))
    chat = _chat()
    await fill(memory, chat)
    await memory.flush()
    results = await memory.search("Does Melanie like pottery?", limit=5, explain=True)
    by_content = {r.memory.content: r.explanation for r in results}
    assert by_content[chat[-1]] is not None and by_content[chat[-1]].graph_score is None


def test_the_speaker_score_is_checked() -> None:
    with pytest.raises(ConfigError, match="graph_speaker_score"):
        RetrievalTuning(graph_speaker_score=1.5)


async def test_no_speaker_named_leaves_the_graph_route_as_it_was(open_memory: Opener) -> None:
    memory = await open_memory("chat2@localhost", config())
    await fill(memory, _chat())
    await memory.flush()
    results = await memory.search("pottery class", limit=5, explain=True)
    assert results
    assert all(r.explanation is not None and r.explanation.graph_score is None for r in results)


async def test_deleting_a_speakers_last_line_removes_the_speaker_node(
    open_memory: Opener,
) -> None:
    memory = await open_memory("chat3@localhost", config())
    kept = await memory.store("Alice and Bob met at the harbour.")
    said = await memory.store("Bob: the ferry was late again.")
    await memory.flush()  # graph rows are derived right after the store
    rows = await memory.base_store.fetchall("SELECT key FROM graph_nodes WHERE type = 'speaker'")
    assert [row[0] for row in rows] == ["speaker:bob"]
    await memory.forget(said.id)
    rows = await memory.base_store.fetchall("SELECT key FROM graph_nodes ORDER BY key")
    # the speaker and the topic (ferry) only the forgotten line named are gone
    assert [row[0] for row in rows] == ["alice", "bob", "topic:harbour"]
    assert kept.id != said.id


@pytest.mark.parametrize("gate", [True, False])
async def test_a_definition_question_is_the_document_routes_with_the_gate(
    gate: bool, open_memory: Opener
) -> None:
    memory = await open_memory(f"chat-def-{gate}@localhost", config(graph_definition_gate=gate))
    chat = _chat()
    await fill(memory, chat)
    await memory.flush()
    results = await memory.search("What is pottery to Melanie?", limit=5, explain=True)
    graphed = [r for r in results if r.explanation is not None and r.explanation.graph_score]
    assert bool(graphed) is not gate
    # a question with a relational cue keeps the graph route, definition or not
    results = await memory.search("What is Melanie's friend like?", limit=5, explain=True)
    assert any(r.explanation is not None and r.explanation.graph_score for r in results)
