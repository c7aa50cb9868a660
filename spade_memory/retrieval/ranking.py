"""The last stage of a search: MMR over the ranked pool, and each result's explanation.

:func:`diversify` picks the results from the pool by maximal marginal relevance,
comparing memories by the words they hold; :func:`explain_result` says how a
result's score was made.
"""

from __future__ import annotations

from ..config import RetrievalConfig
from ..models import Memory, ScoreExplanation
from ..text.tokenizer import Tokenizer
from .fusion import FusedScore, mmr
from .graph import GraphHits
from .rerank import IndexedTokens

__all__ = ["diversify", "explain_result"]


def _jaccard(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


def diversify(
    tokenizer: Tokenizer,
    config: RetrievalConfig,
    pool: list[Memory],
    final: dict[int, float],
    limit: int,
    indexed: IndexedTokens,
) -> list[int]:
    """The ids of the ``limit`` results chosen from ``pool`` by MMR, in order.

    Memories are compared by the words they hold (Jaccard overlap of their
    indexed tokens), not by their vectors: a turn's vector holds the turn before
    it (:mod:`spade_memory.storage.embeddings`), so by vector an answer looks like
    a copy of its question and the turns around a hit like each other.
    """
    ids = [memory.id for memory in pool]
    if (config.mmr_lambda >= 1.0 and config.tuning.mmr_duplicate_threshold >= 1.0) or len(ids) <= 1:
        return sorted(ids, key=lambda key: -final[key])[:limit]
    by_id = {memory.id: memory for memory in pool}
    token_sets: dict[int, set[str]] = {}

    def tokens(memory_id: int) -> set[str]:
        found = token_sets.get(memory_id)
        if found is None:
            # the indexed tokens are the tokenizer's tokens of the content
            known = indexed.get(memory_id)
            words = known[0] if known is not None else tokenizer.tokenize(by_id[memory_id].content)
            found = token_sets[memory_id] = set(words)
        return found

    def similarity(a: int, b: int) -> float:
        return _jaccard(tokens(a), tokens(b))

    top = max(final.values())
    relevance = {key: final[key] / top if top > 0 else 0.0 for key in ids}
    return mmr(
        ids,
        relevance,
        similarity,
        k=limit,
        lambda_=config.mmr_lambda,
        duplicate_threshold=config.tuning.mmr_duplicate_threshold,
    )


def explain_result(
    config: RetrievalConfig,
    memory: Memory,
    fused: FusedScore | None,
    routes_found: tuple[dict[int, float], dict[int, float], GraphHits],
    parts: tuple[float, float],
    final: dict[int, float],
    weights: dict[str, float],
) -> ScoreExplanation:
    """How ``memory``'s score was made: each route's score, the parts and the weights."""
    keyword, vector, graph = routes_found
    routes = tuple(
        name
        for name, scores in (("keyword", keyword), ("vector", vector), ("graph", graph.scores))
        if memory.id in scores
    )
    return ScoreExplanation(
        keyword_score=keyword.get(memory.id),
        vector_score=vector.get(memory.id),
        document_score=None if fused is None else fused.score,
        graph_score=graph.scores.get(memory.id),
        relevance=parts[0],
        importance=memory.importance,
        recency=parts[1],
        final_score=final[memory.id],
        weights={
            **weights,
            "fusion_bm25": config.fusion_bm25_weight,
            "fusion_vector": 1.0 - config.fusion_bm25_weight,
            "agreement_bonus": config.agreement_bonus,
            "both_routes_bonus": config.both_routes_bonus,
            "mmr_lambda": config.mmr_lambda,
            "rerank": config.rerank_weight,
        },
        routes=routes,
        keyword_fused=None if fused is None else fused.first,
        vector_fused=None if fused is None else fused.second,
    )
