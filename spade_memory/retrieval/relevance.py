"""The relevance floor: which candidates of a search have evidence of matching it.

The routes return their best candidates however weak: a vector search always
has nearest neighbours, so without a floor a query about nothing stored would
return the whole memory, ranked. With ``RetrievalConfig.relevance_floor`` a
search first asks whether anything stored answers the query at all
(:func:`answered`), then keeps only the candidates with evidence of their own
(:func:`evidenced`).

The query is answered when some candidate has enough evidence: its share of the
query's content words, weighted by IDF (:meth:`QueryEvidence.shares`; a word no
memory holds weighs most, so a question whose distinctive words occur nowhere is
mostly unanswered, and a word most memories hold, such as a speaker's name in a
conversation, weighs next to nothing), plus
``RetrievalTuning.relevance_similarity_weight`` times its similarity to the query
above chance, reaches ``relevance_evidence``. Similarity is measured above the
chance level of the query's script (:func:`~spade_memory.embedding.chance.chance_by_script`):
unrelated Chinese texts are nearer each other than unrelated English ones, so one
margin fits both. Without a vector (keywords only, or a memory not embedded yet)
the share alone decides, against ``relevance_keyword_share``. A candidate whose
similarity is ``relevance_query_margin`` above chance answers by meaning alone.

A single common word ("year", "population", a Chinese word an encyclopedia
paragraph shares) is then no longer enough. Content words are the query's terms
that are not stopwords, and in Chinese or Japanese the words jieba cuts, not the
character bigrams between them (:func:`evidence_terms`); a typo counts as the word
it was respelt to (:mod:`spade_memory.text.spelling`), as the routes read it.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..text.scripts import CJK_RUN, script_of
from ..text.tokenizer import STOPWORDS, cut_cjk
from .graph import GraphHits
from .rerank import IndexedTokens, idf

__all__ = [
    "Floors",
    "QueryEvidence",
    "answered",
    "evidence_terms",
    "evidenced",
    "gather",
    "similarity_above",
    "vector_floor",
]


def vector_floor(chance: float, margin: float) -> float:
    """The cosine from which a vector match passes: ``margin`` of the way from the
    embedder's ``chance`` level to 1."""
    return chance + margin * (1.0 - chance)


def similarity_above(cosine: float, chance: float) -> float:
    """``cosine`` measured above the embedder's ``chance`` level, the inverse of
    :func:`vector_floor`: 0 at chance, 1 for identical texts, negative below."""
    return (cosine - chance) / (1.0 - chance)


def evidence_terms(query: str, terms: Sequence[str]) -> list[str]:
    """The terms of ``query`` that can be evidence of a match: not stopwords, and
    in a run of Chinese or Japanese characters only the words jieba cuts it into,
    not the character bigrams that straddle them ("理是" in "原理是什么")."""
    words: set[str] = set()
    for run in CJK_RUN.findall(query):
        words.update(cut_cjk(run))
    return [
        term
        for term in terms
        if term not in STOPWORDS and (term in words or not CJK_RUN.search(term))
    ]


@dataclass(frozen=True, slots=True)
class QueryEvidence:
    """What a search's candidates show of matching its query.

    Attributes:
        script: the query's script (:func:`~spade_memory.text.scripts.script_of`),
            whose chance level its similarities are measured against.
        frequencies: each content word of the query (:func:`evidence_terms`) and
            the number of memories holding it.
        total: the number of memories.
        held: the read candidates holding content words, and which.
        cosines: candidates' cosines with the query (empty without a query vector;
            a candidate not embedded yet has none).
    """

    script: str
    frequencies: Mapping[str, int]
    total: int
    held: Mapping[int, frozenset[str]]
    cosines: Mapping[int, float]

    def shares(self) -> dict[int, float]:
        """Each held candidate's share of the query's content words, weighted by
        IDF (a word no memory holds weighs most; a word most memories hold, such
        as a speaker's name in a conversation, next to nothing)."""
        weights = {term: idf(count, self.total) for term, count in self.frequencies.items()}
        whole = sum(weights.values())
        if whole <= 0:
            return {}
        return {
            key: sum(weights.get(term, 0.0) for term in terms) / whole
            for key, terms in self.held.items()
        }


@dataclass(frozen=True, slots=True)
class Floors:
    """The thresholds of :func:`answered`.

    Attributes:
        chance: the embedder's chance level for the query's script (``None``: no
            vector is known for the query).
        evidence: the evidence (share plus ``similarity_weight`` times similarity
            above chance) one candidate needs.
        similarity_weight: how much similarity above chance counts beside the share.
        keyword_share: the share one candidate needs when it has no vector.
        query_margin: the similarity above chance from which a candidate answers
            by meaning alone.
    """

    chance: float | None
    evidence: float
    similarity_weight: float
    keyword_share: float
    query_margin: float


def gather(
    query: str,
    terms: Sequence[str],
    frequencies: Mapping[str, int],
    total: int,
    indexed: IndexedTokens,
    candidates: Sequence[int],
    cosines: Mapping[int, float],
) -> QueryEvidence:
    """The evidence of ``candidates`` (those whose tokens are in ``indexed``) for
    the content words ``terms`` of ``query``."""
    wanted = dict.fromkeys(terms)
    held: dict[int, frozenset[str]] = {}
    for memory_id in candidates:
        found = indexed.get(memory_id)
        if found is None:
            continue
        present = frozenset(term for term in found[0] if term in wanted)
        if present:
            held[memory_id] = present
    return QueryEvidence(
        script=script_of(query),
        frequencies={term: frequencies.get(term, 0) for term in wanted},
        total=total,
        held=held,
        cosines=dict(cosines),
    )


def answered(evidence: QueryEvidence, floors: Floors) -> bool:
    """Whether anything stored answers the query (see the module docstring)."""
    chance = floors.chance
    for key, share in evidence.shares().items():
        cosine = evidence.cosines.get(key)
        if chance is None or cosine is None:
            if share >= floors.keyword_share:
                return True
        elif share + floors.similarity_weight * similarity_above(cosine, chance) >= floors.evidence:
            return True
    if chance is None:
        return False
    margin = floors.query_margin
    return any(similarity_above(cosine, chance) >= margin for cosine in evidence.cosines.values())


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
