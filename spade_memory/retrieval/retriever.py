"""The retriever: routes run side by side, fused, blended with importance and recency, MMR.

The document route has two sub-routes, keyword (BM25 over SQLite FTS5) and
vector (FAISS). A sub-route that fails leaves the other's results; a vector
failure falls back to keywords alone. Every search can explain itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..config import RetrievalConfig
from ..models import Memory, ScoreExplanation, SearchResult
from ..storage.base import BaseMemoryStore
from .fusion import FusedScore, fuse_subroutes, mmr, recency_score
from .tokenizer import Tokenizer

__all__ = ["Retriever", "SearchTimings", "VectorSource"]

logger = logging.getLogger(__name__)

_CacheKey = tuple[str, int, tuple[str, ...], bool]


class VectorSource(Protocol):
    """What the retriever needs from the vector side (the indexer implements it)."""

    async def embed_query(self, text: str) -> np.ndarray: ...

    async def search(
        self, query: np.ndarray, k: int, *, allowed_ids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass(slots=True)
class SearchTimings:
    """Seconds spent in each stage of the last search."""

    embed: float = 0.0
    keyword: float = 0.0
    vector: float = 0.0
    fusion: float = 0.0
    total: float = 0.0
    cached: bool = False
    extra: dict[str, float] = field(default_factory=dict)


def _jaccard(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


class Retriever:
    """Searches one agent's base memory."""

    def __init__(
        self,
        base: BaseMemoryStore,
        tokenizer: Tokenizer,
        *,
        config: RetrievalConfig,
        vectors: VectorSource | None,
        fingerprint: str | None = None,
        dim: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._base = base
        self._tokenizer = tokenizer
        self._config = config
        self._vectors = vectors
        self._fingerprint = fingerprint
        self._dim = dim
        self._clock = clock
        self._cache: dict[_CacheKey, tuple[float, int, list[SearchResult]]] = {}
        self._generation = 0
        self.last_timings = SearchTimings()

    def invalidate(self) -> None:
        """Forget cached results (called on every write, update and delete)."""
        self._generation += 1
        self._cache.clear()

    async def search(
        self,
        query: str,
        *,
        limit: int,
        categories: Sequence[str] | None = None,
        explain: bool = False,
    ) -> list[SearchResult]:
        """The best ``limit`` active memories for ``query``, best first."""
        started = time.perf_counter()
        cats = tuple(sorted(categories)) if categories else ()
        key: _CacheKey = (query, limit, cats, explain)
        ttl = self._config.cache_ttl_seconds
        if ttl > 0:
            hit = self._cache.get(key)
            if hit is not None and hit[1] == self._generation and time.monotonic() - hit[0] < ttl:
                self.last_timings = SearchTimings(total=time.perf_counter() - started, cached=True)
                return list(hit[2])
        timings = SearchTimings()
        results = await self._search(query, limit, cats or None, explain, timings)
        timings.total = time.perf_counter() - started
        self.last_timings = timings
        if ttl > 0:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = (time.monotonic(), self._generation, list(results))
        return results

    async def _search(
        self,
        query: str,
        limit: int,
        categories: tuple[str, ...] | None,
        explain: bool,
        timings: SearchTimings,
    ) -> list[SearchResult]:
        config = self._config
        pool_size = max(limit * config.mmr_pool_factor, limit)
        candidates = max(
            limit * config.recall_candidate_multiplier, config.min_candidates, pool_size
        )
        terms = self._tokenizer.query_terms(query)
        keyword_task = asyncio.create_task(self._keyword(terms, candidates, categories, timings))
        vector_task = asyncio.create_task(self._vector(query, candidates, categories, timings))
        keyword, vector = await asyncio.gather(keyword_task, vector_task)

        fusion_started = time.perf_counter()
        fused = fuse_subroutes(
            keyword, vector, config=config, first_weight=config.fusion_bm25_weight
        )
        if not fused:
            timings.fusion = time.perf_counter() - fusion_started
            return []
        ceiling = 1.0 + config.agreement_bonus
        ranked = sorted(fused, key=lambda key: -fused[key].score)
        memories = await self._base.get_many(ranked[: max(pool_size * 2, candidates)])
        allowed = set(categories) if categories else None
        pool: list[Memory] = []
        for memory_id in ranked:
            memory = memories.get(memory_id)
            if memory is None or memory.status != "active":
                continue
            if allowed is not None and memory.category not in allowed:
                continue
            pool.append(memory)
            if len(pool) >= pool_size:
                break
        now = self._clock()
        weights = {
            "relevance": config.relevance_weight,
            "importance": config.importance_weight,
            "recency": config.recency_weight,
        }
        total_weight = sum(weights.values())
        final: dict[int, float] = {}
        parts: dict[int, tuple[float, float]] = {}
        for memory in pool:
            relevance = min(1.0, fused[memory.id].score / ceiling)
            recency = recency_score(now - memory.updated_at, config.recency_decay_per_day)
            final[memory.id] = (
                weights["relevance"] * relevance
                + weights["importance"] * memory.importance
                + weights["recency"] * recency
            ) / total_weight
            parts[memory.id] = (relevance, recency)
        chosen = await self._diversify(pool, final, limit)
        timings.fusion = time.perf_counter() - fusion_started
        by_id = {memory.id: memory for memory in pool}
        results: list[SearchResult] = []
        for memory_id in chosen:
            memory = by_id[memory_id]
            explanation = None
            if explain:
                explanation = self._explain(
                    memory, fused[memory_id], keyword, vector, parts[memory_id], final, weights
                )
            results.append(
                SearchResult(memory=memory, score=final[memory_id], explanation=explanation)
            )
        return results

    async def _keyword(
        self,
        terms: Sequence[str],
        candidates: int,
        categories: tuple[str, ...] | None,
        timings: SearchTimings,
    ) -> dict[int, float]:
        started = time.perf_counter()
        try:
            hits = await self._base.keyword_search(terms, limit=candidates, categories=categories)
        except Exception:
            logger.exception("keyword route failed; continuing with vectors only")
            return {}
        finally:
            timings.keyword = time.perf_counter() - started
        return dict(hits)

    async def _vector(
        self,
        query: str,
        candidates: int,
        categories: tuple[str, ...] | None,
        timings: SearchTimings,
    ) -> dict[int, float]:
        if self._vectors is None:
            return {}
        try:
            started = time.perf_counter()
            query_vector = await self._vectors.embed_query(query)
            timings.embed = time.perf_counter() - started
            started = time.perf_counter()
            allowed = None
            if categories:
                allowed = await self._base.filtered_ids(categories=categories)
                if len(allowed) == 0:
                    return {}
            k = min(candidates, self._config.vector_candidate_cap)
            ids, scores = await self._vectors.search(query_vector, k, allowed_ids=allowed)
            timings.vector = time.perf_counter() - started
        except Exception:
            logger.exception("vector route failed; falling back to keywords")
            return {}
        return {int(i): float(s) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)}

    async def _diversify(
        self, pool: list[Memory], final: dict[int, float], limit: int
    ) -> list[int]:
        config = self._config
        ids = [memory.id for memory in pool]
        if config.mmr_lambda >= 1.0 or len(ids) <= 1:
            return sorted(ids, key=lambda key: -final[key])[:limit]
        vectors: dict[int, np.ndarray] = {}
        if self._fingerprint is not None and self._dim:
            try:
                vectors = await self._base.vectors_for(self._fingerprint, self._dim, ids)
            except Exception:
                logger.exception("could not load vectors for MMR; using word overlap")
        token_sets: dict[int, set[str]] = {}

        def tokens(memory_id: int) -> set[str]:
            if memory_id not in token_sets:
                memory = next(m for m in pool if m.id == memory_id)
                token_sets[memory_id] = set(self._tokenizer.tokenize(memory.content))
            return token_sets[memory_id]

        def similarity(a: int, b: int) -> float:
            va = vectors.get(a)
            vb = vectors.get(b)
            if va is not None and vb is not None:
                return max(0.0, float(np.dot(va, vb)))
            return _jaccard(tokens(a), tokens(b))

        top = max(final.values())
        relevance = {key: final[key] / top if top > 0 else 0.0 for key in ids}
        return mmr(ids, relevance, similarity, k=limit, lambda_=config.mmr_lambda)

    def _explain(
        self,
        memory: Memory,
        fused: FusedScore,
        keyword: dict[int, float],
        vector: dict[int, float],
        parts: tuple[float, float],
        final: dict[int, float],
        weights: dict[str, float],
    ) -> ScoreExplanation:
        config = self._config
        routes = tuple(
            name
            for name, scores in (("keyword", keyword), ("vector", vector))
            if memory.id in scores
        )
        return ScoreExplanation(
            keyword_score=keyword.get(memory.id),
            vector_score=vector.get(memory.id),
            document_score=fused.score,
            graph_score=None,
            relevance=parts[0],
            importance=memory.importance,
            recency=parts[1],
            final_score=final[memory.id],
            weights={
                **weights,
                "fusion_bm25": config.fusion_bm25_weight,
                "fusion_vector": 1.0 - config.fusion_bm25_weight,
                "agreement_bonus": config.agreement_bonus,
                "mmr_lambda": config.mmr_lambda,
            },
            routes=routes,
        )
