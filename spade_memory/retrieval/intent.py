"""What a query asks for, and the route weights that follows from it.

The document route (keywords and vectors over the memories' text) and the graph
route (entities and their relations) are blended 0.65 / 0.35 by default
(:class:`~spade_memory.config.RetrievalConfig`). A query's words shift that:

- relationship terms ("who", "friend", "works with", 同事, 朋友, 谁 ...): +0.2 graph;
- temporal terms ("when", "yesterday", "last week", 什么时候, 昨天 ...): +0.1 graph;
- definition or explanation terms ("what is", "explain", "why", 什么是, 解释 ...):
  +0.15 document.

Each weight is clamped to [0, 1] and the pair renormalised to sum to 1. The
relationship terms also name the relations a query asks about ("work with" ->
``works_with``), which the graph route follows first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..config import RetrievalConfig

__all__ = [
    "DEFINITION_SHIFT",
    "RELATIONSHIP_SHIFT",
    "TEMPORAL_SHIFT",
    "QueryIntent",
    "blend_routes",
    "graph_asked",
    "list_head",
    "query_intent",
    "route_shares",
    "route_weights",
]

RELATIONSHIP_SHIFT = 0.2
TEMPORAL_SHIFT = 0.1
DEFINITION_SHIFT = 0.15

# English phrases are matched on word boundaries, case-insensitively; Chinese ones
# as substrings. Each maps to the relations it asks about (empty: any relation).
_RELATIONSHIP_EN: Mapping[str, tuple[str, ...]] = {
    "who": (),
    "whom": (),
    "whose": (),
    "relationship": (),
    "related": (),
    "connected": (),
    "together": ("works_with",),
    "work with": ("works_with",),
    "works with": ("works_with",),
    "worked with": ("works_with",),
    "working with": ("works_with",),
    "colleague": ("works_with",),
    "colleagues": ("works_with",),
    "coworker": ("works_with",),
    "coworkers": ("works_with",),
    "teammate": ("works_with", "member_of"),
    "teammates": ("works_with", "member_of"),
    "team": ("member_of", "works_with"),
    "friend": ("friend_of",),
    "friends": ("friend_of",),
    "married": ("married_to",),
    "wife": ("married_to",),
    "husband": ("married_to",),
    "spouse": ("married_to",),
    "partner": ("married_to",),
    "sister": ("sibling_of",),
    "brother": ("sibling_of",),
    "sibling": ("sibling_of",),
    "mother": ("parent_of", "child_of"),
    "father": ("parent_of", "child_of"),
    "parent": ("parent_of", "child_of"),
    "child": ("parent_of", "child_of"),
    "son": ("parent_of", "child_of"),
    "daughter": ("parent_of", "child_of"),
    "family": ("parent_of", "child_of", "sibling_of", "married_to"),
    "boss": ("manages", "reports_to"),
    "manager": ("manages", "reports_to"),
    "manages": ("manages",),
    "reports to": ("reports_to", "manages"),
    "know": ("knows",),
    "knows": ("knows",),
    "met": ("knows",),
    "works at": ("works_at",),
    "work at": ("works_at",),
    "works for": ("works_at",),
    "employer": ("works_at",),
    "live": ("lives_in",),
    "lives": ("lives_in",),
    "member": ("member_of",),
}
_RELATIONSHIP_ZH: Mapping[str, tuple[str, ...]] = {
    "谁": (),
    "关系": (),
    "认识": ("knows",),
    "一起": ("works_with",),
    "同事": ("works_with",),
    "合作": ("works_with",),
    "共事": ("works_with",),
    "团队": ("member_of", "works_with"),
    "朋友": ("friend_of",),
    "好友": ("friend_of",),
    "结婚": ("married_to",),
    "妻子": ("married_to",),
    "丈夫": ("married_to",),
    "老婆": ("married_to",),
    "老公": ("married_to",),
    "家人": ("parent_of", "child_of", "sibling_of", "married_to"),
    "父亲": ("parent_of", "child_of"),
    "母亲": ("parent_of", "child_of"),
    "哥哥": ("sibling_of",),
    "姐姐": ("sibling_of",),
    "弟弟": ("sibling_of",),
    "妹妹": ("sibling_of",),
    "经理": ("manages", "reports_to"),
    "老板": ("manages", "reports_to"),
    "上司": ("manages", "reports_to"),
    "下属": ("manages", "reports_to"),
    "手下": ("manages", "reports_to"),
    "公司": ("works_at",),
    "单位": ("works_at",),
    "工作": ("works_at", "works_with"),
    "上班": ("works_at",),
    "住在": ("lives_in",),
    "住哪": ("lives_in",),
}
_TEMPORAL_EN = (
    "when",
    "what time",
    "what date",
    "which day",
    "date",
    "day",
    "week",
    "month",
    "year",
    "yesterday",
    "today",
    "tomorrow",
    "ago",
    "before",
    "after",
    "since",
    "until",
    "last",
    "next",
    "recently",
    "schedule",
    "how long",
)
_TEMPORAL_ZH = (
    "什么时候",
    "何时",
    "时间",
    "日期",
    "几点",
    "哪天",
    "昨天",
    "今天",
    "明天",
    "上周",
    "下周",
    "去年",
    "之前",
    "之后",
    "最近",
    "多久",
)
_DEFINITION_EN = (
    "what is",
    "what's",
    "what are",
    "define",
    "definition",
    "meaning",
    "mean",
    "means",
    "explain",
    "explanation",
    "describe",
    "how does",
    "how do",
    "how to",
    "why",
)
_DEFINITION_ZH = (
    "什么是",
    "是什么",
    "定义",
    "意思",
    "含义",
    "解释",
    "为什么",
    "如何",
    "怎么",
    "原理",
)


def _english(phrases: Mapping[str, object] | tuple[str, ...]) -> re.Pattern[str]:
    ordered = sorted(phrases, key=len, reverse=True)
    body = "|".join(re.escape(p).replace(r"\ ", r"\s+") for p in ordered)
    return re.compile(rf"(?<![\w'])(?:{body})(?![\w'])", re.IGNORECASE)


# A question asking for several things of a kind, named in plural between its
# question word and its auxiliary: "What activities does Melanie partake in?",
# "Which cities has Jon visited?", "What kinds of books does ... have?".
_AUXILIARY = r"(?:do|does|did|has|have|had|is|are|was|were|would|will|can|could|might|should)"
_LISTING_HEAD = re.compile(
    r"^\W*(?:in\s+)?(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?"
    rf"((?:(?!{_AUXILIARY}\b)[\w+/-]+\s+){{0,3}}?){_AUXILIARY}\b",
    re.IGNORECASE,
)
_SINGULAR_S = frozenset({"this", "his", "its", "us", "yes", "always", "as", "plus", "news"})
_RELATIONSHIP_RE = _english(_RELATIONSHIP_EN)
_TEMPORAL_RE = _english(_TEMPORAL_EN)
_DEFINITION_RE = _english(_DEFINITION_EN)


@dataclass(frozen=True, slots=True)
class QueryIntent:
    """Which kinds of terms a query holds, and the relations it asks about."""

    relationship: bool
    temporal: bool
    definition: bool
    relations: frozenset[str]


def query_intent(query: str) -> QueryIntent:
    """Find relationship, temporal and definition terms in ``query`` (English, Chinese)."""
    relations: set[str] = set()
    relationship = False
    for match in _RELATIONSHIP_RE.finditer(query):
        relationship = True
        relations.update(_RELATIONSHIP_EN[" ".join(match.group().lower().split())])
    for phrase, names in _RELATIONSHIP_ZH.items():
        if phrase in query:
            relationship = True
            relations.update(names)
    temporal = bool(_TEMPORAL_RE.search(query)) or any(p in query for p in _TEMPORAL_ZH)
    definition = bool(_DEFINITION_RE.search(query)) or any(p in query for p in _DEFINITION_ZH)
    return QueryIntent(relationship, temporal, definition, frozenset(relations))


def list_head(query: str) -> str | None:
    """The things a question asking for several of them names: "LGBTQ+ events" in
    "What LGBTQ+ events has Caroline participated in?"; ``None`` for any other query."""
    head = _LISTING_HEAD.match(query)
    if head is None:
        return None
    words = head.group(1).split()
    if not words:
        return None
    last = words[-1].casefold()
    if not last.endswith("s") or last.endswith(("ss", "us")) or last in _SINGULAR_S:
        return None
    return " ".join(words)


def graph_asked(intent: QueryIntent, config: RetrievalConfig) -> bool:
    """Whether the graph route runs for a query of this intent.

    Not for a question asking what something is or means, or how it is done, with
    no relational cue (``RetrievalTuning.graph_definition_gate``): what it asks
    is stated in the memories that share its words, and the graph route would
    only lift what the people or things it names said or did besides (on LoCoMo
    it cost such questions recall and helped none).
    """
    if config.tuning.graph_definition_gate and intent.definition:
        return intent.relationship
    return True


def route_weights(intent: QueryIntent, config: RetrievalConfig) -> dict[str, float]:
    """The document and graph weights for a query, shifted by its intent, summing to 1."""
    document = config.document_route_weight
    graph = config.graph_route_weight
    if intent.relationship:
        graph += RELATIONSHIP_SHIFT
    if intent.temporal:
        graph += TEMPORAL_SHIFT
    if intent.definition:
        document += DEFINITION_SHIFT
    document = min(1.0, max(0.0, document))
    graph = min(1.0, max(0.0, graph))
    total = document + graph
    if total <= 0:
        return {"document": 0.5, "graph": 0.5}
    return {"document": document / total, "graph": graph / total}


def blend_routes(
    document: Mapping[int, float],
    graph: Mapping[int, float],
    weights: Mapping[str, float],
    *,
    both_bonus: float,
) -> dict[int, float]:
    """Blend the routes' relevance scores (each on [0, 1]) by ``weights``.

    A route that returned nothing gives its weight to the other, so a search the
    graph cannot help ranks exactly as the document route alone would. A memory
    both routes return gets ``both_bonus``. Scores are not re-normalised per
    query, so a weak match stays weak.
    """
    w_document, w_graph = route_shares(document, graph, weights)
    if w_document + w_graph <= 0:
        return {}
    blended: dict[int, float] = {}
    for key in document.keys() | graph.keys():
        score = w_document * document.get(key, 0.0) + w_graph * graph.get(key, 0.0)
        if key in document and key in graph:
            score += both_bonus
        blended[key] = score
    return blended


def route_shares(
    document: Mapping[int, float], graph: Mapping[int, float], weights: Mapping[str, float]
) -> tuple[float, float]:
    """The document and graph routes' shares of a blend (:func:`blend_routes`), summing to 1.

    A route that returned nothing has no share; ``(0, 0)`` when neither returned anything.
    """
    w_document = weights.get("document", 0.0) if document else 0.0
    w_graph = weights.get("graph", 0.0) if graph else 0.0
    total = w_document + w_graph
    if total <= 0:
        return 0.0, 0.0
    return w_document / total, w_graph / total
