"""Score fusion: normalisation, rank fusion, the final blend and MMR.

Pure functions over ``{memory id: score}`` maps, so each step is testable alone
and the retriever can explain every number it produced.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..config import RetrievalConfig
from ..storage.vectors import TIE_DECIMALS

__all__ = [
    "FusedScore",
    "fuse_subroutes",
    "minmax",
    "mmr",
    "recency_score",
    "rrf",
]


def minmax(scores: Mapping[int, float]) -> dict[int, float]:
    """Scale scores to [0, 1] per query; a single or all-equal score maps to 1."""
    if not scores:
        return {}
    low = min(scores.values())
    high = max(scores.values())
    if high - low <= 1e-12:
        return dict.fromkeys(scores, 1.0)
    span = high - low
    return {key: (value - low) / span for key, value in scores.items()}


def rrf(ranked: Sequence[int], k: int) -> dict[int, float]:
    """Reciprocal-rank scores ``1 / (k + rank)`` (rank from 1), scaled so rank 1 is 1."""
    top = 1.0 / (k + 1)
    return {key: (1.0 / (k + rank)) / top for rank, key in enumerate(ranked, start=1)}


def _best_first(scores: Mapping[int, float]) -> list[int]:
    """The keys of ``scores``, best first; equal scores (to :data:`TIE_DECIMALS`
    decimals) by id, so that every build, and every order a sub-route found them
    in, ranks them alike."""
    return sorted(scores, key=lambda key: (-round(scores[key], TIE_DECIMALS), key))


def _ranks(scores: Mapping[int, float]) -> dict[int, int]:
    return {key: rank for rank, key in enumerate(_best_first(scores), start=1)}


@dataclass(frozen=True, slots=True)
class FusedScore:
    """One memory's fused score inside a route, with its parts (``None``: not returned)."""

    score: float
    first: float | None
    second: float | None


def fuse_subroutes(
    first: Mapping[int, float],
    second: Mapping[int, float],
    *,
    config: RetrievalConfig,
    first_weight: float,
) -> dict[int, FusedScore]:
    """Fuse two sub-routes of one route (keyword ``first``, vector ``second``).

    ``minmax`` mode normalises each sub-route per query and blends them with
    ``first_weight``; ``rrf`` mode blends reciprocal ranks instead. A memory that
    both sub-routes rank within ``agreement_window`` gets ``agreement_bonus``.
    Scores returned are in [0, 1 + bonus] before the final blend rescales them.
    """
    if config.fusion_mode == "rrf":
        a = rrf(_best_first(first), config.rrf_k)
        b = rrf(_best_first(second), config.rrf_k)
    else:
        a = minmax(first)
        b = minmax(second)
    if not first:
        first_weight = 0.0
    elif not second:
        first_weight = 1.0
    rank_a = _ranks(first)
    rank_b = _ranks(second)
    fused: dict[int, FusedScore] = {}
    window = config.tuning.agreement_window
    for key in a.keys() | b.keys():
        score = first_weight * a.get(key, 0.0) + (1.0 - first_weight) * b.get(key, 0.0)
        if rank_a.get(key, window + 1) <= window and rank_b.get(key, window + 1) <= window:
            score += config.agreement_bonus
        fused[key] = FusedScore(
            score=score,
            first=a.get(key),
            second=b.get(key),
        )
    return fused


def recency_score(age_seconds: float, decay_per_day: float) -> float:
    """``exp(-decay * age in days)``: 1 for a fresh memory, falling slowly."""
    days = max(0.0, age_seconds) / 86_400.0
    return math.exp(-decay_per_day * days)


def mmr(
    candidates: Sequence[int],
    relevance: Mapping[int, float],
    similarity: Callable[[int, int], float],
    *,
    k: int,
    lambda_: float,
    duplicate_threshold: float = 1.0,
) -> list[int]:
    """Maximal marginal relevance: pick ``k`` of ``candidates`` balancing relevance and novelty.

    ``relevance`` should be on [0, 1]; ``similarity`` returns cosine-like values
    in [0, 1]. A candidate at least ``duplicate_threshold`` similar to one already
    picked is a near-duplicate: it is only picked when nothing else is left. With
    ``lambda_`` 1.0 and no threshold this is a plain sort by relevance.
    """
    remaining = sorted(candidates, key=lambda key: -relevance[key])
    if len(remaining) <= 1 or (lambda_ >= 1.0 and duplicate_threshold > 1.0):
        return remaining[:k]
    chosen: list[int] = []
    max_sim: dict[int, float] = dict.fromkeys(remaining, 0.0)
    while remaining and len(chosen) < k:
        fresh = [key for key in remaining if max_sim[key] < duplicate_threshold] or remaining
        best = max(
            fresh,
            key=lambda key: lambda_ * relevance[key] - (1.0 - lambda_) * max_sim[key],
        )
        chosen.append(best)
        remaining.remove(best)
        for key in remaining:
            max_sim[key] = max(max_sim[key], similarity(best, key))
    return chosen
