"""Retrieval metrics: recall@k, hit@k, reciprocal rank, their means, percentiles, tables.

Standard library only. A ranking is a sequence of item ids, best first (an id may
repeat when several stored items map to it; it counts once, at its best rank).
Gold is the set of ids that answer the question.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Aggregate",
    "QuestionScore",
    "aggregate",
    "group_aggregates",
    "hit_at",
    "markdown_table",
    "percentile",
    "recall_at",
    "reciprocal_rank",
    "score_question",
]


def _top(ranking: Sequence[str], k: int) -> list[str]:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    seen: list[str] = []
    for item in ranking[:k]:
        if item not in seen:
            seen.append(item)
    return seen


def recall_at(ranking: Sequence[str], gold: Collection[str], k: int) -> float:
    """The fraction of ``gold`` found among the first ``k`` of ``ranking``.

    Raises:
        ValueError: ``gold`` is empty (recall is undefined) or ``k`` < 1.
    """
    wanted = set(gold)
    if not wanted:
        raise ValueError("recall needs at least one gold id; skip questions without gold")
    return len(wanted.intersection(_top(ranking, k))) / len(wanted)


def hit_at(ranking: Sequence[str], gold: Collection[str], k: int) -> float:
    """1.0 when any gold id is among the first ``k`` of ``ranking``, else 0.0."""
    wanted = set(gold)
    return 1.0 if any(item in wanted for item in _top(ranking, k)) else 0.0


def reciprocal_rank(ranking: Sequence[str], gold: Collection[str], k: int) -> float:
    """``1 / rank`` of the first gold id within the first ``k`` places, else 0.0."""
    wanted = set(gold)
    for rank, item in enumerate(ranking[:k], start=1):
        if item in wanted:
            return 1.0 / rank
    return 0.0


@dataclass(frozen=True, slots=True)
class QuestionScore:
    """The metrics of one question (``group`` is e.g. its category)."""

    group: str
    recall5: float
    recall10: float
    hit1: float
    hit5: float
    hit10: float
    mrr10: float


def score_question(ranking: Sequence[str], gold: Collection[str], *, group: str) -> QuestionScore:
    """Every metric of one question's ranking against its gold ids."""
    return QuestionScore(
        group=group,
        recall5=recall_at(ranking, gold, 5),
        recall10=recall_at(ranking, gold, 10),
        hit1=hit_at(ranking, gold, 1),
        hit5=hit_at(ranking, gold, 5),
        hit10=hit_at(ranking, gold, 10),
        mrr10=reciprocal_rank(ranking, gold, 10),
    )


@dataclass(frozen=True, slots=True)
class Aggregate:
    """Means of the metrics over ``count`` questions."""

    count: int
    recall5: float
    recall10: float
    hit1: float
    hit5: float
    hit10: float
    mrr10: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "recall@5": self.recall5,
            "recall@10": self.recall10,
            "hit@1": self.hit1,
            "hit@5": self.hit5,
            "hit@10": self.hit10,
            "mrr@10": self.mrr10,
        }


def aggregate(scores: Iterable[QuestionScore]) -> Aggregate:
    """Mean of each metric; all zeros with ``count`` 0 when there is nothing to average."""
    items = list(scores)
    count = len(items)
    if count == 0:
        return Aggregate(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    def mean(name: str) -> float:
        return math.fsum(getattr(item, name) for item in items) / count

    return Aggregate(
        count=count,
        recall5=mean("recall5"),
        recall10=mean("recall10"),
        hit1=mean("hit1"),
        hit5=mean("hit5"),
        hit10=mean("hit10"),
        mrr10=mean("mrr10"),
    )


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0–100) with linear interpolation between ranks.

    Raises:
        ValueError: no values, or ``q`` outside [0, 100].
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be in [0, 100], got {q}")
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def markdown_table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, digits: int = 3
) -> str:
    """A GitHub Markdown table; floats are printed with ``digits`` decimals."""

    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.{digits}f}"
        return str(value).replace("|", "\\|")

    lines = [
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join("---" for _ in headers) + " |",
    ]
    for row in rows:
        cells = [cell(value) for value in row]
        if len(cells) != len(headers):
            raise ValueError(f"row has {len(cells)} cells, the table has {len(headers)} columns")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def group_aggregates(
    scores: Iterable[QuestionScore], groups: Mapping[str, Collection[str]]
) -> dict[str, Aggregate]:
    """One :class:`Aggregate` per named set of groups (e.g. ``{"1-4": {"1","2","3","4"}}``)."""
    items = list(scores)
    return {
        name: aggregate(item for item in items if item.group in members)
        for name, members in groups.items()
    }
