"""The graph route: memories found through the entities a query names.

Keyword part, as evidence summed per memory:

1. the query's entities (and its words and word pairs, for queries typed in lower
   case) are looked up as graph nodes; a matched node counts for each memory
   naming it by how specific it is (an entity named once weighs 1, one named by
   a twentieth of the memories about 0.25). A concept of several words or a
   Chinese name ("security team", 星辰科技) also counts for the memories whose
   text holds it, though their extraction did not make it an entity;
2. from the matched nodes the graph is followed 1 hop (or 2, see
   ``RetrievalConfig.graph_hops``; a question about whom someone is linked to
   goes on from the topics of the first hop to their people: person -> topic ->
   person), ``graph_hop_decay`` per hop: "who does Alice
   work with?" reaches "Bob and Alice are on the payments team" (Alice) and from
   there the memories about Bob and about the payments team. Edges of the
   relation the query asks about ("work with" -> ``works_with``) count most,
   typed ones next, co-occurrence least;
3. trigram full-text search over the entries' summaries adds the query's other
   words, each by its rarity (a query shorter than three characters uses ``LIKE``).

A query naming a speaker (a name that starts memories written as ``"Name: text"``,
:mod:`spade_memory.text.speakers`) gives the memories that speaker said among
the ``_SPEAKER_POOL`` closest to the query vector (the document vectors) the
small score ``RetrievalTuning.graph_speaker_score``: with the routes' both-route
bonus it lifts what the person said above what others said to them, where the name alone selects
nothing (in a two-person chat each name is in about every memory).

Entities too common to say anything (named by more than ``graph_hub_fraction``
of the memories: the speakers of a chat, the agent's owner) find no memories by
themselves; they add their small weight to memories found otherwise and are
followed through typed relations only. Expansion follows a node's newest edges
only (``_PER_NODE_EDGES`` each way, read in index order; the keyword steps are in
:mod:`spade_memory.retrieval.graph_evidence`), so an entity linked to
thousands of others costs no more than one linked to a hundred.

A memory's evidence becomes its strength ``1 - exp(-evidence)``; the vector part
(the query vector against one vector per graph entry) then orders the anchored
memories by ``graph_keyword_weight`` (not for a question about whom someone is
linked to, where the links alone order them): it never adds a memory of its own, so a
query naming nothing known leaves the graph route empty and the document route
alone ranks. Route scores are on [0, 1].
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..config import RetrievalConfig
from ..models import Viewer
from ..storage.graph_store import GraphStore, NodeHit
from ..text.extraction import EntityExtractor
from ..text.speakers import SPEAKER_TYPE
from ..text.topics import TOPIC_TYPE
from .fusion import minmax
from .graph_evidence import (
    expand,
    memories_of,
    node_mentions,
    rarity,
    text_matches,
)
from .intent import QueryIntent

__all__ = ["GraphHits", "GraphRetriever", "GraphVectorSource", "hub_threshold"]

logger = logging.getLogger(__name__)

_FTS_WEIGHT = 0.5
_MIN_STRENGTH = 0.05
_HUB_WEIGHT = 0.5  # what a hub passes on along its typed relations
_HUB_MIN_ENTRIES = 20
_HUB_MAX_ENTRIES = 1_000  # however large the memory, an entity named this often is a hub
_PER_NEIGHBOUR = 20
_SHARED = frozenset({TOPIC_TYPE, "thing"})  # what people share: a topic, a team they joined
_PEOPLE = frozenset({"person", "name", "mention", "jid"})
_SPEAKER_POOL = 100  # at least this many nearest memories looked at for a named speaker


class GraphVectorSource(Protocol):
    """What the graph route needs of the vector side: a search over entry vectors."""

    async def search_graph(
        self, query: np.ndarray, k: int, *, allowed_ids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass(slots=True)
class GraphHits:
    """What the graph route found: route scores on [0, 1] and their parts."""

    scores: dict[int, float] = field(default_factory=dict)
    keyword: dict[int, float] = field(default_factory=dict)
    vector: dict[int, float] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()
    # memories found only through a link (a hop from what the query names): they
    # hold the answer to a question about whom someone is linked to, not its words
    linked: frozenset[int] = frozenset()


def hub_threshold(total: int, fraction: float) -> float:
    """How many memories may name an entity before it is a hub, among ``total`` memories.

    ``fraction`` of them (``RetrievalTuning.graph_hub_fraction``), but at least
    ``_HUB_MIN_ENTRIES`` (in a small memory no entity is common enough to say
    nothing) and at most ``_HUB_MAX_ENTRIES``.
    """
    return max(_HUB_MIN_ENTRIES, min(fraction * max(2, total), _HUB_MAX_ENTRIES))


class GraphRetriever:
    """The graph route over one agent's graph tables."""

    def __init__(
        self,
        store: GraphStore,
        extractor: EntityExtractor,
        *,
        config: RetrievalConfig,
        vectors: GraphVectorSource | None = None,
    ) -> None:
        self._store = store
        self._extractor = extractor
        self._config = config
        self._vectors = vectors

    async def search(
        self,
        query: str,
        *,
        intent: QueryIntent,
        candidates: int,
        categories: Sequence[str] | None = None,
        query_vector: Awaitable[np.ndarray] | None = None,
        nearest: Awaitable[tuple[np.ndarray, np.ndarray]] | None = None,
        viewer: Viewer | None = None,
    ) -> GraphHits:
        """The memories the graph links to ``query``, with route scores on [0, 1].

        Only memories the query's entities (or rarer words) anchor are returned;
        the entry vectors order them and never add memories of their own. The
        memories a speaker the query names said, among those nearest to the
        query, are returned with at least ``graph_speaker_score``. ``nearest``
        is the document-vector search the caller runs anyway (at least
        :meth:`nearest_wanted` ids, best first, filtered as this search is);
        without it there is no speaker step. With a ``viewer``, only memories it
        sees are found, and only through edges of memories it sees.
        """
        raw, nodes, speakers, linked = await self._keyword(
            query, intent, candidates, categories, viewer
        )
        floor = self._config.tuning.graph_speaker_score
        spoken: set[int] = set()
        if speakers and nearest is not None and floor > 0:
            hits, spoken = await asyncio.gather(
                self._anchored(raw, nodes, candidates, query_vector, intent),
                self._spoken(speakers, nearest),
            )
        else:
            hits = await self._anchored(raw, nodes, candidates, query_vector, intent)
        hits.linked = frozenset(linked.intersection(hits.scores))
        for memory_id in spoken:
            if hits.scores.get(memory_id, 0.0) < floor:
                hits.scores[memory_id] = floor
        return hits

    async def _anchored(
        self,
        raw: dict[int, float],
        nodes: tuple[str, ...],
        candidates: int,
        query_vector: Awaitable[np.ndarray] | None,
        intent: QueryIntent,
    ) -> GraphHits:
        """The memories the keyword evidence ``raw`` anchors, ordered with the entry vectors."""
        strength = {key: 1.0 - math.exp(-value) for key, value in raw.items()}
        anchored = [key for key in strength if strength[key] >= _MIN_STRENGTH]
        anchored.sort(key=lambda key: -strength[key])
        anchored = anchored[: max(candidates * 2, 50)]
        if not anchored:
            return GraphHits(nodes=nodes)
        vector: dict[int, float] = {}
        if query_vector is not None:
            vector = await self._vector(query_vector, anchored, len(anchored))
        weight = self._config.tuning.graph_keyword_weight
        if intent.relationship:
            # Who is linked to whom is the graph's to say: an entry's vector is about
            # its own words, and would put the person's own memory before the link.
            weight = 1.0
        closeness = minmax({key: vector[key] for key in anchored if key in vector})
        scores = {
            key: strength[key] * (weight + (1.0 - weight) * closeness.get(key, 0.0))
            if closeness
            else strength[key]
            for key in anchored
        }
        ranked = sorted(scores, key=lambda key: -scores[key])[:candidates]
        return GraphHits(
            scores={key: scores[key] for key in ranked},
            keyword={key: strength[key] for key in ranked},
            vector={key: vector[key] for key in ranked if key in vector},
            nodes=nodes,
        )

    # -- keyword -------------------------------------------------------------

    async def _keyword(
        self,
        query: str,
        intent: QueryIntent,
        candidates: int,
        categories: Sequence[str] | None,
        viewer: Viewer | None,
    ) -> tuple[dict[int, float], tuple[str, ...], list[NodeHit], set[int]]:
        """Evidence per memory, summed: each match through an entity weighs its rarity.

        A match through a rare entity counts about 1, through an entity most
        memories name almost nothing. Such hubs find no memories by themselves,
        and are expanded through typed relations only ("Melanie likes pottery").
        The speaker nodes the query names are returned apart (third), and the
        memories found only through a hop (fourth).
        """
        store = self._store
        # Queries of one step go to the connection together (one connection serves
        # them in turn; submitting them at once saves a round trip each).
        count, matched = await asyncio.gather(
            store.memory_count(), store.nodes_by_keys(self._extractor.query_keys(query))
        )
        total = max(2, count)
        hub = hub_threshold(total, self._config.tuning.graph_hub_fraction)
        cap = int(hub) + 1  # counting past a hub's size tells nothing more
        speakers = [n for n in matched if n.entries and n.type == SPEAKER_TYPE]
        nodes = [n for n in matched if n.entries and n.type != SPEAKER_TYPE]
        named = tuple(node.key for node in nodes)
        # How common a name is, is how many memories mention it, entity or not: a
        # common word that one memory happened to capitalise is not a rare entity.
        phrase_counts: dict[str, int] = {}  # phrase -> memories holding it, to cap
        mentions = await asyncio.gather(
            *(node_mentions(store, node, cap, phrase_counts) for node in nodes)
        )
        mentioned = {node.id: max(node.entries, m) for node, m in zip(nodes, mentions, strict=True)}
        weights = {node.id: rarity(mentioned[node.id], total) for node in nodes}
        seeds = {node.id for node in nodes if mentioned[node.id] <= hub}
        hubs = [node.id for node in nodes if mentioned[node.id] > hub]
        raw: dict[int, float] = {}
        per_node = max(50, candidates * 2)
        direct = {node_id: weights[node_id] for node_id in seeds}
        read_nodes = {node.id: node for node in nodes}
        for memory_id, score in await memories_of(
            store,
            direct,
            per_node,
            total,
            categories,
            2,
            cap=cap,
            counted=mentioned,
            read_nodes=read_nodes,
            phrase_counts=phrase_counts,
            viewer=viewer,
        ):
            raw[memory_id] = raw.get(memory_id, 0.0) + score
        found_directly = set(raw)
        frontier = {n.id: weights[n.id] if n.id in seeds else _HUB_WEIGHT for n in nodes}
        seen = set(weights)
        decay = self._config.tuning.graph_hop_decay
        hops = self._config.graph_hops
        topics: dict[int, float] = {}
        for hop in range(hops + 1):
            if hop == hops:
                # Person -> topic -> person, for a question about whom someone is
                # linked to: from the topics and things (a team one joined) of the
                # first hop on to their people ("Marta" -> the payments team ->
                # "Jonas"), when no second hop did.
                frontier = topics if hops == 1 else {}
            if not frontier:
                break
            frontier, entries = await expand(
                store, frontier, seen, intent, total, hub, decay, set(hubs), read_nodes, viewer
            )
            if hop == hops:
                frontier = {k: v for k, v in frontier.items() if read_nodes[k].type in _PEOPLE}
            elif hop == 0 and intent.relationship:
                topics = {k: v for k, v in frontier.items() if read_nodes[k].type in _SHARED}
            seen.update(frontier)
            for memory_id, score in await memories_of(
                store,
                frontier,
                _PER_NEIGHBOUR,
                total,
                categories,
                1,
                cap=cap,
                counted=entries,
                read_nodes=read_nodes,
                viewer=viewer,
            ):
                raw[memory_id] = raw.get(memory_id, 0.0) + score
        named_words = {word for key in named for word in key.split()}
        text_hits = await text_matches(
            store, query, named_words, candidates, total, categories, cap, viewer, intent.relations
        )
        linked = set(raw) - found_directly - set(text_hits)
        for memory_id, value in text_hits.items():
            raw[memory_id] = raw.get(memory_id, 0.0) + _FTS_WEIGHT * value
        if hubs and raw:
            # A hub still adds its (small) weight to the memories found otherwise.
            for memory_id, node_id in await store.entry_nodes(list(raw), hubs):
                raw[memory_id] += weights[node_id]
        return raw, named, speakers, linked

    def nearest_wanted(self, candidates: int) -> int:
        """How many nearest memories the speaker step looks at (0: it is off)."""
        if self._config.tuning.graph_speaker_score <= 0:
            return 0
        return max(_SPEAKER_POOL, candidates * 3)

    async def _spoken(
        self, speakers: Sequence[NodeHit], nearest: Awaitable[tuple[np.ndarray, np.ndarray]]
    ) -> set[int]:
        """The memories ``speakers`` said among ``nearest`` (the document-vector search).

        The nearest are found first and the speakers' entries checked among them
        only, so a speaker of a hundred thousand memories costs what one of ten
        does. If either step fails the speakers are left out, the route stands.
        """
        try:
            ids, _ = await nearest
            near = [int(i) for i in ids.tolist() if i >= 0]
            if not near:
                return set()
            pairs = await self._store.entry_nodes(near, [node.id for node in speakers])
        except Exception:
            logger.exception("the speakers' memories could not be read; leaving them out")
            return set()
        return {memory_id for memory_id, _ in pairs}

    # -- vector -----------------------------------------------------------------

    async def _vector(
        self, query_vector: Awaitable[np.ndarray], among: Sequence[int], k: int
    ) -> dict[int, float]:
        """Cosine similarity of the query to the entries of ``among``: the ``k`` closest."""
        if self._vectors is None or not among or k <= 0:
            return {}
        try:
            vector = await query_vector
            allowed = np.fromiter(among, dtype=np.int64, count=len(among))
            ids, scores = await self._vectors.search_graph(vector, k, allowed_ids=allowed)
        except Exception:
            logger.exception("graph vector search failed; using graph keywords only")
            return {}
        return {int(i): float(s) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)}
