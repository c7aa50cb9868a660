"""How a memory is laid out as a row of the ``memories`` table, and read back.

:class:`NewMemory` is a memory about to be inserted, :class:`IndexedText` its
keyword-index text; :func:`row_to_memory` turns a row selected with
:data:`COLUMNS` into a :class:`~spade_memory.models.Memory`. ``Fetch`` and
``Transaction`` are the store's read query and write transaction, as the
modules that read and write these rows receive them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ..models import GLOBAL_SCOPE, Memory, Scope, Visibility
from ..text.relative_dates import memory_date_terms
from ..text.tokenizer import get_tokenizer

if TYPE_CHECKING:  # a read (``memory_reads``) loads no SQLite driver thread
    import aiosqlite

__all__ = [
    "COLUMNS",
    "INDEX_TEXT_VERSION",
    "M_COLUMNS",
    "ROW_WIDTH",
    "Fetch",
    "IndexedText",
    "NewMemory",
    "Transaction",
    "new_to_memory",
    "row_to_memory",
    "scope_of",
]

Fetch = Callable[[str, Sequence[Any]], Awaitable[list[Any]]]
"""Runs one read query on the store's connection and returns its rows."""

Transaction = Callable[[], "contextlib.AbstractAsyncContextManager[aiosqlite.Connection]"]
"""Opens one write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``) of the store."""

_PLAIN = (
    "id, uid, category, content, context, confidence, importance, status, "
    "source_conversation, source_sender, created_at, updated_at, last_accessed, "
    "access_count, metadata, owner, visibility"
)


def _readers(table: str) -> str:
    # The readers of a shared memory as a JSON array; other memories read none
    # (no lookup at all for them).
    return (
        f"CASE WHEN {table}.visibility = 'shared' THEN (SELECT json_group_array(r.reader) "
        f"FROM memory_readers AS r WHERE r.memory_id = {table}.id) END"
    )


COLUMNS = f"{_PLAIN}, {_readers('memories')}"
"""The columns :func:`row_to_memory` reads, in its order (from ``memories`` unaliased)."""

M_COLUMNS = ", ".join("m." + name.strip() for name in _PLAIN.split(",")) + ", " + _readers("m")
""":data:`COLUMNS` of the table aliased ``m``."""

ROW_WIDTH = 18
"""How many values :data:`COLUMNS` selects (a query may add its own after them)."""


INDEX_TEXT_VERSION = 4
"""The version of :meth:`IndexedText.of`'s output (2: the memory's date terms; 3:
invisible format characters no longer split a word; 4: no Chinese relative day read
inside a calendar date or a word, 5月3日前 or 以后天气). A memory stored by an older
version has its keyword row written again on open."""


@dataclass(frozen=True, slots=True)
class IndexedText:
    """The tokenised text of a memory, as indexed by FTS5 (tokens joined by spaces)."""

    content_tokens: str
    context_tokens: str = ""

    @classmethod
    def of(cls, content: str, context: str | None = None) -> IndexedText:
        """The keyword-index text of a memory: what every writer and checker uses.

        The context's tokens are followed by the memory's date terms (its day, the
        dates it names or means: :func:`~spade_memory.text.relative_dates.memory_date_terms`).
        """
        tokenize = get_tokenizer().tokenize
        context_tokens = [*tokenize(context or ""), *memory_date_terms(content, context)]
        return cls(" ".join(tokenize(content)), " ".join(context_tokens))


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A memory about to be inserted (validated by the caller).

    With ``dedupe``, a stored active memory of the same category and scope whose
    content has the same :func:`~spade_memory.text.content_key.content_key` is
    reinforced instead (see ``memory_writes.insert_rows``); with
    ``held_copies_only`` too, only one stored before its transaction (an imported
    memory reinforces one held here, never another of its export), and its uid is
    kept as an alias of the one it reinforced (``memory_aliases``), so the same
    import again finds it held.
    """

    uid: str
    category: str
    content: str
    context: str | None
    confidence: float
    importance: float
    created_at: float
    source_conversation: str | None = None
    source_sender: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    status: str = "active"
    updated_at: float | None = None
    last_accessed: float | None = None
    access_count: int = 0
    scope: Scope = GLOBAL_SCOPE
    dedupe: bool = False
    held_copies_only: bool = False


def scope_of(owner: str | None, visibility: str | None, readers: str | None) -> Scope:
    """The :class:`Scope` of a row's ``owner``, ``visibility`` and readers (JSON array)."""
    if visibility in (None, "global") and owner is None:
        return GLOBAL_SCOPE
    shared = frozenset(str(r) for r in json.loads(readers)) if readers else frozenset()
    return Scope(
        owner=owner, visibility=cast(Visibility, visibility or "global"), shared_with=shared
    )


def row_to_memory(row: Sequence[Any]) -> Memory:
    """The :class:`Memory` of a row selected with :data:`COLUMNS`."""
    try:
        # most memories have none: skip the parser for the empty object
        metadata = json.loads(row[14]) if row[14] and row[14] != "{}" else {}
    except json.JSONDecodeError:
        metadata = {"_unreadable_metadata": row[14]}
    return Memory(
        id=int(row[0]),
        uid=row[1],
        category=row[2],
        content=row[3],
        context=row[4],
        confidence=float(row[5]),
        importance=float(row[6]),
        status=row[7],
        source_conversation=row[8],
        source_sender=row[9],
        created_at=float(row[10]),
        updated_at=float(row[11]),
        last_accessed=None if row[12] is None else float(row[12]),
        access_count=int(row[13]),
        metadata=metadata if isinstance(metadata, dict) else {"value": metadata},
        scope=scope_of(row[15], row[16], row[17]),
    )


def new_to_memory(memory_id: int, new: NewMemory, metadata_json: str) -> Memory:
    """The :class:`Memory` a just-inserted row reads back as."""
    metadata = json.loads(metadata_json)
    return Memory(
        id=memory_id,
        uid=new.uid,
        category=new.category,
        content=new.content,
        context=new.context,
        confidence=float(new.confidence),
        importance=float(new.importance),
        status=new.status,
        source_conversation=new.source_conversation,
        source_sender=new.source_sender,
        created_at=float(new.created_at),
        updated_at=float(new.updated_at if new.updated_at is not None else new.created_at),
        last_accessed=None if new.last_accessed is None else float(new.last_accessed),
        access_count=int(new.access_count),
        metadata=metadata if isinstance(metadata, dict) else {"value": metadata},
        scope=new.scope,
    )
