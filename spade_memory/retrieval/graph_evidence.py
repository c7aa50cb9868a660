"""The graph route's keyword evidence: how strongly the graph ties memories to a query.

The steps :class:`~spade_memory.retrieval.graph.GraphRetriever` sums per memory:
the memories naming a matched node (:func:`memories_of`, by entry or by the
node's phrase in their text), the nodes one hop further (:func:`expand`), and the
entries holding the query's other words (:func:`text_matches`). Each match
weighs how specific its entity is (:func:`share`, :func:`rarity`).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping, Sequence

from ..models import Viewer
from ..storage.graph_store import GraphStore, NodeHit
from ..text.scripts import HAN_RUN as _CJK_RUN
from ..text.tokenizer import STOPWORDS, get_tokenizer
from ..text.topics import TOPIC_TYPE
from .intent import QueryIntent

__all__ = ["expand", "memories_of", "node_mentions", "rarity", "share", "text_matches"]

_MAX_TERMS = 8
_MAX_PHRASES = 20  # nodes per step whose phrase is looked for in the memories' text
_NO_PHRASE = frozenset({"date", "time", "weekday", "jid", "mention"})
_MAX_NEIGHBOURS = 40
_PER_NODE_EDGES = 100  # newest edges each way followed from one node
_ASKED_FACTOR = 1.5
_TYPED_FACTOR = 0.8
_COOCCURRENCE_FACTOR = 0.6
# A topic (or team) shared with the person a relation question names: the hop is
# what the question asks, so it is not decayed (the factor undoes graph_hop_decay 0.5).
_TOPIC_FACTOR = 3.0
# Asked whom someone works with, a team, employer or school both belong to answers it.
_SHARED_GROUP = frozenset({"member_of", "works_at", "manages", "reports_to", "studies_at"})
_LATIN = re.compile(r"[^\W\d_]{3,}|\d{3,}")


def share(entries: int, total: int) -> float:
    """How specific an entity named by ``entries`` of ``total`` entries is: 1 down to ~0."""
    return math.log1p(total / max(1, entries)) / math.log1p(total)


def rarity(entries: int, total: int) -> float:
    """The weight of a direct match: the specificity squared, so common entities fade fast.

    Of 400 entries, an entity named once weighs 1, by 20 of them 0.26, by half 0.03.
    """
    return share(entries, total) ** 2


async def node_mentions(
    store: GraphStore, node: NodeHit, cap: int, phrase_counts: dict[str, int]
) -> int:
    """How many memories' text mentions ``node`` (its words, or its Chinese words).

    A count of the words as a phrase is kept in ``phrase_counts`` (by the words
    joined by spaces), for :func:`memories_of` not to count it again.
    """
    if node.type in _NO_PHRASE:
        return 0
    terms = get_tokenizer().query_terms(node.value)[:8]
    if not terms:
        return 0
    phrase = not _CJK_RUN.search(node.value)
    count = await store.text_count(terms, phrase=phrase, cap=cap)
    if phrase:
        phrase_counts[" ".join(terms)] = count
    return count


async def memories_of(
    store: GraphStore,
    scores: dict[int, float],
    per_node: int,
    total: int,
    categories: Sequence[str] | None,
    power: int,
    *,
    cap: int,
    viewer: Viewer | None = None,
    counted: dict[int, int] | None = None,
    read_nodes: dict[int, NodeHit],
    phrase_counts: Mapping[str, int] | None = None,
) -> list[tuple[int, float]]:
    """``(memory, score)`` for the memories naming each node of ``scores``.

    A memory names a node when the node is one of its entry's nodes, or, for a
    concept of several words or a Chinese name ("security team", 星辰科技),
    when its text holds the phrase: the node may have come from another
    memory's pattern only. A phrase found in more memories than the node's
    entries (or than ``counted``, the mentions its score already reflects)
    weakens the node's score (its specificity, to ``power``).

    ``read_nodes`` holds the nodes read already (only the others are read here);
    ``phrase_counts`` the phrases counted already (see :func:`node_mentions`).
    """
    if not scores:
        return []
    pairs: dict[tuple[int, int], float] = {}
    wanted = list(scores)[:_MAX_PHRASES]
    unknown = [node_id for node_id in wanted if node_id not in read_nodes]
    if unknown:
        named, fetched = await asyncio.gather(
            store.node_memories(
                list(scores), per_node=per_node, categories=categories, viewer=viewer
            ),
            store.nodes_by_ids(unknown),
        )
        read_nodes.update((node.id, node) for node in fetched)
    else:
        named = await store.node_memories(
            list(scores), per_node=per_node, categories=categories, viewer=viewer
        )
    # in id order, as one read of them all would give
    phrased = sorted((read_nodes[key] for key in wanted if key in read_nodes), key=lambda n: n.id)
    for node_id, memory_id in named:
        pairs[(node_id, memory_id)] = scores[node_id]
    tokenizer = get_tokenizer()
    phrases: list[tuple[NodeHit, str, bool]] = []
    for node in phrased:
        if node.type in _NO_PHRASE:
            continue
        cjk = bool(_CJK_RUN.search(node.value))
        terms = tokenizer.tokenize(node.value)
        if not (cjk and len(node.value) >= 2) and len(terms) < 2:
            continue
        phrases.append((node, node.value if cjk else " ".join(terms), cjk))
    found = await asyncio.gather(
        *(
            store.phrase_memories(
                phrase,
                tokens=not cjk,
                limit=per_node,
                cap=cap,
                categories=categories,
                viewer=viewer,
                count=None if cjk else (phrase_counts or {}).get(phrase),
            )
            for _, phrase, cjk in phrases
        )
    )
    for (node, _, _), (count, ids) in zip(phrases, found, strict=True):
        score = scores[node.id]
        already = max(node.entries, (counted or {}).get(node.id, 0))
        if count > already:
            ratio = share(count, total) / share(max(1, already), total)
            score *= ratio**power
        for memory_id in ids:
            pairs[(node.id, memory_id)] = max(pairs.get((node.id, memory_id), 0.0), score)
    return [(memory_id, score) for (_, memory_id), score in pairs.items()]


async def expand(
    store: GraphStore,
    frontier: dict[int, float],
    seen: set[int],
    intent: QueryIntent,
    total: int,
    hub: float,
    decay: float,
    hubs: set[int],
    read_nodes: dict[int, NodeHit],
    viewer: Viewer | None = None,
) -> tuple[dict[int, float], dict[int, int]]:
    """The nodes one hop from ``frontier``, scored by the path that reaches them.

    From a hub only typed relations are followed (it co-occurs with everything).
    Topics are followed for questions about whom someone is linked to only
    ("who does Alice volunteer with?" goes Alice -> the animal shelter -> the
    memories about it), then as a typed relation. The nodes reached are added
    to ``read_nodes``.
    """
    reached: dict[int, float] = {}
    entries: dict[int, int] = {}
    for node, hit, relation, weight in await store.neighbour_hits(
        list(frontier), typed_only=hubs, per_node=_PER_NODE_EDGES, viewer=viewer
    ):
        neighbour, count = hit.id, hit.entries
        read_nodes.setdefault(neighbour, hit)
        if neighbour in seen or count == 0 or count > hub:
            continue
        topic = hit.type == TOPIC_TYPE or read_nodes[node].type == TOPIC_TYPE
        if topic and not intent.relationship:
            continue  # a shared topic answers whom someone is linked to, nothing else
        if relation in _SHARED_GROUP and "works_with" in intent.relations:
            factor = _TOPIC_FACTOR  # the team both are on: what "works with" asks
        elif relation in intent.relations:
            factor = _ASKED_FACTOR
        elif topic:
            factor, weight = _TOPIC_FACTOR, 1.0  # a person and what they are part of
        elif relation == "related_to":
            factor = _COOCCURRENCE_FACTOR
        else:
            factor = _TYPED_FACTOR
        # one co-occurrence (weight 0.5) counts 0.75; a typed or repeated link 1
        score = frontier[node] * decay * factor * min(1.0, 0.5 + weight / 2)
        score *= share(count, total)
        reached[neighbour] = max(reached.get(neighbour, 0.0), score)
        entries[neighbour] = count
    best = sorted(reached, key=lambda key: -reached[key])[:_MAX_NEIGHBOURS]
    return {key: reached[key] for key in best}, entries


async def text_matches(
    store: GraphStore,
    query: str,
    named: set[str],
    candidates: int,
    total: int,
    categories: Sequence[str] | None,
    cap: int,
    viewer: Viewer | None = None,
    asked: frozenset[str] = frozenset(),
) -> dict[int, float]:
    """Entries holding the query's other words, each word weighted by its rarity.

    Trigram search finds words of three characters or more (a Latin word only
    where it starts a word of the entry: "art" is not found in "party");
    shorter ones, such as two-character Chinese names, use ``LIKE``. Words
    naming a node already matched (``named``) are left out: the node counted;
    so are the words of the relations asked about (``asked``: "work" in "who
    does Alice work with?" asks for an edge, not for memories about work).
    """
    terms: list[str] = []
    cues = {part.removesuffix("s") for relation in asked for part in relation.split("_")}
    for word in _LATIN.findall(query.casefold()):
        if word not in STOPWORDS and word not in named and word.removesuffix("s") not in cues:
            terms.append(word)
    for run in _CJK_RUN.findall(query):
        if len(run) <= 2 and run not in named:
            terms.append(run)
        for word in get_tokenizer().tokenize(run):
            if _CJK_RUN.fullmatch(word) and word not in STOPWORDS and word not in named:
                terms.append(word)
    stripped = query.strip()
    if 0 < len(stripped) < 3 and stripped not in named and _CJK_RUN.search(stripped):
        terms.append(stripped)  # a short name, as typed ("A股"); "to", "ai" match inside words
    found: dict[int, float] = {}
    wanted = list(dict.fromkeys(terms))[:_MAX_TERMS]
    results = await asyncio.gather(
        *(_term_entries(store, term, candidates, cap, categories, viewer) for term in wanted)
    )
    for count, ids in results:
        weight = rarity(count, total)
        for memory_id in ids:
            found[memory_id] = found.get(memory_id, 0.0) + weight
    return found


async def _term_entries(
    store: GraphStore,
    term: str,
    candidates: int,
    cap: int,
    categories: Sequence[str] | None,
    viewer: Viewer | None,
) -> tuple[int, list[int]]:
    """``(how many entries hold term, to cap; the newest of them)``."""
    if len(term) < 3:
        return await store.like_entries(
            term, limit=candidates, cap=cap, categories=categories, viewer=viewer
        )
    count, hits = await store.search_entries(
        term, limit=candidates, cap=cap, categories=categories, viewer=viewer
    )
    if not _CJK_RUN.search(term):
        starts = re.compile(rf"(?<!\w){re.escape(term)}", re.IGNORECASE)
        hits = [hit for hit in hits if starts.search(hit[1])]
    return count, [memory_id for memory_id, _ in hits]
