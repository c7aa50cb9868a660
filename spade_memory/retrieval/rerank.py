"""The second stage of the document route: lexical evidence the first stage lacks.

BM25 adds up term scores and the vector compares whole meanings; neither asks
whether a memory holds *all* of what the question names, or holds it together.
The reranker looks again at the best ``rerank_depth`` candidates of the first
stage, on their indexed tokens (one batch read, no query per candidate), and
scores three signals, each on [0, 1]:

- coverage: the IDF-weighted share of the query's distinct terms the memory
  holds (a rare term counts for more than a common one);
- proximity: how close together the query terms the memory holds stand (the
  shortest window of its text that holds all of them);
- phrase: the share of the query's adjacent term pairs found adjacent, in
  order, in the memory;
- lead: whether the memory's first term is a query term. A memory usually
  names its subject first ("Alice: ...", "The deploy pipeline runs ..."), so a
  question about that subject prefers the memories that open with it over those
  that only mention it.

A memory that only asks (its text ends with a question mark) rarely holds the
answer to a question, though it often shares the question's words: with
``rerank_question_penalty`` its reranked score is lowered by that fraction.

The lexical score is their weighted mean; a candidate's new score is
``(1 - rerank_weight) * first stage + rerank_weight * lexical``, the first stage
scaled so that the best candidate has 1. Candidates beyond the depth keep only
their first-stage share, so they never overtake a reranked one unfairly.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..config import RetrievalConfig
from ..storage.base import BaseMemoryStore
from ..text.tokenizer import Tokenizer

__all__ = [
    "IndexedTokens",
    "LexicalReranker",
    "LexicalSignals",
    "asks_question",
    "coverage",
    "idf",
    "indexed_tokens",
    "lexical_signals",
    "phrase_match",
    "proximity",
    "rerank",
]

logger = logging.getLogger(__name__)

_QUESTION_MARKS = frozenset({"?", "\uff1f"})  # ASCII and fullwidth


@dataclass(frozen=True, slots=True)
class LexicalSignals:
    """One memory's second-stage signals, each on [0, 1], and their weighted mean."""

    coverage: float
    proximity: float
    phrase: float
    lead: float
    score: float
    asks: bool = False

    def as_dict(self) -> dict[str, float]:
        return {
            "coverage": self.coverage,
            "proximity": self.proximity,
            "phrase": self.phrase,
            "lead": self.lead,
            "lexical": self.score,
            "asks": 1.0 if self.asks else 0.0,
        }


def idf(document_frequency: int, total: int) -> float:
    """BM25's inverse document frequency, kept positive: ``ln(1 + (N - df + .5) / (df + .5))``."""
    total = max(total, document_frequency, 1)
    return math.log(1.0 + (total - document_frequency + 0.5) / (document_frequency + 0.5))


def coverage(terms: Sequence[str], present: set[str], weights: Mapping[str, float]) -> float:
    """The ``weights``-weighted share of ``terms`` found in ``present``.

    A term without a weight counts for nothing (no memory holds it); 0 when no
    term has weight.
    """
    total = sum(weights.get(term, 0.0) for term in terms)
    if total <= 0:
        return 0.0
    return sum(weights.get(term, 0.0) for term in terms if term in present) / total


def proximity(terms: set[str], tokens: Sequence[str]) -> float:
    """How tightly the query ``terms`` a text holds stand together, on [0, 1].

    With ``m`` distinct terms found, and ``w`` the length of the shortest run of
    ``tokens`` holding all of them, the score is ``(m - 1) / (w - 1)``: 1 when they
    stand side by side. A text holding fewer than two of the terms scores 0.
    """
    positions = [(index, token) for index, token in enumerate(tokens) if token in terms]
    wanted = len({token for _, token in positions})
    if wanted < 2:
        return 0.0
    counts: dict[str, int] = {}
    have = 0
    best = len(tokens)
    left = 0
    for right in range(len(positions)):
        token = positions[right][1]
        counts[token] = counts.get(token, 0) + 1
        if counts[token] == 1:
            have += 1
        while have == wanted:
            start = positions[left][0]
            best = min(best, positions[right][0] - start + 1)
            gone = positions[left][1]
            counts[gone] -= 1
            if counts[gone] == 0:
                have -= 1
            left += 1
    return (wanted - 1) / (best - 1) if best > 1 else 1.0


