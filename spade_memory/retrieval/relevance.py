"""The relevance floor: which candidates of a search have evidence of matching it.

The routes return their best candidates however weak: a vector search always
has nearest neighbours, so without a floor a query about nothing stored would
return the whole memory, ranked. With ``RetrievalConfig.relevance_floor`` a
candidate passes only with evidence of its own:

- keywords: the keyword route found it on a query term that is not a stopword
  (and, with ``RetrievalTuning.relevance_keyword_share``, it holds that
  IDF-weighted share of the query's terms, a term no memory holds weighing most);
- vector: its cosine similarity to the query reaches the embedder's floor,
  ``chance + relevance_vector_margin * (1 - chance)``, where ``chance`` is the
  embedder's similarity of unrelated texts (:mod:`spade_memory.embedding.chance`),
  so the same margin means the same under any embedder;
- graph: the graph route found it through an entity the query names.

A turn next to a passing memory that received a share of its score (see
:func:`~spade_memory.retrieval.candidates.add_neighbours`) passes with it.
Keyword evidence needs no vector, so a memory found by keywords is returned
whether or not its embedding has caught up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..text.tokenizer import STOPWORDS
from .graph import GraphHits
from .rerank import IndexedTokens, idf

__all__ = ["evidenced", "keyword_shares", "vector_floor"]


def vector_floor(chance: float, margin: float) -> float:
    """The cosine from which a vector match passes: ``margin`` of the way from the
    embedder's ``chance`` level to 1."""
    return chance + margin * (1.0 - chance)


def keyword_shares(
    terms: Sequence[str],
    frequencies: Mapping[str, int],
    total: int,
    indexed: IndexedTokens,
    candidates: Sequence[int],
) -> dict[int, float]:
    """The IDF-weighted share of ``terms`` each of ``candidates`` holds (those whose
    tokens are in ``indexed``). A term no memory holds has the highest weight: a
    query naming what the memory never mentions is mostly unanswered."""
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
    shares: Mapping[int, float] | None = None,
    keyword_share: float = 0.0,
) -> set[int]:
    """The candidates with evidence of their own (see the module docstring).

    Args:
        terms: the query's terms.
        keyword, vector, graph: what the routes found (vector scores are cosines).
        cosine_floor: the cosine from which a vector match passes (``None``: none does).
        shares: each keyword candidate's share of the query terms, when
            ``keyword_share`` asks for one (a candidate without one fails).
        keyword_share: the share a keyword candidate needs (0: any).
    """
    passing: set[int] = set()
    if any(term not in STOPWORDS for term in terms):
        if keyword_share <= 0 or shares is None:
            passing.update(keyword)
        else:
            passing.update(key for key in keyword if shares.get(key, 0.0) >= keyword_share)
    if cosine_floor is not None:
        passing.update(key for key, cosine in vector.items() if cosine >= cosine_floor)
    if graph.nodes:
        passing.update(graph.scores)
    return passing
