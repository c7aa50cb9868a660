"""Retrieval metrics of the benchmarks, on hand-made rankings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.metrics import (
    QuestionScore,
    aggregate,
    group_aggregates,
    hit_at,
    markdown_table,
    percentile,
    recall_at,
    reciprocal_rank,
    score_question,
)

RANKING = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"]


def test_recall_counts_gold_within_the_cut() -> None:
    assert recall_at(RANKING, {"b", "g"}, 5) == 0.5
    assert recall_at(RANKING, {"b", "g"}, 10) == 1.0
    assert recall_at(RANKING, {"k"}, 10) == 0.0
    assert recall_at(RANKING, {"a", "zz"}, 10) == 0.5
    assert recall_at([], {"a"}, 10) == 0.0


def test_recall_counts_a_repeated_id_once() -> None:
    assert recall_at(["a", "a", "a", "b"], ["a", "b"], 3) == 0.5
    assert recall_at(["a", "a", "b"], ["a", "a"], 3) == 1.0


def test_recall_refuses_empty_gold_and_bad_k() -> None:
    with pytest.raises(ValueError, match="gold"):
        recall_at(RANKING, set(), 10)
    with pytest.raises(ValueError, match="k must be"):
        recall_at(RANKING, {"a"}, 0)


def test_hit_and_reciprocal_rank() -> None:
    assert hit_at(RANKING, {"e"}, 5) == 1.0
    assert hit_at(RANKING, {"f"}, 5) == 0.0
    assert reciprocal_rank(RANKING, {"c", "h"}, 10) == pytest.approx(1 / 3)
    assert reciprocal_rank(RANKING, {"k"}, 10) == 0.0
    assert reciprocal_rank(RANKING, {"k"}, 11) == pytest.approx(1 / 11)
    assert reciprocal_rank(["x", "x", "y"], {"y"}, 10) == pytest.approx(1 / 3)


def test_score_question_fills_every_metric() -> None:
    score = score_question(RANKING, ["d", "j", "z"], group="2")
    assert score == QuestionScore(
        group="2",
        recall5=1 / 3,
        recall10=2 / 3,
        hit1=0.0,
        hit5=1.0,
        hit10=1.0,
        mrr10=0.25,
    )


def test_aggregate_means_and_groups() -> None:
    first = score_question(["g1", "x"], ["g1"], group="1")
    second = score_question(["x", "g2"], ["g2", "g3"], group="2")
    third = score_question(["x"], ["g4"], group="5")
    total = aggregate([first, second])
    assert total.count == 2
    assert total.recall10 == pytest.approx((1.0 + 0.5) / 2)
    assert total.mrr10 == pytest.approx((1.0 + 0.5) / 2)
    assert total.hit1 == pytest.approx(0.5)
    assert total.as_dict()["recall@10"] == pytest.approx(0.75)
    groups = group_aggregates([first, second, third], {"1-4": {"1", "2"}, "5": {"5"}})
    assert groups["1-4"] == total
    assert groups["5"].count == 1 and groups["5"].hit10 == 0.0
    empty = aggregate([])
    assert empty.count == 0 and empty.recall10 == 0.0


_rankings = st.lists(st.sampled_from("abcdefghijklmnop"), max_size=15)
_gold = st.sets(st.sampled_from("abcdefghijklmnopqrst"), min_size=1, max_size=5)


@given(_rankings, _gold)
def test_metric_invariants(ranking: list[str], gold: set[str]) -> None:
    r5, r10 = recall_at(ranking, gold, 5), recall_at(ranking, gold, 10)
    assert 0.0 <= r5 <= r10 <= 1.0
    assert (reciprocal_rank(ranking, gold, 10) > 0) == (hit_at(ranking, gold, 10) == 1.0)
    assert (r10 > 0) == (hit_at(ranking, gold, 10) == 1.0)
    if hit_at(ranking, gold, 1):
        assert reciprocal_rank(ranking, gold, 10) == 1.0


def test_percentile_interpolates() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 25) == pytest.approx(1.75)
    assert percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_markdown_table() -> None:
    text = markdown_table(["name", "score"], [["a|b", 0.12345], ["c", 2]], digits=2)
    assert text.splitlines() == [
        "| name | score |",
        "| --- | --- |",
        "| a\\|b | 0.12 |",
        "| c | 2 |",
    ]
    with pytest.raises(ValueError, match="columns"):
        markdown_table(["one"], [["a", "b"]])