def phrase_match(query_tokens: Sequence[str], tokens: Sequence[str]) -> float:
    """The share of the query's adjacent token pairs found adjacent, in order, in ``tokens``."""
    pairs = {(a, b) for a, b in itertools.pairwise(query_tokens) if a != b}
    if not pairs:
        return 0.0
    found = set(itertools.pairwise(tokens))
    return len(pairs & found) / len(pairs)


class _QuerySide:
    """What the signals need of the query, worked out once for all its candidates."""

    __slots__ = ("_cover", "_cover_total", "_pairs", "_query_tokens", "_signal", "_wanted")

    def __init__(
        self,
        query_tokens: Sequence[str],
        terms: Sequence[str],
        weights: Mapping[str, float],
        signal_weights: tuple[float, float, float, float],
    ) -> None:
        self._query_tokens = query_tokens
        self._wanted = set(terms)
        self._cover = [(term, weights.get(term, 0.0)) for term in terms]
        self._cover_total = sum(weight for _, weight in self._cover)
        self._pairs = {(a, b) for a, b in itertools.pairwise(query_tokens) if a != b}
        self._signal = signal_weights

    def signals(self, tokens: Sequence[str]) -> LexicalSignals:
        """The signals of one memory's ``tokens`` (as :func:`lexical_signals`)."""
        wanted = self._wanted
        cover = 0.0
        if self._cover_total > 0:
            present = set(tokens)
            held = sum(weight for term, weight in self._cover if term in present)
            cover = held / self._cover_total
        near = proximity(wanted, tokens)
        pairs = self._pairs
        phrase = len(pairs & set(itertools.pairwise(tokens))) / len(pairs) if pairs else 0.0
        lead = 1.0 if tokens and tokens[0] in wanted else 0.0
        values = (cover, near, phrase, lead)
        total = sum(self._signal)
        score = (
            sum(w * v for w, v in zip(self._signal, values, strict=True)) / total if total else 0.0
        )
        return LexicalSignals(cover, near, phrase, lead, score)


def lexical_signals(
    query_tokens: Sequence[str],
    terms: Sequence[str],
    weights: Mapping[str, float],
    tokens: Sequence[str],
    *,
    signal_weights: tuple[float, float, float, float],
) -> LexicalSignals:
    """The signals of one memory's ``tokens`` for a query.

    Args:
        query_tokens: the query's tokens in order (duplicates kept).
        terms: the query's distinct terms.
        weights: each term's IDF.
        tokens: the memory's indexed tokens in order.
        signal_weights: weights of coverage, proximity, phrase and lead in the mean.
    """
    return _QuerySide(query_tokens, terms, weights, signal_weights).signals(tokens)


def rerank(
    scores: dict[int, float],
    signals: Mapping[int, LexicalSignals],
    *,
    weight: float,
    question_penalty: float = 0.0,
    kept: Mapping[int, float] | None = None,
) -> None:
    """Blend ``signals`` into the first-stage ``scores`` in place (see the module docstring).

    The result keeps the first stage's scale: the best first-stage score stays the
    ceiling, so later steps (neighbour shares, the final blend) read it as before.
    ``kept`` is the part of each score the blend leaves as it is (the rest is
    reranked, its best scaled to the best of the rest).
    """
    if not scores or weight <= 0:
        return
    kept = kept or {}
    rest = {key: value - kept.get(key, 0.0) for key, value in scores.items()}
    top = max(rest.values())
    if top <= 0:
        return
    for key, value in rest.items():
        found = signals.get(key)
        lexical = found.score if found is not None else 0.0
        scores[key] = kept.get(key, 0.0) + top * ((1.0 - weight) * value / top + weight * lexical)
        if found is not None and found.asks:
            scores[key] *= 1.0 - question_penalty


IndexedTokens = Mapping[int, tuple[list[str], bool]]
"""Memory id to its indexed content tokens and whether its text ends with a question."""


def asks_question(content: str) -> bool:
    """Whether ``content`` ends with a question mark (spaces after it aside).

    Only spaces are trimmed, as SQLite's ``rtrim()`` in :meth:`LexicalReranker._tokens`
    does, so both ways of reading a memory agree.
    """
    return content.rstrip(" ")[-1:] in _QUESTION_MARKS


