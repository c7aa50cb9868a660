"""The lexical second stage: its signals, its blend, and what it does to a search."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig, RetrievalTuning
from spade_memory.errors import ConfigError
from spade_memory.retrieval.rerank import (
    LexicalSignals,
    coverage,
    idf,
    lexical_signals,
    phrase_match,
    proximity,
    rerank,
)


def test_idf_favours_rare_terms_and_stays_positive() -> None:
    assert idf(1, 1000) > idf(100, 1000) > idf(999, 1000) > 0
    assert idf(5, 0) > 0  # a stale count never gives a negative weight


def test_coverage_is_weighted_by_idf() -> None:
    weights = {"lisbon": 3.0, "sister": 1.0}
    assert coverage(["lisbon", "sister"], {"lisbon"}, weights) == pytest.approx(0.75)
    assert coverage(["lisbon", "sister"], {"sister"}, weights) == pytest.approx(0.25)
    # A term no memory holds (no weight) counts for nothing.
    assert coverage(["lisbon", "absent"], {"lisbon"}, {"lisbon": 3.0}) == 1.0
    assert coverage(["absent"], {"absent"}, {}) == 0.0


def test_proximity_measures_the_shortest_window() -> None:
    assert proximity({"red", "bike"}, ["red", "bike", "shop"]) == 1.0
    assert proximity({"red", "bike"}, ["red", "old", "old", "bike"]) == pytest.approx(1 / 3)
    # The shortest window wins, wherever it is.
    tokens = ["red", "x", "x", "x", "bike", "red", "bike"]
    assert proximity({"red", "bike"}, tokens) == 1.0
    assert proximity({"red", "bike"}, ["red", "shop"]) == 0.0  # one term: no proximity
    assert proximity({"a", "b", "c"}, ["a", "b", "x", "c"]) == pytest.approx(2 / 3)


def test_phrase_counts_adjacent_pairs_in_order() -> None:
    assert phrase_match(["support", "group"], ["went", "support", "group"]) == 1.0
    assert phrase_match(["support", "group"], ["group", "support"]) == 0.0
    assert phrase_match(["lgbtq", "support", "group"], ["lgbtq", "x", "support", "group"]) == 0.5
    assert phrase_match(["alone"], ["alone"]) == 0.0


def test_lead_is_a_query_term_opening_the_memory() -> None:
    weights = {"melanie": 1.0, "run": 1.0}

    def lead(tokens: list[str]) -> float:
        found = lexical_signals(
            ["melanie", "run"], ["melanie", "run"], weights, tokens, signal_weights=(0, 0, 0, 1)
        )
        return found.lead

    assert lead(["melanie", "started", "run"]) == 1.0
    assert lead(["caroline", "hey", "melanie", "run"]) == 0.0
    assert lead([]) == 0.0


@given(
    st.lists(st.sampled_from("abcdef"), max_size=6),
    st.lists(st.sampled_from("abcdefgh"), max_size=30),
)
def test_signals_stay_on_the_unit_interval(query: list[str], tokens: list[str]) -> None:
    terms = list(dict.fromkeys(query))
    weights = {term: 1.0 + index for index, term in enumerate(terms)}
    found = lexical_signals(query, terms, weights, tokens, signal_weights=(1.0, 0.5, 0.5, 0.5))
    for value in (found.coverage, found.proximity, found.phrase, found.lead, found.score):
        assert 0.0 <= value <= 1.0


@given(
    st.lists(st.sampled_from("abcdef"), max_size=6),
    st.lists(st.sampled_from("abcdefgh"), max_size=30),
    st.lists(st.floats(0.0, 4.0), min_size=4, max_size=4),
)
def test_signals_are_the_reference_formulas(
    query: list[str], tokens: list[str], signal: list[float]
) -> None:
    """The per-query fast path gives what coverage, proximity and phrase_match define."""
    terms = list(dict.fromkeys(query))
    weights = {term: float(index % 3) for index, term in enumerate(terms)}
    chosen = (signal[0], signal[1], signal[2], signal[3])
    found = lexical_signals(query, terms, weights, tokens, signal_weights=chosen)
    assert found.coverage == pytest.approx(coverage(terms, set(tokens), weights))
    assert found.proximity == pytest.approx(proximity(set(terms), tokens))
    assert found.phrase == pytest.approx(phrase_match(query, tokens))
    assert found.lead == (1.0 if tokens and tokens[0] in terms else 0.0)
    values = (found.coverage, found.proximity, found.phrase, found.lead)
    total = sum(signal)
    expected = sum(w * v for w, v in zip(signal, values, strict=True)) / total if total else 0.0
    assert found.score == pytest.approx(expected)


def test_rerank_blends_and_keeps_the_scale() -> None:
    scores = {1: 0.9, 2: 0.8, 3: 0.1}
    signals = {
        1: LexicalSignals(0.2, 0.0, 0.0, 0.0, 0.2),
        2: LexicalSignals(1.0, 1.0, 1.0, 1.0, 1.0),
    }
    unchanged = dict(scores)
    rerank(scores, signals, weight=0.0)
    assert scores == unchanged
    rerank(scores, signals, weight=0.5)
    assert scores[2] > scores[1]  # full coverage overtakes a slightly better first stage
    assert scores[2] == pytest.approx(0.9 * (0.5 * 0.8 / 0.9 + 0.5))
    assert scores[3] == pytest.approx(0.05)  # not reranked: its first-stage share only
    assert max(scores.values()) <= 0.9


def test_rerank_leaves_the_kept_part_of_a_score_alone() -> None:
    # 3 was found through a link only: its kept part is not halved for want of
    # the query's words, while the rest of every score is reranked as before
    scores = {1: 0.9, 2: 0.5, 3: 0.6}
    signals = {1: LexicalSignals(1.0, 1.0, 1.0, 1.0, 1.0)}
    rerank(scores, signals, weight=0.5, kept={3: 0.5})
    assert scores[1] == pytest.approx(0.9 * (0.5 + 0.5))
    assert scores[2] == pytest.approx(0.9 * 0.5 * 0.5 / 0.9)
    assert scores[3] == pytest.approx(0.5 + 0.9 * 0.5 * 0.1 / 0.9)
    assert scores[3] > scores[2]
    plain = {1: 0.9, 2: 0.5, 3: 0.6}
    rerank(plain, signals, weight=0.5)
    assert plain[3] < plain[2] + 0.1 and plain[3] < scores[3]


def test_config_checks_the_rerank_fields() -> None:
    with pytest.raises(ConfigError, match="rerank_weight"):
        RetrievalConfig(rerank_weight=1.5)
    with pytest.raises(ConfigError, match="rerank_depth"):
        RetrievalTuning(rerank_depth=0)


# A memory where one rare term is said three times in a short text: BM25 likes it
# best, though it holds one of the three things the question asks about.
_ECHO = "Lisbon, Lisbon, Lisbon!"
_ANSWER = (
    "My sister told me over dinner that her wedding will be in Lisbon next spring, "
    "and the whole family is already planning the trip and the flights together"
)
_FILLER = [
    f"{who} talked about the {what} again today"
    for who in ("my sister", "a friend", "the neighbour", "my cousin")
    for what in ("wedding", "garden", "weather", "new car", "holiday")
]


async def _search(tmp_path: Path, retrieval: RetrievalConfig) -> list[tuple[str, dict[str, float]]]:
    config = MemoryConfig(root=tmp_path, embedder=None, retrieval=retrieval)
    async with await MemoryManager.open("rerank@localhost", config) as memory:
        await memory.store_many([{"content": text} for text in [_ECHO, _ANSWER, *_FILLER]])
        await memory.flush()  # the rerank reads atoms, derived right after the store
        results = await memory.search("sister wedding in Lisbon", limit=5, explain=True)
    return [
        (r.memory.content, r.explanation.rerank if r.explanation is not None else {})
        for r in results
    ]


async def test_coverage_decides_and_switching_off_gives_the_first_stage_order(
    tmp_path: Path,
) -> None:
    plain = RetrievalConfig(mmr_lambda=1.0, neighbour_weight=0.0, rerank_weight=0.0)
    off = await _search(tmp_path / "off", plain)
    assert off[0][0] == _ECHO  # the first stage: the repeated rare term wins
    assert all(not parts for _, parts in off)  # no second stage, nothing to explain

    on = await _search(
        tmp_path / "on",
        RetrievalConfig(mmr_lambda=1.0, neighbour_weight=0.0, rerank_weight=0.5),
    )
    assert on[0][0] == _ANSWER  # it holds every term of the question
    answer = dict(on)[_ANSWER]
    echo = dict(on)[_ECHO]
    assert answer["coverage"] == 1.0 and echo["coverage"] < 0.7
    assert answer["before"] < echo["before"] and answer["after"] > echo["after"]
    assert set(answer) == {
        "coverage",
        "proximity",
        "phrase",
        "lead",
        "lexical",
        "asks",
        "before",
        "after",
    }
