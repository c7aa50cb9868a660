"""The retriever: routes run side by side, fused, blended with importance and recency, MMR.

The document route has two sub-routes, keyword (BM25 over SQLite FTS5) and
vector (FAISS). The graph route (:mod:`spade_memory.retrieval.graph`) runs beside
it; the routes are blended with weights shifted by the query's intent
(:mod:`spade_memory.retrieval.intent`). Each route has ``route_timeout_seconds``;
a route (or sub-route) that fails or times out leaves the others' results, and a
vector failure falls back to keywords alone. Every search can explain itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..config import RetrievalConfig
from ..errors import StorageError
from ..models import Memory, SearchResult
from ..storage.base import BaseMemoryStore
from ..text.tokenizer import Tokenizer
from .candidates import (
    HiddenFilter,
    Loaded,
    add_neighbours,
    load,
    read_head,
)
from .fusion import fuse_subroutes, recency_score
from .graph import GraphHits, GraphRetriever
from .intent import (
    QueryIntent,
    blend_routes,
    query_intent,
    route_weights,
)
from .ranking import diversify, explain_result
from .rerank import LexicalReranker

__all__ = ["HiddenFilter", "Retriever", "SearchTimings", "VectorSource"]

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
        graph: GraphRetriever | None = None,
        hidden: HiddenFilter | None = None,
    ) -> None:
        self._base = base
        self._graph = graph
        self._hidden = hidden
        self._tokenizer = tokenizer
        self._config = config
        self._vectors = vectors
        self._fingerprint = fingerprint
        self._dim = dim
        self._clock = clock
        self._reranker = LexicalReranker(base, tokenizer)
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
        bound = 2 * self._config.route_timeout_seconds + 1
        try:
            async with asyncio.timeout(bound):
                results = await self._search(query, limit, cats or None, explain, timings)
        except TimeoutError:
            raise StorageError(
                f"the search took longer than {bound:g} s and was stopped; try again, "
                "or raise RetrievalConfig.route_timeout_seconds"
            ) from None
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
        intent = query_intent(query)
        keyword, vector, graph, query_vector = await self._routes(
            query, terms, intent, candidates, categories, timings
        )
        if config.vector_fill and query_vector is not None and vector:
            vector = await self._fill_vectors(keyword, vector, query_vector)

        fusion_started = time.perf_counter()
        fused = fuse_subroutes(
            keyword, vector, config=config, first_weight=config.fusion_bm25_weight
        )
        ceiling = 1.0 + config.agreement_bonus
        route_weight = route_weights(intent, config)
        document = {key: min(1.0, value.score / ceiling) for key, value in fused.items()}
        blended = blend_routes(
            document, graph.scores, route_weight, both_bonus=config.both_routes_bonus
        )
        if not blended:
            timings.fusion = time.perf_counter() - fusion_started
            return []
        first_stage = dict(blended)
        reach = max(pool_size * 2, candidates)
        depth = config.rerank_depth if config.rerank_weight > 0 else 0
        head = sorted(blended, key=lambda key: -blended[key])[: max(depth, reach)]
        state = Loaded(now=self._clock())
        indexed = await read_head(
            self._base, self._hidden, head, config.neighbour_weight > 0, state
        )
        rerank_started = time.perf_counter()
        signals = await self._reranker.apply(query, terms, blended, config, indexed=indexed)
        timings.extra["rerank"] = time.perf_counter() - rerank_started
        if config.neighbour_weight > 0:
            await add_neighbours(
                self._base,
                self._hidden,
                blended,
                limit,
                config.neighbour_weight,
                config.neighbour_reply_weight,
                state,
            )
        ranked = sorted(blended, key=lambda key: -blended[key])[:reach]
        # Usually all are read by now; one beyond the head is read here.
        await load(self._base, self._hidden, ranked, state)
        memories, hidden, now = state.memories, state.hidden, state.now
        allowed = set(categories) if categories else None
        pool: list[Memory] = []
        for memory_id in ranked:
            memory = memories.get(memory_id)
            if memory is None or memory.status != "active" or memory_id in hidden:
                continue
            if allowed is not None and memory.category not in allowed:
                continue
            pool.append(memory)
            if len(pool) >= pool_size:
                break
        weights = {
            "relevance": config.relevance_weight,
            "importance": config.importance_weight,
            "recency": config.recency_weight,
        }
        total_weight = sum(weights.values())
        final: dict[int, float] = {}
        parts: dict[int, tuple[float, float]] = {}
        for memory in pool:
            relevance = min(1.0, blended[memory.id])
            recency = recency_score(now - memory.updated_at, config.recency_decay_per_day)
            final[memory.id] = (
                weights["relevance"] * relevance
                + weights["importance"] * memory.importance
                + weights["recency"] * recency
            ) / total_weight
            parts[memory.id] = (relevance, recency)
        chosen = await diversify(
            self._base,
            self._tokenizer,
            config,
            self._fingerprint,
            self._dim,
            pool,
            final,
            limit,
            indexed,
        )
        timings.fusion = time.perf_counter() - fusion_started
        by_id = {memory.id: memory for memory in pool}
        results: list[SearchResult] = []
        for memory_id in chosen:
            memory = by_id[memory_id]
            explanation = None
            if explain:
                explanation = explain_result(
                    config,
                    memory,
                    fused.get(memory_id),
                    (keyword, vector, graph),
                    parts[memory_id],
                    final,
                    {**weights, **{f"route_{k}": v for k, v in route_weight.items()}},
                )
                found = signals.get(memory_id)
                if found is not None:
                    explanation.rerank.update(found.as_dict())
                    explanation.rerank["before"] = first_stage.get(memory_id, 0.0)
                    explanation.rerank["after"] = blended[memory_id]
            results.append(
                SearchResult(memory=memory, score=final[memory_id], explanation=explanation)
            )
        return results

    async def _fill_vectors(
        self, keyword: dict[int, float], vector: dict[int, float], query_vector: np.ndarray
    ) -> dict[int, float]:
        """``vector`` plus the cosine of each keyword candidate it lacks (stored vectors).

        The vector route returns its top candidates only; a keyword candidate
        outside them would otherwise count as having no similarity at all.
        """
        missing = [key for key in keyword if key not in vector]
        if not missing or self._fingerprint is None or not self._dim:
            return vector
        try:
            stored = await self._base.vectors_for(self._fingerprint, self._dim, missing)
        except Exception:
            logger.exception("could not load vectors for keyword candidates")
            return vector
        filled = dict(vector)
        for key, row in stored.items():
            filled[key] = float(np.dot(row, query_vector))
        return filled

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

    async def _routes(
        self,
        query: str,
        terms: Sequence[str],
        intent: QueryIntent,
        candidates: int,
        categories: tuple[str, ...] | None,
        timings: SearchTimings,
    ) -> tuple[dict[int, float], dict[int, float], GraphHits, np.ndarray | None]:
        """Run keyword, vector and graph routes side by side, each within the route timeout.

        The query is embedded once, for both the document and the graph vectors;
        its vector is returned last (``None`` when there is none).
        """
        if self._vectors is None and (self._graph is None or not self._config.graph_route):
            # keywords alone: nothing to run beside them, so no task either
            try:
                async with asyncio.timeout(self._config.route_timeout_seconds):
                    keyword = await self._keyword(terms, candidates, categories, timings)
            except TimeoutError:
                logger.warning(
                    "the keyword route took longer than %g s; no results from it",
                    self._config.route_timeout_seconds,
                )
                keyword = {}
            return keyword, {}, GraphHits(), None
        embedding: asyncio.Task[np.ndarray] | None = None
        if self._vectors is not None:
            embedding = asyncio.create_task(self._embed(query, timings))
        graph_on = self._graph is not None and self._config.graph_route
        # One nearest-neighbour search serves the vector route and the graph
        # route's speaker step: as deep as the deeper of the two asks.
        k = min(candidates, self._config.vector_candidate_cap)
        depth = max(k, self._graph.nearest_wanted(candidates)) if graph_on and self._graph else k
        nearest: asyncio.Task[tuple[np.ndarray, np.ndarray]] | None = None
        if embedding is not None:
            nearest = asyncio.create_task(self._nearest(embedding, depth, categories, timings))
        tasks: dict[str, asyncio.Task[Any]] = {
            "keyword": asyncio.create_task(self._keyword(terms, candidates, categories, timings)),
            "vector": asyncio.create_task(self._vector(nearest, k)),
        }
        if graph_on:
            route = self._graph_route(
                query, intent, embedding, nearest, candidates, categories, timings
            )
            tasks["graph"] = asyncio.create_task(route)
        try:
            _, pending = await asyncio.wait(
                tasks.values(), timeout=self._config.route_timeout_seconds
            )
        finally:
            helpers = [task for task in (embedding, nearest) if task is not None]
            for task in (*tasks.values(), *helpers):
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks.values(), *helpers, return_exceptions=True)
        results: dict[str, Any] = {}
        for name, task in tasks.items():
            if task in pending:
                logger.warning(
                    "the %s route took longer than %g s; using the other routes",
                    name,
                    self._config.route_timeout_seconds,
                )
            elif task.exception() is None:
                results[name] = task.result()
            else:
                logger.error("the %s route failed", name, exc_info=task.exception())
        query_vector = None
        if embedding is not None and not embedding.cancelled() and embedding.exception() is None:
            query_vector = embedding.result()
        return (
            results.get("keyword", {}),
            results.get("vector", {}),
            results.get("graph", GraphHits()),
            query_vector,
        )

    async def _embed(self, query: str, timings: SearchTimings) -> np.ndarray:
        assert self._vectors is not None
        started = time.perf_counter()
        try:
            return await self._vectors.embed_query(query)
        finally:
            timings.embed = time.perf_counter() - started

    async def _graph_route(
        self,
        query: str,
        intent: QueryIntent,
        embedding: asyncio.Task[np.ndarray] | None,
        nearest: asyncio.Task[tuple[np.ndarray, np.ndarray]] | None,
        candidates: int,
        categories: tuple[str, ...] | None,
        timings: SearchTimings,
    ) -> GraphHits:
        assert self._graph is not None
        started = time.perf_counter()
        try:
            return await self._graph.search(
                query,
                intent=intent,
                candidates=candidates,
                categories=categories,
                query_vector=None if embedding is None else asyncio.shield(embedding),
                nearest=None if nearest is None else asyncio.shield(nearest),
            )
        finally:
            timings.extra["graph"] = time.perf_counter() - started

    async def _nearest(
        self,
        embedding: asyncio.Task[np.ndarray],
        k: int,
        categories: tuple[str, ...] | None,
        timings: SearchTimings,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` memories nearest to the query (ids and scores, best first)."""
        assert self._vectors is not None
        query_vector = await asyncio.shield(embedding)
        started = time.perf_counter()
        allowed = None
        if categories:
            allowed = await self._base.filtered_ids(categories=categories)
            if len(allowed) == 0:
                return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        try:
            return await self._vectors.search(query_vector, k, allowed_ids=allowed)
        finally:
            timings.vector = time.perf_counter() - started

    async def _vector(
        self, nearest: asyncio.Task[tuple[np.ndarray, np.ndarray]] | None, k: int
    ) -> dict[int, float]:
        """The vector route: the best ``k`` of the shared nearest-neighbour search."""
        if nearest is None:
            return {}
        try:
            ids, scores = await asyncio.shield(nearest)
        except Exception:
            logger.exception("vector route failed; falling back to keywords")
            return {}
        return {
            int(i): float(score)
            for i, score in zip(ids[:k].tolist(), scores[:k].tolist(), strict=True)
            if i >= 0
        }
