from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spade_memory.config import RetrievalConfig, RetrievalTuning
from spade_memory.retrieval.fusion import (
    fuse_subroutes,
    minmax,
    mmr,
    recency_score,
    rrf,
)

scores = st.dictionaries(st.integers(1, 50), st.floats(-100, 100, allow_nan=False), max_size=20)


@given(scores)
def test_minmax_maps_into_unit_interval(values: dict[int, float]) -> None:
    scaled = minmax(values)
    assert scaled.keys() == values.keys()
    assert all(0.0 <= v <= 1.0 for v in scaled.values())
    if values:
        assert max(scaled.values()) == 1.0


def test_rrf_orders_by_rank() -> None:
    assert rrf([7, 3, 9], k=60) == {7: 1.0, 3: pytest.approx(61 / 62), 9: pytest.approx(61 / 63)}


def test_subroute_weights_and_agreement_bonus() -> None:
    config = RetrievalConfig(agreement_bonus=0.25, tuning=RetrievalTuning(agreement_window=1))
    fused = fuse_subroutes({1: 10.0, 2: 5.0}, {1: 0.9, 3: 0.5}, config=config, first_weight=0.5)
    assert fused[1].score == pytest.approx(1.0 + 0.25)  # top of both lists: both normalised to 1
    assert fused[2].score == pytest.approx(0.0)  # bottom of keyword list, absent from vectors
    assert fused[3].second == pytest.approx(0.0) and fused[3].first is None
    only_keyword = fuse_subroutes({1: 3.0}, {}, config=config, first_weight=0.5)
    assert only_keyword[1].score == pytest.approx(1.0)


def test_rrf_mode() -> None:
    config = RetrievalConfig(fusion_mode="rrf", agreement_bonus=0.0)
    fused = fuse_subroutes({1: 10.0, 2: 5.0}, {2: 0.9, 1: 0.5}, config=config, first_weight=0.5)
    assert fused[1].score == pytest.approx(fused[2].score)


def test_scores_equal_but_for_float32_noise_rank_by_id() -> None:
    """A 0 in one build of FAISS is 1.7e-10 in another: both rank the same."""
    config = RetrievalConfig(fusion_mode="rrf", agreement_bonus=0.0)
    noisy = {19: 1.7e-10, 4: -3e-9, 16: 0.0, 7: 0.25}
    clean = dict.fromkeys(noisy, 0.0) | {7: 0.25}
    a = fuse_subroutes({}, noisy, config=config, first_weight=0.5)
    b = fuse_subroutes({}, clean, config=config, first_weight=0.5)
    assert {key: fused.score for key, fused in a.items()} == {
        key: fused.score for key, fused in b.items()
    }
    assert sorted(a, key=lambda key: -a[key].score) == [7, 4, 16, 19]


def test_recency_decays_slowly() -> None:
    assert recency_score(0, 0.01) == 1.0
    assert recency_score(100 * 86400, 0.01) == pytest.approx(math.exp(-1))
    assert recency_score(-5, 0.01) == 1.0


def test_mmr_removes_near_duplicates() -> None:
    relevance = {1: 1.0, 2: 0.99, 3: 0.7}
    duplicates = {frozenset((1, 2)): 0.98, frozenset((1, 3)): 0.1, frozenset((2, 3)): 0.1}

    def similarity(a: int, b: int) -> float:
        return duplicates[frozenset((a, b))]

    assert mmr([1, 2, 3], relevance, similarity, k=2, lambda_=0.7) == [1, 3]
    assert mmr([1, 2, 3], relevance, similarity, k=2, lambda_=1.0) == [1, 2]


def test_mmr_never_repeats_a_near_duplicate_while_others_remain() -> None:
    relevance = {1: 1.0, 2: 1.0, 3: 0.5, 4: 0.4}

    def similarity(a: int, b: int) -> float:
        return 0.99 if {a, b} == {1, 2} else 0.2

    assert mmr([1, 2, 3, 4], relevance, similarity, k=3, lambda_=0.7, duplicate_threshold=0.95) == [
        1,
        3,
        4,
    ]
    assert mmr([1, 2], relevance, similarity, k=2, lambda_=0.7, duplicate_threshold=0.95) == [1, 2]