def indexed_tokens(content: str, tokens: str) -> tuple[list[str], bool]:
    """A memory's indexed ``tokens`` (as the keyword index holds them, joined by
    spaces) split, and whether its ``content`` ends with a question mark."""
    return tokens.split(), asks_question(content)


class LexicalReranker:
    """Reads what the second stage needs for one search in a few batch queries.

    The candidates' indexed content tokens come from the FTS table (the same
    tokens BM25 scored, so no text is tokenised again), or from the caller, who
    read them with the memories (:meth:`BaseMemoryStore.get_many_indexed`); the
    query terms' document frequencies come from an ``fts5vocab`` view of it.

    Args:
        base: the agent's base memory.
        tokenizer: the tokenizer the memory was indexed with.
    """

    def __init__(self, base: BaseMemoryStore, tokenizer: Tokenizer) -> None:
        self._base = base
        self._tokenizer = tokenizer

    async def apply(
        self,
        query: str,
        terms: Sequence[str],
        scores: dict[int, float],
        config: RetrievalConfig,
        *,
        indexed: IndexedTokens | None = None,
        kept: Mapping[int, float] | None = None,
    ) -> dict[int, LexicalSignals]:
        """Rerank the best ``rerank_depth`` of ``scores`` in place; their signals.

        ``indexed``, when given, holds the tokens of (at least) those candidates
        that have indexed text; else they are read here. ``kept``: the part of
        each score left as it is (:func:`rerank`).

        Nothing changes when the second stage is off, the query has no terms, or
        reading the candidates fails (logged: the first stage's order stands).
        """
        if config.rerank_weight <= 0 or not terms:
            return {}
        top = sorted(scores, key=lambda key: -scores[key])[: config.tuning.rerank_depth]
        try:
            found = await self.signals(query, terms, top, config, indexed=indexed)
        except Exception:
            logger.exception("the second stage failed; keeping the first stage's order")
            return {}
        rerank(
            scores,
            found,
            weight=config.rerank_weight,
            question_penalty=config.tuning.rerank_question_penalty,
            kept=kept,
        )
        return found

    async def signals(
        self,
        query: str,
        terms: Sequence[str],
        candidates: Sequence[int],
        config: RetrievalConfig,
        *,
        indexed: IndexedTokens | None = None,
    ) -> dict[int, LexicalSignals]:
        """The signals of each of ``candidates`` (those with indexed text) for ``query``.

        ``indexed``: the candidates' tokens, when already read (see :meth:`apply`).
        """
        if not terms or not candidates:
            return {}
        if indexed is None:
            tokens: IndexedTokens = await self._tokens(candidates)
        else:
            tokens = {key: indexed[key] for key in dict.fromkeys(candidates) if key in indexed}
        weights = await self._idf(terms)
        query_tokens = self._tokenizer.tokenize(query)
        signal_weights = (
            config.tuning.rerank_coverage_weight,
            config.tuning.rerank_proximity_weight,
            config.tuning.rerank_phrase_weight,
            config.tuning.rerank_lead_weight,
        )
        side = _QuerySide(query_tokens, terms, weights, signal_weights)
        found: dict[int, LexicalSignals] = {}
        for memory_id, (text, asks) in tokens.items():
            signals = side.signals(text)
            found[memory_id] = dataclasses.replace(signals, asks=asks) if asks else signals
        return found

    async def _tokens(self, candidates: Sequence[int]) -> dict[int, tuple[list[str], bool]]:
        """Each candidate's indexed content tokens, and whether its text ends with a question."""
        rows = await self._base.indexed_tokens_and_endings(candidates)
        return {
            memory_id: (tokens.split(), ending in _QUESTION_MARKS)
            for memory_id, (tokens, ending) in rows.items()
        }

    async def _idf(self, terms: Sequence[str]) -> dict[str, float]:
        """Each term's IDF over the whole memory; terms no memory holds are left out
        (all weigh alike when the frequencies cannot be read)."""
        frequencies, total = await self._base.document_frequencies(terms)
        if not frequencies:
            return dict.fromkeys(terms, 1.0)
        return {term: idf(count, total) for term, count in frequencies.items() if count > 0}
