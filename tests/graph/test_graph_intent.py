"""Query intent and route weights; blending the routes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.config import RetrievalConfig
from spade_memory.retrieval.intent import (
    blend_routes,
    graph_asked,
    query_intent,
    route_shares,
    route_weights,
)

DEFAULT = RetrievalConfig()


def weights(query: str, config: RetrievalConfig = DEFAULT) -> dict[str, float]:
    return route_weights(query_intent(query), config)


def test_a_plain_query_keeps_the_configured_weights() -> None:
    assert weights("pasta recipe") == pytest.approx({"document": 0.65, "graph": 0.35})


@pytest.mark.parametrize(
    ("query", "document", "graph"),
    [
        ("who does Alice work with?", 0.65, 0.55),  # relationship +0.2
        ("谁是张伟的同事？", 0.65, 0.55),
        ("when is the launch?", 0.65, 0.45),  # temporal +0.1
        ("什么时候发布？", 0.65, 0.45),
        ("what is a vector clock?", 0.80, 0.35),  # definition +0.15 document
        ("什么是向量时钟？", 0.80, 0.35),
        ("when did Alice meet her husband?", 0.65, 0.65),  # relationship and temporal
    ],
)
def test_intent_shifts_then_renormalises(query: str, document: float, graph: float) -> None:
    total = document + graph
    assert weights(query) == pytest.approx({"document": document / total, "graph": graph / total})


def test_the_relations_a_query_asks_about() -> None:
    assert query_intent("who does Alice work with?").relations >= {"works_with"}
    assert query_intent("Is Bob married?").relations == {"married_to"}
    assert query_intent("张伟的朋友是谁").relations >= {"friend_of"}
    assert not query_intent("Frankly, I disagree").relationship  # no "friend" inside words


def test_shifted_weights_are_clamped() -> None:
    config = RetrievalConfig(document_route_weight=0.1, graph_route_weight=0.9)
    assert weights("who knows when?", config) == pytest.approx(
        {"document": 0.1 / 1.1, "graph": 1 / 1.1}
    )
    config = RetrievalConfig(document_route_weight=0.0, graph_route_weight=0.0)
    assert weights("pasta", config) == {"document": 0.5, "graph": 0.5}


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.floats(0, 1), st.floats(0, 1))
def test_weights_always_sum_to_one(query: str, document: float, graph: float) -> None:
    config = RetrievalConfig(document_route_weight=document, graph_route_weight=graph)
    found = weights(query, config)
    assert sum(found.values()) == pytest.approx(1.0)
    assert all(0.0 <= value <= 1.0 for value in found.values())


def test_blending_rewards_memories_both_routes_return() -> None:
    split = {"document": 0.65, "graph": 0.35}
    blended = blend_routes({1: 1.0, 2: 0.5}, {2: 0.5, 3: 1.0}, split, both_bonus=0.08)
    assert blended[1] == pytest.approx(0.65)
    assert blended[2] == pytest.approx(0.65 * 0.5 + 0.35 * 0.5 + 0.08)
    assert blended[3] == pytest.approx(0.35)


def test_an_empty_route_gives_its_weight_to_the_other() -> None:
    split = {"document": 0.65, "graph": 0.35}
    assert route_shares({1: 0.7}, {2: 0.1}, split) == pytest.approx((0.65, 0.35))
    assert route_shares({1: 0.7}, {}, split) == (1.0, 0.0)
    assert route_shares({}, {}, split) == (0.0, 0.0)
    assert blend_routes({1: 0.7}, {}, split, both_bonus=0.08) == {1: pytest.approx(0.7)}
    assert blend_routes({}, {4: 0.4}, split, both_bonus=0.08) == {4: pytest.approx(0.4)}
    assert blend_routes({}, {}, split, both_bonus=0.08) == {}


@pytest.mark.parametrize(
    ("query", "relations"),
    [
        ("罗斌的下属在学什么？", {"manages", "reports_to"}),
        ("冯军的公司在招人吗？", {"works_at"}),
    ],
)
def test_chinese_words_for_a_subordinate_and_an_employer(query: str, relations: set[str]) -> None:
    intent = query_intent(query)
    assert intent.relationship and relations <= intent.relations


@pytest.mark.parametrize(
    ("query", "asked"),
    [
        ("What is Jon's favorite style of dance?", False),  # a definition, no link asked
        ("How do you make sourdough?", False),
        ("三角函数是什么？", False),
        ("What is the person Victor manages learning?", True),  # a definition about a link
        ("张伟的同事每天怎么上班？", True),
        ("Who does Alice work with?", True),
        ("When did Melanie go camping?", True),  # no definition
        ("pasta recipe", True),
    ],
)
def test_the_graph_route_sits_out_a_definition_question_with_no_relational_cue(
    query: str, asked: bool
) -> None:
    assert graph_asked(query_intent(query), DEFAULT) is asked
    off = RetrievalConfig.from_knobs({"graph_definition_gate": False})
    assert graph_asked(query_intent(query), off)
