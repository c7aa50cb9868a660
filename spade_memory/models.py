"""Typed values of the memory: memories and their scopes, search hits, notes, stats, and
the embedder protocol."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args, runtime_checkable

if TYPE_CHECKING:  # annotations only: reading a memory's notes does not load numpy
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "AsyncEmbedder",
    "ConversationInfo",
    "ConversationMessage",
    "Embedder",
    "InteractionNote",
    "Memory",
    "MemoryRecovery",
    "MemoryStats",
    "Role",
    "Scope",
    "ScoreExplanation",
    "SearchResult",
    "Viewer",
    "Visibility",
]

Visibility = Literal["global", "private", "shared", "conversation"]
"""Who may see a memory besides the agent itself (see :class:`Scope`)."""

VISIBILITIES: tuple[str, ...] = get_args(Visibility)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """Where a memory belongs: who told it, and who may see it besides the agent.

    The agent itself (its own code, maintenance, a caller passing no viewer) sees
    every memory. A conversation partner sees what :meth:`Viewer.sees` allows.

    Attributes:
        owner: the normalised bare JID of the one who told it (the server-given
            sender of the message, never a name from its body); ``None`` for what
            the agent's own code stored.
        visibility: ``"global"`` — anyone the agent talks with; ``"private"`` — only
            ``owner``; ``"shared"`` — ``owner`` and the bare JIDs in ``shared_with``;
            ``"conversation"`` — only within the conversation the memory came from
            (its ``source_conversation``).
        shared_with: the readers of a ``"shared"`` memory besides its owner.

    JIDs here must already be normalised bare JIDs (``identity.normalize_jid``);
    the memory's input checks refuse a scope that is not.
    """

    owner: str | None = None
    visibility: Visibility = "global"
    shared_with: frozenset[str] = frozenset()

    @classmethod
    def agent(cls) -> Scope:
        """The agent's own memory, seen by everyone it talks with."""
        return cls()

    @classmethod
    def private(cls, owner: str) -> Scope:
        """Only ``owner`` (and the agent) may see it."""
        return cls(owner=owner, visibility="private")

    @classmethod
    def shared(cls, owner: str | None, readers: Sequence[str]) -> Scope:
        """``owner`` and ``readers`` (and the agent) may see it."""
        return cls(owner=owner, visibility="shared", shared_with=frozenset(readers))

    @classmethod
    def conversation(cls, owner: str | None = None) -> Scope:
        """Only within the conversation it came from (its ``source_conversation``)."""
        return cls(owner=owner, visibility="conversation")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (readers sorted)."""
        return {
            "owner": self.owner,
            "visibility": self.visibility,
            "shared_with": sorted(self.shared_with),
        }


GLOBAL_SCOPE = Scope()


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
    scope: Scope = GLOBAL_SCOPE

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
            "scope": self.scope.to_dict(),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Viewer:
    """Who is looking at the memory: a conversation partner of the agent.

    Reads given a viewer (search, recall, list, get) return only what it
    :meth:`sees`; changes given a viewer (forget, update) act only on what it
    :meth:`may_change`. Passing no viewer means the agent itself, which sees
    and may change everything.

    Attributes:
        jid: the partner's normalised bare JID (server-given, never from a body).
        conversation_id: the conversation the look happens in, if any.
        categories: the categories this viewer may see of memories it does not
            own; ``None`` for all. A viewer always sees what it told the agent.
        may_change_global: whether it may forget or update global memories,
            whoever told them (never another's private, shared or conversation
            memories).
    """

    jid: str
    conversation_id: str | None = None
    categories: frozenset[str] | None = None
    may_change_global: bool = False

    def sees(self, memory: Memory) -> bool:
        """Whether ``memory`` is visible to this viewer (the rule the SQL filters apply)."""
        scope = memory.scope
        if scope.visibility == "conversation" and (
            memory.source_conversation is None
            or memory.source_conversation != self.conversation_id
        ):
            return False
        if scope.owner is not None and scope.owner == self.jid:
            return True
        if self.categories is not None and memory.category not in self.categories:
            return False
        if scope.visibility == "shared":
            return self.jid in scope.shared_with
        return scope.visibility in ("global", "conversation")

    def may_change(self, memory: Memory) -> bool:
        """Whether this viewer may forget or update ``memory``."""
        if not self.sees(memory):
            return False
        if memory.scope.owner is not None and memory.scope.owner == self.jid:
            return True
        return self.may_change_global and memory.scope.visibility == "global"


@dataclass(frozen=True, slots=True)
class ScoreExplanation:
    """Why a search result ranked where it did: each route's score and the weights.

    Scores of a route that did not return the memory are ``None``.
    ``keyword_score`` is SQLite's BM25 as it came (near zero for words most of a
    small memory holds: FTS5 floors their weight); ``keyword_fused`` and
    ``vector_fused`` are the two sub-routes' scores as fusion used them
    (normalised per query, best 1).
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
    keyword_fused: float | None = None
    vector_fused: float | None = None


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


