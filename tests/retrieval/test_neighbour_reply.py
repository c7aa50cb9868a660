"""The reply to a question that matched, and questions lowered by the second stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig
from spade_memory.retrieval.rerank import LexicalSignals, rerank

_TURNS = [
    "Bob: What instrument does Ann play these days?",
    "The cello, since school.",
    "Bob: Lovely, see you at the concert then.",
]


async def _scores(tmp_path: Path, **overrides: float) -> dict[str, float]:
    retrieval = RetrievalConfig.from_knobs(
        {
            "importance_weight": 0.0,
            "recency_weight": 0.0,
            "mmr_lambda": 1.0,
            "neighbour_weight": 0.5,
            "graph_route": False,
            **overrides,
        }
    )
    config = MemoryConfig(root=tmp_path, embedder=None, retrieval=retrieval)
    async with await MemoryManager.open("reply@localhost", config) as memory:
        await memory.store_many(
            [{"content": text, "source_conversation": "talk-1"} for text in _TURNS]
        )
        results = await memory.search("Which instrument does Ann play?", limit=3)
    return {result.memory.content: result.score for result in results}


async def test_the_reply_to_a_matching_question_gets_the_reply_share(tmp_path: Path) -> None:
    question, reply = _TURNS[0], _TURNS[1]
    plain = await _scores(tmp_path / "plain", neighbour_reply_weight=0.5)
    assert plain[reply] == pytest.approx(0.5 * plain[question])
    more = await _scores(tmp_path / "more", neighbour_reply_weight=0.9)
    assert more[reply] == pytest.approx(0.9 * more[question])


async def test_the_question_penalty_lowers_a_memory_that_asks(tmp_path: Path) -> None:
    question = _TURNS[0]
    on = {"rerank_weight": 0.5}
    kept = await _scores(tmp_path / "kept", **on, rerank_question_penalty=0.0)
    lowered = await _scores(tmp_path / "lowered", **on, rerank_question_penalty=0.5)
    assert lowered[question] == pytest.approx(0.5 * kept[question])


def test_rerank_applies_the_question_penalty_to_askers_only() -> None:
    tells = LexicalSignals(1.0, 0.0, 0.0, 0.0, 0.5)
    asks = LexicalSignals(1.0, 0.0, 0.0, 0.0, 0.5, asks=True)
    scores = {1: 1.0, 2: 1.0}
    rerank(scores, {1: tells, 2: asks}, weight=0.5, question_penalty=0.4)
    assert scores[1] == pytest.approx(0.75)
    assert scores[2] == pytest.approx(0.75 * 0.6)
