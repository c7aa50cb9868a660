"""What one search carries from stage to stage, and where its time went.

A :class:`SearchState` is made for each call of
:meth:`~spade_memory.retrieval.retriever.Retriever.search_with_timings` and
never shared, so searches running side by side cannot see each other's
candidates, scores or timings. Each stage of the retriever reads what the stages
before it left in the state and adds its own part.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..models import Memory, Viewer
from .candidates import Loaded
from .fusion import FusedScore
from .graph import GraphHits
from .intent import QueryIntent
from .rerank import IndexedTokens, LexicalSignals

__all__ = ["SearchState", "SearchTimings"]


@dataclass(slots=True)
class SearchTimings:
    """Seconds spent in each stage of one search.

    ``fusion`` covers everything after the routes (fusion, the second stage,
    neighbours, loading, the final score and MMR); ``extra`` holds the stages
    inside it and beside the routes by name (``graph``, ``rerank``,
    ``neighbours``, ``mmr``). ``cached``: the results came from the cache.
    """

    embed: float = 0.0
    keyword: float = 0.0
    vector: float = 0.0
    fusion: float = 0.0
    total: float = 0.0
    cached: bool = False
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class SearchState:
    """One search: its query and filters, then what each stage found.

    Filled in stage order: plan (terms, intent, sizes), routes (keyword, vector
    and graph scores, the query vector), fuse (the fused document scores, the
    route weights and the blended ``scores``), second stage (what was read and
    the reranker's signals; ``scores`` reranked in place), floor (``scores`` kept
    only for candidates with evidence), neighbours (``scores`` raised), pool,
    final score and MMR (``chosen``).
    """

    query: str
    limit: int
    categories: tuple[str, ...] | None
    explain: bool
    viewer: Viewer | None = None
    min_score: float = 0.0
    timings: SearchTimings = field(default_factory=SearchTimings)
    # a search run again, wider (see Retriever.search_with_timings): how many times
    # more candidates each route gives, and the query vector of the run before
    widen: int = 1
    given_vector: np.ndarray | None = None
    # plan
    terms: list[str] = field(default_factory=list)
    date_terms: list[str] = field(default_factory=list)  # the days it means, as indexed
    intent: QueryIntent | None = None
    pool_size: int = 0
    candidates: int = 0
    # routes (``respelt``: each query word no memory holds, with the held terms one
    # typo away from it the keyword route also searched; ``spelled``: the query
    # with those words replaced, for the vector and graph routes; "": as typed)
    respelt: dict[str, list[str]] = field(default_factory=dict)
    spelled: str = ""
    keyword: dict[int, float] = field(default_factory=dict)
    vector: dict[int, float] = field(default_factory=dict)
    graph: GraphHits = field(default_factory=GraphHits)
    query_vector: np.ndarray | None = None
    # fuse
    fused: dict[int, FusedScore] = field(default_factory=dict)
    route_weights: dict[str, float] = field(default_factory=dict)
    scores: dict[int, float] = field(default_factory=dict)
    first_stage: dict[int, float] = field(default_factory=dict)
    # the part of each first-stage score the lexical stage leaves as it is: for a
    # question about whom someone is linked to, what the graph route (and both
    # routes' agreement) gave the memories it found only through a link: the link,
    # not the words, makes such a memory relevant
    linked: dict[int, float] = field(default_factory=dict)
    reach: int = 0
    # relevance floor: the cosine from which a vector match passes (None: none does)
    cosine_floor: float | None = None
    # second stage and neighbours
    loaded: Loaded | None = None  # made when the second stage starts (its clock reading)
    indexed: IndexedTokens = field(default_factory=dict)
    signals: dict[int, LexicalSignals] = field(default_factory=dict)
    # pool, final score, MMR (``dead``: candidates left out of the pool for having
    # no live atom, superseded or lapsed)
    pool: list[Memory] = field(default_factory=list)
    dead: int = 0

    def wider(self, by: int) -> SearchState:
        """The same search, to run again with ``by`` times as many candidates per
        route, from the query vector this run made (a new state, nothing found yet)."""
        return SearchState(
            query=self.query,
            limit=self.limit,
            categories=self.categories,
            explain=self.explain,
            viewer=self.viewer,
            min_score=self.min_score,
            widen=self.widen * by,
            given_vector=self.query_vector,
        )

    weights: dict[str, float] = field(default_factory=dict)
    final: dict[int, float] = field(default_factory=dict)
    parts: dict[int, tuple[float, float]] = field(default_factory=dict)
    chosen: list[int] = field(default_factory=list)