Role = Literal["user", "assistant"]
"""Who wrote a conversation message: the partner (``"user"``) or the agent (``"assistant"``)."""

ROLES: tuple[str, ...] = get_args(Role)


@dataclass(frozen=True, slots=True)
class ConversationMessage:
    """One message of a conversation, as the agent's conversation store keeps it.

    Attributes:
        id: its place in the store (grows with every message the agent keeps).
        conversation_id: the conversation it belongs to.
        role: ``"user"`` for what the partner wrote, ``"assistant"`` for the agent's.
        sender: the normalised bare JID of its writer.
        text: its body.
        at: when it was written (seconds since the epoch).
        message_id: its XMPP message id, if it had one (a message delivered twice
            with the same id is kept once).
        revision: the revision of its conversation when it was kept (a conversation
            forgotten or reset starts a new revision).
    """

    id: int
    conversation_id: str
    role: Role
    sender: str
    text: str
    at: float
    message_id: str | None = None
    revision: int = 1

    @property
    def speaker(self) -> str:
        """The writer's name for a transcript: the local part of its JID, capitalised."""
        local = self.sender.partition("@")[0] or self.sender
        return local[:1].upper() + local[1:]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "conversation_id": self.conversation_id,
            "role": self.role,
            "sender": self.sender,
            "text": self.text,
            "at": self.at,
            "message_id": self.message_id,
            "revision": self.revision,
        }


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """One conversation of the agent's conversation store, in numbers.

    Attributes:
        conversation_id: its id.
        peer: the bare JID of the partner the agent talks with in it.
        messages: the messages kept.
        first_at, last_at: when the oldest and newest kept message were written.
        formed_through: the id of the last message formed into memories (0: none).
        pending: messages kept and not yet formed into memories.
        revision: how many times it was started (a forget or reset starts anew).
    """

    conversation_id: str
    peer: str
    messages: int
    first_at: float | None
    last_at: float | None
    formed_through: int
    pending: int
    revision: int


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """Counts describing one agent's memory."""

    agent: str
    total: int
    by_category: dict[str, int]
    by_status: dict[str, int]
    embedded: int
    pending_embeddings: int
    pending_derivations: int
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


@runtime_checkable
class AsyncEmbedder(Embedder, Protocol):
    """An :class:`Embedder` that can also embed without a thread (an HTTP endpoint).

    The memory prefers these methods when an embedder has them, and calls
    :meth:`prepare` once when a memory opens, before it reads ``dim`` or
    ``fingerprint``. The synchronous methods stay usable from a worker thread.
    """

    async def prepare(self, stored_fingerprints: Collection[str]) -> None:
        """Get ready to tell ``dim`` and ``fingerprint``.

        Args:
            stored_fingerprints: the fingerprints of the vectors the memory holds,
                from which an embedder may learn its dimension without asking.

        Raises:
            EmbeddingError: the dimension cannot be learnt (nothing stored and the
                endpoint does not answer).
        """
        ...

    async def aembed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Like :meth:`Embedder.embed_documents`, on the event loop."""
        ...

    async def aembed_query(self, text: str) -> NDArray[np.float32]:
        """Like :meth:`Embedder.embed_query`, on the event loop, quickly or not at all."""
        ...
