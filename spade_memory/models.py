"""Typed values of the memory: memories, search hits, notes, stats, and the embedder protocol."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "Embedder",
    "InteractionNote",
    "Memory",
    "MemoryRecovery",
    "MemoryStats",
    "ScoreExplanation",
    "SearchResult",
]


@dataclass(frozen=True, slots=True)
class Memory:
    """One long-term memory of an agent.

    Times are Unix timestamps in seconds. ``id`` is the SQLite rowid (local to
    the agent); ``uid`` is a globally unique id that survives export and import.
    """

    id: int
    uid: str
    category: str
    content: str
    context: str | None
    confidence: float
    importance: float
    status: str
    source_conversation: str | None
    source_sender: str | None
    created_at: float
    updated_at: float
    last_accessed: float | None
    access_count: int
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return {
            "id": self.id,
            "uid": self.uid,
            "category": self.category,
            "content": self.content,
            "context": self.context,
            "confidence": self.confidence,
            "importance": self.importance,
            "status": self.status,
            "source_conversation": self.source_conversation,
            "source_sender": self.source_sender,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "last_accessed": self.last_accessed,
            "access_count": self.access_count,
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True, slots=True)
class ScoreExplanation:
    """Why a search result ranked where it did: each route's score and the weights.

    Scores of a route that did not return the memory are ``None``.
    """

    keyword_score: float | None
    vector_score: float | None
    document_score: float | None
    graph_score: float | None
    relevance: float
    importance: float
    recency: float
    final_score: float
    weights: dict[str, float]
    routes: tuple[str, ...]
    rerank: dict[str, float] = field(default_factory=dict)
    """The second stage's signals (coverage, proximity, phrase), its lexical score
    and the score before and after it; empty when the second stage did not run."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A memory found by a search, with its final score (higher is better)."""

    memory: Memory
    score: float
    explanation: ScoreExplanation | None = None


@dataclass(frozen=True, slots=True)
class InteractionNote:
    """A note about a conversation with another agent."""

    conversation_id: str
    content: str
    author: str | None
    created_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "content": self.content,
            "author": self.author,
            "created_at": self.created_at,
        }


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """Counts describing one agent's memory."""

    agent: str
    total: int
    by_category: dict[str, int]
    by_status: dict[str, int]
    embedded: int
    pending_embeddings: int
    conversations: int
    notes: int
    in_memory: bool


@dataclass(frozen=True, slots=True)
class MemoryRecovery:
    """What opening a memory did about a lost database or notes file.

    ``action`` is ``"restored"`` (from ``backup``) or ``"started_empty"`` (asked
    for with ``start_empty``). What changed after ``lost_since`` (the backup's
    time) is not in the restored memory; ``memories_before`` is how many
    memories the lost database counted, as far as its damaged copy can still be
    read (``None``: unknown), against ``memories_restored``. ``message`` says it
    all in one paragraph, as logged.
    """

    action: Literal["restored", "started_empty"]
    file: Literal["database", "notes"]
    path: Path
    backup: Path | None
    lost_since: float | None
    quarantined: tuple[Path, ...]
    memories_restored: int | None
    memories_before: int | None
    notes_restored: bool
    message: str


@runtime_checkable
class Embedder(Protocol):
    """What the memory needs from an embedding model."""

    @property
    def dim(self) -> int:
        """Length of every vector."""
        ...

    @property
    def fingerprint(self) -> str:
        """Names the vectors: it changes whenever the same text would embed differently."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Embed stored texts: an ``(n, dim)`` ``float32`` array, rows L2-normalised."""
        ...

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Embed a search query: a ``(dim,)`` ``float32`` array, L2-normalised."""
        ...
