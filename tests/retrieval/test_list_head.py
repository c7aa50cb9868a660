"""A question asking for several things of a kind is searched towards the kind's name."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig, RetrievalTuning
from spade_memory.retrieval.intent import list_head

_SWIM = "Went swimming with the kids on Sunday"
_BLUE = "The colour blue is calming"
_DIRECTIONS = {
    "What activities does Melanie enjoy?": (1.0, 0.0, 0.0),
    "What does Melanie enjoy?": (1.0, 0.0, 0.0),
    "activities": (0.0, 1.0, 0.0),
    _SWIM: (0.1, 1.0, 0.0),
    _BLUE: (1.0, 0.0, 0.6),
}


class TableEmbedder:
    """Fixed vectors per text, and the texts embedded as queries."""

    dim = 3
    fingerprint = "table-list-v1"

    def __init__(self) -> None:
        self.queries: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        rows = np.array([_DIRECTIONS.get(text, (0.0, 0.0, 1.0)) for text in texts], np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        self.queries.append(text)
        return self.embed_documents([text])[0]


def _unit(row: tuple[float, ...]) -> NDArray[np.float64]:
    vector = np.array(row, np.float64)
    return vector / np.linalg.norm(vector)


@pytest.mark.parametrize(
    ("question", "head"),
    [
        ("What activities does Melanie partake in?", "activities"),
        ("What LGBTQ+ events has Caroline participated in?", "LGBTQ+ events"),
        ("Which cities has Jon visited?", "cities"),
        ("What kinds of books does Caroline have in her library?", "books"),
        ("In what ways is Caroline participating in the LGBTQ community?", "ways"),
        ("What musical artists/bands has Melanie seen?", "musical artists/bands"),
        ("what european countries has maria been to", "european countries"),
    ],
)
def test_the_kind_a_list_question_asks_for(question: str, head: str) -> None:
    assert list_head(question) == head


@pytest.mark.parametrize(
    "question",
    [
        "What book did Caroline recommend to Melanie?",  # one thing
        "What is Caroline's identity?",  # no kind before the verb
        "What does Melanie do to destress?",
        "Which song motivates Caroline to be courageous?",  # no auxiliary after it
        "What class is Melanie taking?",  # singular ending in s
        "Who supports Caroline when she has a negative experience?",
        "When did Melanie go camping in June?",
        "哪些城市张伟去过？",
        "",
    ],
)
def test_questions_about_one_thing_have_no_kind(question: str) -> None:
    assert list_head(question) is None


async def _search(
    root: Path, question: str, weight: float
) -> tuple[list[str], list[float], list[str]]:
    embedder = TableEmbedder()
    retrieval = RetrievalConfig(
        tuning=RetrievalTuning(list_head_weight=weight),
        neighbour_weight=0.0,
        graph_route=False,
        rerank_weight=0.0,
    )
    config = MemoryConfig(root=root, embedder=embedder, retrieval=retrieval)
    async with await MemoryManager.open("lists@localhost", config) as memory:
        await memory.store_many([{"content": _BLUE}, {"content": _SWIM}])
        await memory.flush()
        embedder.queries.clear()
        results = await memory.search(question, limit=2, explain=True)
    scores = [r.explanation.vector_score or 0.0 for r in results if r.explanation is not None]
    return [r.memory.content for r in results], scores, embedder.queries


async def test_a_list_question_finds_the_instances_of_its_kind(tmp_path: Path) -> None:
    question = "What activities does Melanie enjoy?"
    plain, plain_scores, _ = await _search(tmp_path / "off", question, 0.0)
    assert plain == [_BLUE, _SWIM]  # closest to the question's own words
    moved, moved_scores, asked = await _search(tmp_path / "on", question, 1.0)
    assert moved == [_SWIM, _BLUE]
    assert sorted(asked) == sorted([question, "activities"])
    towards = _unit((1.0, 1.0, 0.0))
    assert moved_scores[0] == pytest.approx(float(towards @ _unit(_DIRECTIONS[_SWIM])), abs=1e-4)
    assert moved_scores[1] == pytest.approx(float(towards @ _unit(_DIRECTIONS[_BLUE])), abs=1e-4)
    assert plain_scores[0] == pytest.approx(
        float(_unit((1.0, 0.0, 0.0)) @ _unit(_DIRECTIONS[_BLUE])), abs=1e-4
    )


async def test_other_questions_are_embedded_once_as_asked(tmp_path: Path) -> None:
    question = "What does Melanie enjoy?"
    found, _, asked = await _search(tmp_path, question, 1.0)
    assert asked == [question]
    assert found == [_BLUE, _SWIM]
