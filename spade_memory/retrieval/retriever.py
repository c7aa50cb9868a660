"""The retriever: routes run side by side, fused, blended with importance and recency, MMR.

The document route has two sub-routes, keyword (BM25 over SQLite FTS5) and
vector (FAISS). The graph route (:mod:`spade_memory.retrieval.graph`) runs beside
it; the routes are blended with weights shifted by the query's intent
(:mod:`spade_memory.retrieval.intent`). Each route has ``route_timeout_seconds``;
a route (or sub-route) that fails or times out leaves the others' results, and a
vector failure falls back to keywords alone. With ``relevance_floor`` only
candidates with evidence of matching the query are kept
(:mod:`spade_memory.retrieval.relevance`), so a query about nothing stored
returns nothing. Every search can explain itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from ..config import RetrievalConfig
from ..errors import StorageError
from ..models import SearchResult, Viewer
from ..storage.base import BaseMemoryStore
from ..text.relative_dates import query_date_terms
from ..text.scripts import script_of
from ..text.spelling import closest, english_words, respellable, respellings
from ..text.tokenizer import Tokenizer, stem
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
    graph_asked,
    list_head,
    query_intent,
    route_shares,
    route_weights,
)
from .ranking import diversify, explain_result
from .relevance import (
    Floors,
    QueryEvidence,
    answered,
    evidence_terms,
    evidenced,
    gather,
    vector_floor,
)
from .rerank import LexicalReranker
from .search_gate import search_gate
from .search_state import SearchState, SearchTimings

__all__ = ["HiddenFilter", "Retriever", "SearchState", "SearchTimings", "VectorSource"]

logger = logging.getLogger(__name__)

# A query's words as whole runs of letters: an accented word ("málaga") is one word,
# never respelt (only ASCII words are), not "m" and a "laga" to respell.
_WORD = re.compile(r"[^\W\d_]+")

_CacheKey = tuple[str, int, tuple[str, ...], bool, Viewer | None, float]
_WIDEN_BY = 4  # a search crowded by memories with no live atom asks 4 times as many
_WIDEST = 16  # candidates, at most twice
_VISIBLE_SECONDS = 10.0  # a viewer's visible ids are read again after this at the latest
_VISIBLE_VIEWERS = 64  # viewers whose visible ids are kept


async def _ready(vector: np.ndarray) -> np.ndarray:
    """A query vector already made (by the run before a wider one)."""
    return vector


def _replace_word(text: str, word: str, by: str) -> str:
    """``text`` with each whole-word ``word`` (any case) replaced by ``by``,
    capitalised where it was."""

    def swap(match: re.Match[str]) -> str:
        return by.capitalize() if match.group()[0].isupper() else by

    return re.sub(rf"(?<![^\W\d_]){re.escape(word)}(?![^\W\d_])", swap, text, flags=re.IGNORECASE)


class VectorSource(Protocol):
    """What the retriever needs from the vector side (the indexer implements it)."""

    async def embed_query(self, text: str) -> np.ndarray: ...

    async def catch_up(self) -> int: ...

    async def search(
        self, query: np.ndarray, k: int, *, allowed_ids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]: ...


class Retriever:
    """Searches one agent's base memory.

    A search runs as named stages over its own :class:`SearchState`:
    :meth:`_plan` (terms, intent, sizes), :meth:`_run_routes` (embedding, the
    document route's keyword and vector sub-routes and the graph route, side by
    side), :meth:`_fill_vectors` (optional), :meth:`_fuse` (sub-routes, then
    routes), :meth:`_second_stage` (read the head, rerank), :meth:`_floor` (the
    relevance floor), :meth:`_neighbours`, :meth:`_pool`, :meth:`_final_score`
    (and ``min_score``), :meth:`_mmr` and :meth:`_results`.

    ``chance`` gives the current embedder's chance level for a script (the
    similarity of unrelated texts written in it), which the relevance floor's
    vector thresholds are drawn from; without it no memory passes the floor by
    its vector alone.
    """

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
        chance: Callable[[str], Awaitable[float]] | None = None,
    ) -> None:
        self._base = base
        # the floor's question (does anything stored answer the query?); a
        # measurement may replace it to record the evidence it is asked on
        self.floor_rule: Callable[[QueryEvidence, Floors], bool] = answered
        self._chance = chance
        self._chance_levels: dict[str, float] = {}
        self._english: frozenset[str] | None = None  # the dictionary, once loaded
        self._graph = graph
        self._hidden = hidden
        self._tokenizer = tokenizer
        self._config = config
        self._vectors = vectors
        self._fingerprint = fingerprint
        self._dim = dim
        self._clock = clock
        self._reranker = LexicalReranker(base, tokenizer)
        self._cache: dict[_CacheKey, tuple[float, tuple[int, int], list[SearchResult]]] = {}
        # Per viewer and categories: (generation, time read, the ids it sees, or
        # None when it sees every memory of those categories).
        self._visible: dict[
            tuple[Viewer, tuple[str, ...]], tuple[int, float, np.ndarray | None]
        ] = {}
        self._generation = 0
        self.last_timings = SearchTimings()
        """The timings of the search that finished last (searches side by side
        overwrite it; :meth:`search_with_timings` gives each its own)."""

    def use_vectors(self, fingerprint: str, dim: int) -> None:
        """Read the stored vectors of another embedder from now on (after it was
        switched in); cached results are dropped."""
        self._fingerprint = fingerprint
        self._dim = dim
        self.invalidate()

    def invalidate(self) -> None:
        """Forget cached results (called on every write, update and delete)."""
        self._generation += 1
        self._cache.clear()
        self._visible.clear()

    async def search(
        self,
        query: str,
        *,
        limit: int,
        categories: Sequence[str] | None = None,
        explain: bool = False,
        viewer: Viewer | None = None,
        min_score: float = 0.0,
    ) -> list[SearchResult]:
        """The best ``limit`` active memories for ``query``, best first; with a
        ``viewer``, of those it sees; only those scoring at least ``min_score``."""
        results, _ = await self.search_with_timings(
            query,
            limit=limit,
            categories=categories,
            explain=explain,
            viewer=viewer,
            min_score=min_score,
        )
        return results

    async def search_with_timings(
        self,
        query: str,
        *,
        limit: int,
        categories: Sequence[str] | None = None,
        explain: bool = False,
        viewer: Viewer | None = None,
        min_score: float = 0.0,
    ) -> tuple[list[SearchResult], SearchTimings]:
        """Like :meth:`search`, with where this search's time went (its own object)."""
        started = time.perf_counter()
        cats = tuple(sorted(categories)) if categories else ()
        key: _CacheKey = (query, limit, cats, explain, viewer, min_score)
        ttl = self._config.cache_ttl_seconds
        version = 0
        if ttl > 0:
            # a write of this process drops the cache; one of another process changes this
            version = await self._base.data_version()
            hit = self._cache.get(key)
            if (
                hit is not None
                and hit[1] == (self._generation, version)
                and time.monotonic() - hit[0] < ttl
            ):
                results = await self._reread(hit[2])
                cached = SearchTimings(total=time.perf_counter() - started, cached=True)
                self.last_timings = cached
                return results, cached
        generation = self._generation
        state = SearchState(
            query=query,
            limit=limit,
            categories=cats or None,
            explain=explain,
            viewer=viewer,
            min_score=min_score,
        )
        bound = 2 * self._config.route_timeout_seconds + 1
        with search_gate().counting():  # background derivation steps aside meanwhile
            try:
                async with asyncio.timeout(bound):
                    results = await self._run(state)
            except TimeoutError:
                raise StorageError(
                    f"the search took longer than {bound:g} s and was stopped; try again, "
                    "or raise RetrievalConfig.route_timeout_seconds"
                ) from None
            while self._crowded(state):
                # memories with no live atom (a fact superseded again and again) took
                # the places of the live ones: look deeper, once or twice, keeping
                # what was found if the deeper look runs out of time
                wider = state.wider(_WIDEN_BY)
                try:
                    async with asyncio.timeout(bound):
                        found = await self._run(wider)
                except TimeoutError:
                    break
                state, results = wider, found
        timings = state.timings
        timings.total = time.perf_counter() - started
        self.last_timings = timings
        if ttl > 0:
            if len(self._cache) > 256:
                self._cache.clear()
            if generation == self._generation:  # nothing written while it ran
                self._cache[key] = (time.monotonic(), (generation, version), list(results))
        return results, timings

    def _crowded(self, state: SearchState) -> bool:
        """Whether memories with no live atom left fewer results than asked for while a
        route gave all the candidates it was asked for (there may be more behind)."""
        if not state.dead or len(state.pool) >= state.limit:
            return False
        if state.widen >= _WIDEST:
            return False
        k = min(state.candidates, self._config.vector_candidate_cap)
        return len(state.keyword) >= state.candidates or (0 < k <= len(state.vector))

    async def _run(self, state: SearchState) -> list[SearchResult]:
        """The stages of one search, in order."""
        self._plan(state)
        await self._run_routes(state)
        if self._config.tuning.vector_fill and state.query_vector is not None and state.vector:
            state.vector = await self._fill_vectors(state.keyword, state.vector, state.query_vector)
        fusion_started = time.perf_counter()
        try:
            if not self._fuse(state):
                return []
            await self._second_stage(state)
            if self._config.relevance_floor and not await self._floor(state):
                return []
            await self._neighbours(state)
            await self._pool(state)
            self._final_score(state)
            await self._mmr(state)
        finally:
            state.timings.fusion = time.perf_counter() - fusion_started
        return self._results(state)

    def _plan(self, state: SearchState) -> None:
        """Sizes (MMR pool, candidates per sub-route), query terms and intent."""
        config = self._config
        state.pool_size = max(state.limit * config.mmr_pool_factor, state.limit)
        state.candidates = state.widen * max(
            state.limit * config.recall_candidate_multiplier,
            config.min_candidates,
            state.pool_size,
        )
        state.terms = self._tokenizer.query_terms(state.query)
        state.date_terms = query_date_terms(state.query, self._clock())
        state.intent = query_intent(state.query)

    async def _run_routes(self, state: SearchState) -> None:
        """Run keyword, vector and graph routes side by side, each within the route timeout.

        The query is embedded once, for both the document and the graph vectors;
        its vector is kept in ``state.query_vector`` (``None`` when there is none).
        Words no memory holds are respelt first (:meth:`_respell`): the keyword
        route searches their respellings too, and the vector and graph routes
        read the query with each typo replaced (the query as typed is embedded
        meanwhile, and again respelt only when a word was).
        """
        embedding: asyncio.Task[np.ndarray] | None = None
        given = state.given_vector
        if self._vectors is not None:
            embedding = asyncio.create_task(
                _ready(given)
                if given is not None
                else self._embed_query(state.query, state.timings)
            )
        try:
            async with asyncio.timeout(self._config.route_timeout_seconds):
                await self._respell(state)
        except Exception:  # a timeout included: the query as typed
            logger.exception("respelling the query failed; searching it as typed")
            state.respelt, state.spelled = {}, ""
        except BaseException:
            if embedding is not None:
                embedding.cancel()
            raise
        as_typed: asyncio.Task[np.ndarray] | None = None
        if state.spelled and embedding is not None and given is None:
            as_typed = embedding
            as_typed.cancel()
            embedding = asyncio.create_task(self._embed_query(state.spelled, state.timings))
        query, intent = state.spelled or state.query, state.intent
        candidates, categories, timings = state.candidates, state.categories, state.timings
        assert intent is not None
        graph_on = (
            self._graph is not None
            and self._config.graph_route
            and graph_asked(intent, self._config)
        )
        if self._vectors is None and not graph_on:
            # keywords alone: nothing to run beside them, so no task either
            try:
                async with asyncio.timeout(self._config.route_timeout_seconds):
                    keyword = await self._keyword(state)
            except TimeoutError:
                logger.warning(
                    "the keyword route took longer than %g s; no results from it",
                    self._config.route_timeout_seconds,
                )
                keyword = {}
            state.keyword = keyword
            return
        # One nearest-neighbour search serves the vector route and the graph
        # route's speaker step: as deep as the deeper of the two asks.
        k = min(candidates, self._config.vector_candidate_cap)
        depth = max(k, self._graph.nearest_wanted(candidates)) if graph_on and self._graph else k
        nearest: asyncio.Task[tuple[np.ndarray, np.ndarray]] | None = None
        if embedding is not None:
            nearest = asyncio.create_task(
                self._nearest(embedding, depth, categories, state.viewer, timings)
            )
        tasks: dict[str, asyncio.Task[Any]] = {
            "keyword": asyncio.create_task(self._keyword(state)),
            "vector": asyncio.create_task(self._vector(nearest, k)),
        }
        if graph_on:
            route = self._graph_route(
                query, intent, embedding, nearest, candidates, categories, state.viewer, timings
            )
            tasks["graph"] = asyncio.create_task(route)
        try:
            _, pending = await asyncio.wait(
                tasks.values(), timeout=self._config.route_timeout_seconds
            )
        finally:
            helpers = [task for task in (embedding, nearest, as_typed) if task is not None]
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
        if embedding is not None and not embedding.cancelled() and embedding.exception() is None:
            state.query_vector = embedding.result()
        state.keyword = results.get("keyword", {})
        state.vector = results.get("vector", {})
        state.graph = results.get("graph", GraphHits())

    async def _reread(self, results: list[SearchResult]) -> list[SearchResult]:
        """Cached ``results`` with their memories read again: recording accesses is no
        write that drops the cache, so their counts and times are read as they are now."""
        if not results:
            return []
        fresh = await self._base.get_many(result.memory.id for result in results)
        return [
            dataclasses.replace(result, memory=fresh[result.memory.id])
            for result in results
            if result.memory.id in fresh and fresh[result.memory.id].status == "active"
        ]

    async def _keyword(self, state: SearchState) -> dict[int, float]:
        """BM25 over the query's terms, the respellings of those no memory holds and
        the terms of the days it means (:mod:`spade_memory.text.relative_dates`)."""
        timings = state.timings
        started = time.perf_counter()
        try:
            extra = [term for found in state.respelt.values() for term in found]
            hits = await self._base.keyword_search(
                [*state.terms, *extra, *state.date_terms],
                limit=state.candidates,
                categories=state.categories,
                viewer=state.viewer,
            )
        except Exception:
            logger.exception("keyword route failed; continuing with vectors only")
            return {}
        finally:
            timings.keyword = time.perf_counter() - started
        return dict(hits)

    async def _respell(self, state: SearchState) -> None:
        """Respell the query's words that no memory holds and the English dictionary
        lacks (:mod:`spade_memory.text.spelling`):
        ``state.respelt`` gets each with the held terms one typo away, the most
        frequent first, and ``state.spelled`` the query with each such word
        replaced by the word of its first respelling (the text the query's vector
        and the graph's names come from). Nothing changes when every word is held."""
        tuning = self._config.tuning
        if tuning.typo_respellings <= 0:
            return
        words = {
            word: stem(word)
            for word in _WORD.findall(unicodedata.normalize("NFKC", state.query).casefold())
            if word.isascii() and respellable(word, tuning.typo_min_chars)
        }
        if not words:
            return
        frequencies, _ = await self._base.document_frequencies(list(set(words.values())))
        if not frequencies:
            return
        unseen = [word for word, term in words.items() if not frequencies[term]]
        if unseen:  # a word of the dictionary is meant as typed: the memory lacks it
            if self._english is None:  # loaded once per process, in a thread
                self._english = await asyncio.to_thread(english_words)
            unseen = [word for word in unseen if word not in self._english]
        if not unseen:
            return
        found_for = {word: respellings(word) for word in unseen}
        held = await self._base.held_terms(
            sorted({term for found in found_for.values() for term in found})
        )
        spelled = state.query
        for word, found in found_for.items():
            counts = {term: held.get(term, 0) for term in found}
            if state.viewer is None:
                near = closest(counts, tuning.typo_respellings)
            else:
                # only words of memories the viewer sees, the most held first: a word
                # only hidden memories hold would tell it that they hold it
                near = []
                for term in closest(counts, len(counts)):
                    if len(near) == tuning.typo_respellings:
                        break
                    if await self._seen_holds(term, state.viewer):
                        near.append(term)
            if not near:
                continue
            state.respelt[word] = near
            spelled = _replace_word(spelled, word, found[near[0]])
        if spelled != state.query:
            state.spelled = spelled

    async def _seen_holds(self, term: str, viewer: Viewer) -> bool:
        """Whether a memory ``viewer`` sees holds the index term ``term``."""
        return bool(await self._base.keyword_search([term], limit=1, viewer=viewer))

    async def _embed_query(self, query: str, timings: SearchTimings) -> np.ndarray:
        """The query's vector; for a question asking for several things of a kind
        (:func:`~spade_memory.retrieval.intent.list_head`), moved towards the
        vector of that kind's name by ``RetrievalTuning.list_head_weight``."""
        weight = self._config.tuning.list_head_weight
        head = list_head(query) if weight > 0 else None
        if head is None:
            return await self._embed(query, timings)
        whole, kind = await asyncio.gather(self._embed(query, timings), self._embed(head, timings))
        moved = whole + weight * kind
        norm = float(np.linalg.norm(moved))
        if norm <= 0:
            return whole
        return (moved / norm).astype(whole.dtype, copy=False)

    async def _embed(self, query: str, timings: SearchTimings) -> np.ndarray:
        assert self._vectors is not None
        started = time.perf_counter()
        try:
            return await self._vectors.embed_query(query)
        finally:
            timings.embed = time.perf_counter() - started

    async def _nearest(
        self,
        embedding: asyncio.Task[np.ndarray],
        k: int,
        categories: tuple[str, ...] | None,
        viewer: Viewer | None,
        timings: SearchTimings,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` memories nearest to the query (ids and scores, best first), of
        ``categories`` and seen by ``viewer`` (the filter is FAISS's id selector)."""
        assert self._vectors is not None
        query_vector = await asyncio.shield(embedding)
        await self._vectors.catch_up()  # vectors another process wrote meanwhile
        started = time.perf_counter()
        allowed = None
        if viewer is not None:
            allowed = await self._visible_ids(viewer, categories)
        elif categories:
            allowed = await self._base.filtered_ids(categories=categories)
        if allowed is not None and len(allowed) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        try:
            return await self._vectors.search(query_vector, k, allowed_ids=allowed)
        finally:
            timings.vector = time.perf_counter() - started

    async def _visible_ids(
        self, viewer: Viewer, categories: tuple[str, ...] | None
    ) -> np.ndarray | None:
        """The active ids of ``categories`` that ``viewer`` sees; ``None`` when it sees
        every memory and no category is asked (no filter needed).

        Kept per viewer until the next write (or ``_VISIBLE_SECONDS``), so that a
        viewer's searches read them once: a write of this memory drops them all.
        """
        key = (viewer, categories or ())
        now = time.monotonic()
        found = self._visible.get(key)
        if found is not None and found[0] == self._generation and now - found[1] < _VISIBLE_SECONDS:
            return found[2]
        generation = self._generation
        ids: np.ndarray | None
        if not categories and viewer.categories is None and await self._base.all_global():
            ids = None
        else:
            ids = await self._base.filtered_ids(categories=categories, viewer=viewer)
        if generation == self._generation:  # no write meanwhile
            if len(self._visible) >= _VISIBLE_VIEWERS:
                self._visible.clear()
            self._visible[key] = (generation, now, ids)
        return ids

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

    async def _graph_route(
        self,
        query: str,
        intent: QueryIntent,
        embedding: asyncio.Task[np.ndarray] | None,
        nearest: asyncio.Task[tuple[np.ndarray, np.ndarray]] | None,
        candidates: int,
        categories: tuple[str, ...] | None,
        viewer: Viewer | None,
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
                viewer=viewer,
                query_vector=None if embedding is None else asyncio.shield(embedding),
                nearest=None if nearest is None else asyncio.shield(nearest),
            )
        finally:
            timings.extra["graph"] = time.perf_counter() - started

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

    def _fuse(self, state: SearchState) -> bool:
        """Fuse the document route's sub-routes, then blend it with the graph route
        by the intent's weights; ``False`` when nothing was found."""
        config = self._config
        assert state.intent is not None
        state.fused = fuse_subroutes(
            state.keyword, state.vector, config=config, first_weight=config.fusion_bm25_weight
        )
        ceiling = 1.0 + config.agreement_bonus
        state.route_weights = route_weights(state.intent, config)
        document = {key: min(1.0, value.score / ceiling) for key, value in state.fused.items()}
        state.scores = blend_routes(
            document, state.graph.scores, state.route_weights, both_bonus=config.both_routes_bonus
        )
        if not state.scores:
            return False
        if state.intent.relationship and state.graph.scores:
            share, _ = route_shares(document, state.graph.scores, state.route_weights)
            state.linked = {
                key: value - share * document.get(key, 0.0)
                for key, value in state.scores.items()
                if key in state.graph.linked
            }
        state.first_stage = dict(state.scores)
        state.reach = max(state.pool_size * 2, state.candidates)
        return True

    async def _second_stage(self, state: SearchState) -> None:
        """Read the best candidates once (memories, indexed tokens, neighbours,
        hidden state), then rerank them lexically in place."""
        config = self._config
        scores = state.scores
        depth = config.tuning.rerank_depth if config.rerank_weight > 0 else 0
        head = sorted(scores, key=lambda key: -scores[key])[: max(depth, state.reach)]
        state.loaded = Loaded(now=self._clock())
        state.indexed = await read_head(
            self._base, self._hidden, head, config.neighbour_weight > 0, state.loaded
        )
        started = time.perf_counter()
        # A typo counts as the word it was respelt to: as typed it matches nothing,
        # and a query term no memory holds would only dilute every candidate's cover.
        query, terms = self._as_meant(state)
        state.signals = await self._reranker.apply(
            query, terms, scores, config, indexed=state.indexed, kept=state.linked
        )
        state.timings.extra["rerank"] = time.perf_counter() - started

    def _as_meant(self, state: SearchState) -> tuple[str, list[str]]:
        """The query and its terms as the routes read them: with each typo replaced
        by its first respelling (:meth:`_respell`), else as typed."""
        if state.spelled:
            return state.spelled, self._tokenizer.query_terms(state.spelled)
        return state.query, list(state.terms)

    async def _floor(self, state: SearchState) -> bool:
        """Keep only the candidates with evidence of matching the query
        (:mod:`spade_memory.retrieval.relevance`); ``False`` when nothing stored
        answers it or none has any."""
        started = time.perf_counter()
        try:
            return await self._floor_stage(state)
        finally:
            state.timings.extra["floor"] = time.perf_counter() - started

    async def _floor_stage(self, state: SearchState) -> bool:
        tuning = self._config.tuning
        script = script_of(state.query)
        chance = await self._chance_level(script) if state.query_vector is not None else None
        if chance is not None:
            state.cosine_floor = vector_floor(chance, tuning.relevance_vector_margin)
        query, query_terms = self._as_meant(state)  # a typo weighs as the word meant
        terms = evidence_terms(query, query_terms)
        frequencies: dict[str, int] = {}
        total = 0
        if state.keyword and terms:
            try:
                frequencies, total = await self._base.document_frequencies(terms)
            except Exception:
                logger.exception("term frequencies could not be read; no keyword evidence")
                terms = []
        found = gather(
            query,
            terms,
            frequencies,
            total,
            state.indexed,
            list(state.keyword),
            state.vector,
        )
        if chance is not None and state.query_vector is not None:
            holding = {key: 0.0 for key in found.held if key not in found.cosines}
            if holding:
                filled = await self._fill_vectors(holding, state.vector, state.query_vector)
                found = replace(found, cosines=filled)
        floors = Floors(
            chance=chance,
            evidence=tuning.relevance_evidence,
            similarity_weight=tuning.relevance_similarity_weight,
            keyword_share=tuning.relevance_keyword_share,
            query_margin=tuning.relevance_query_margin,
        )
        if not self.floor_rule(found, floors):
            state.scores = {}
            return False
        passing = evidenced(
            state.terms, state.keyword, state.vector, state.graph, cosine_floor=state.cosine_floor
        )
        state.scores = {key: value for key, value in state.scores.items() if key in passing}
        return bool(state.scores)

    async def _chance_level(self, script: str) -> float | None:
        """The current embedder's chance level for ``script`` (asked once per
        fingerprint), or ``None`` when it is unknown."""
        fingerprint = self._fingerprint
        if self._chance is None or fingerprint is None:
            return None
        key = f"{script}:{fingerprint}"
        known = self._chance_levels.get(key)
        if known is None:
            try:
                known = await self._chance(script)
            except Exception:
                logger.exception("the embedder's chance level is unknown; no vector-only results")
                return None
            self._chance_levels[key] = known
        return known

    async def _neighbours(self, state: SearchState) -> None:
        """Give the turns before and after each top hit a share of its score."""
        config = self._config
        if config.neighbour_weight <= 0:
            return
        assert state.loaded is not None
        started = time.perf_counter()
        await add_neighbours(
            self._base,
            self._hidden,
            state.scores,
            state.limit,
            config.neighbour_weight,
            config.tuning.neighbour_reply_weight,
            state.loaded,
            state.viewer,
        )
        state.timings.extra["neighbours"] = time.perf_counter() - started

    async def _pool(self, state: SearchState) -> None:
        """The MMR pool: the best active, visible candidates of the wanted categories
        (and, with a viewer, that it sees: the routes found only such; the rule is
        applied again to the rows as read, and a memory it drops is logged)."""
        assert state.loaded is not None
        scores = state.scores
        ranked = sorted(scores, key=lambda key: -scores[key])[: state.reach]
        # Usually all are read by now; one beyond the head is read here.
        await load(self._base, self._hidden, ranked, state.loaded)
        memories, hidden = state.loaded.memories, state.loaded.hidden
        allowed = set(state.categories) if state.categories else None
        for memory_id in ranked:
            memory = memories.get(memory_id)
            if memory_id in hidden:
                state.dead += 1
                continue
            if memory is None or memory.status != "active":
                continue
            if allowed is not None and memory.category not in allowed:
                continue
            if state.viewer is not None and not state.viewer.sees(memory):
                # The routes filter in SQL; only a row re-scoped by another process
                # since this viewer's visible ids were read gets here.
                logger.warning(
                    "memory %d reached the pool of a search by %s, who does not see it; left out",
                    memory_id,
                    state.viewer.jid,
                )
                continue
            state.pool.append(memory)
            if len(state.pool) >= state.pool_size:
                break

    def _final_score(self, state: SearchState) -> None:
        """Blend relevance, importance and recency into each pooled memory's score;
        with ``min_score``, the pool keeps those scoring at least that."""
        config = self._config
        assert state.loaded is not None
        now = state.loaded.now
        weights = state.weights = {
            "relevance": config.relevance_weight,
            "importance": config.importance_weight,
            "recency": config.recency_weight,
        }
        total_weight = sum(weights.values())
        for memory in state.pool:
            relevance = min(1.0, state.scores[memory.id])
            recency = recency_score(now - memory.updated_at, config.recency_decay_per_day)
            state.final[memory.id] = (
                weights["relevance"] * relevance
                + weights["importance"] * memory.importance
                + weights["recency"] * recency
            ) / total_weight
            state.parts[memory.id] = (relevance, recency)
        if state.min_score > 0:
            state.pool = [m for m in state.pool if state.final[m.id] >= state.min_score]

    async def _mmr(self, state: SearchState) -> None:
        """Choose the results from the pool by MMR (near-duplicates give way)."""
        started = time.perf_counter()
        state.chosen = diversify(
            self._tokenizer,
            self._config,
            state.pool,
            state.final,
            state.limit,
            state.indexed,
        )
        state.timings.extra["mmr"] = time.perf_counter() - started

    def _results(self, state: SearchState) -> list[SearchResult]:
        """The chosen memories as results, explained when asked."""
        by_id = {memory.id: memory for memory in state.pool}
        results: list[SearchResult] = []
        for memory_id in state.chosen:
            memory = by_id[memory_id]
            explanation = None
            if state.explain:
                explanation = explain_result(
                    self._config,
                    memory,
                    state.fused.get(memory_id),
                    (state.keyword, state.vector, state.graph),
                    state.parts[memory_id],
                    state.final,
                    {
                        **state.weights,
                        **{f"route_{k}": v for k, v in state.route_weights.items()},
                    },
                )
                found = state.signals.get(memory_id)
                if found is not None:
                    explanation.rerank.update(found.as_dict())
                    explanation.rerank["before"] = state.first_stage.get(memory_id, 0.0)
                    explanation.rerank["after"] = state.scores[memory_id]
            results.append(
                SearchResult(memory=memory, score=state.final[memory_id], explanation=explanation)
            )
        return results
