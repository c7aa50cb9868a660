"""The relevance floor: which candidates of a search have evidence of matching it.

The routes return their best candidates however weak: a vector search always
has nearest neighbours, so without a floor a query about nothing stored would
return the whole memory, ranked. With ``RetrievalConfig.relevance_floor`` a
search first asks whether anything stored answers the query at all
(:func:`answered`), then keeps only the candidates with evidence of their own
(:func:`evidenced`).

The query is answered when some candidate

- holds ``RetrievalTuning.relevance_keyword_share`` of the query's content words,
  weighted by IDF (:func:`keyword_shares`; a word no memory holds weighs most, so a
  question whose distinctive words occur nowhere is mostly unanswered), with a
  cosine at least ``relevance_keyword_margin`` above the embedder's chance level
  (without a vector for the query, the share alone decides); or
- has a cosine ``relevance_query_margin`` above chance, by meaning alone.

A single common word ("year", "population", a Chinese word an encyclopedia
paragraph shares) is then no longer enough. Content words are the query's terms
that are not stopwords, and in Chinese or Japanese the words jieba cuts, not the
character bigrams between them (:func:`evidence_terms`).

Once answered, a candidate passes with evidence of its own:

- keywords: the keyword route found it on a query term that is not a stopword;
- vector: its cosine similarity to the query reaches the embedder's floor,
  ``chance + relevance_vector_margin * (1 - chance)``, where ``chance`` is the
  embedder's similarity of unrelated texts (:mod:`spade_memory.embedding.chance`),
  so the same margin means the same under any embedder;
- graph: the graph route found it through an entity the query names.

A turn next to a passing memory that received a share of its score (see
:func:`~spade_memory.retrieval.candidates.add_neighbours`) passes with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ..text.tokenizer import STOPWORDS, cut_cjk
from .graph import GraphHits
from .rerank import IndexedTokens, idf

__all__ = ["answered", "evidence_terms", "evidenced", "keyword_shares", "vector_floor"]

_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def vector_floor(chance: float, margin: float) -> float:
    """The cosine from which a vector match passes: ``margin`` of the way from the
    embedder's ``chance`` level to 1."""
    return chance + margin * (1.0 - chance)


def evidence_terms(query: str, terms: Sequence[str]) -> list[str]:
    """The terms of ``query`` that can be evidence of a match: not stopwords, and
    in a run of Chinese or Japanese characters only the words jieba cuts it into,
    not the character bigrams that straddle them ("理是" in "原理是什么")."""
    words: set[str] = set()
    for run in _CJK_RUN.findall(query):
        words.update(cut_cjk(run))
    return [
        term
        for term in terms
        if term not in STOPWORDS and (term in words or not _CJK_RUN.search(term))
    ]


def answered(
    shares: Mapping[int, float],
    vector: Mapping[int, float],
    *,
    keyword_share: float,
    keyword_floor: float | None,
    query_floor: float | None,
) -> bool:
    """Whether anything stored answers the query (see the module docstring).

    Args:
        shares: each keyword candidate's share of the query's content words.
        vector: candidates' cosines with the query.
        keyword_share: the share a candidate needs.
        keyword_floor: the cosine a candidate holding that share needs too
            (``None``: no vector is known, the share alone decides).
        query_floor: the cosine from which a candidate answers by meaning alone
            (``None``: none does).
    """
    for key, share in shares.items():
        if share >= keyword_share:
            cosine = vector.get(key)
            if keyword_floor is None or (cosine is not None and cosine >= keyword_floor):
                return True
    return query_floor is not None and any(cosine >= query_floor for cosine in vector.values())


def keyword_shares(
    terms: Sequence[str],
    frequencies: Mapping[str, int],
    total: int,
    indexed: IndexedTokens,
    candidates: Sequence[int],
) -> dict[int, float]:
    """The IDF-weighted share of ``terms`` (the query's content words, see
    :func:`evidence_terms`) each of ``candidates`` holds (those whose tokens are in
    ``indexed``). A term no memory holds has the highest weight: a query naming
    what the memory never mentions is mostly unanswered."""
    weights = {term: idf(frequencies.get(term, 0), total) for term in dict.fromkeys(terms)}
    whole = sum(weights.values())
    shares: dict[int, float] = {}
    if whole <= 0:
        return shares
    for memory_id in candidates:
        found = indexed.get(memory_id)
        if found is None:
            continue
        present = set(found[0])
        shares[memory_id] = sum(w for term, w in weights.items() if term in present) / whole
    return shares


def evidenced(
    terms: Sequence[str],
    keyword: Mapping[int, float],
    vector: Mapping[int, float],
    graph: GraphHits,
    *,
    cosine_floor: float | None,
) -> set[int]:
    """The candidates with evidence of their own (see the module docstring).

    Args:
        terms: the query's terms.
        keyword, vector, graph: what the routes found (vector scores are cosines).
        cosine_floor: the cosine from which a vector match passes (``None``: none does).
    """
    passing: set[int] = set()
    if any(term not in STOPWORDS for term in terms):
        passing.update(keyword)
    if cosine_floor is not None:
        passing.update(key for key, cosine in vector.items() if cosine >= cosine_floor)
    if graph.nodes:
        passing.update(graph.scores)
    return passing
