"""Reading the memory files spade_llm writes, without spade_llm.

spade_llm (0.3) keeps, per agent, in one folder:

- ``{jid}_base_memory.db``: SQLite, one table ``agent_memories`` (``id`` TEXT key,
  ``agent_id`` the agent's JID, ``category``, ``content``, ``context``,
  ``confidence``, ``created_at`` and ``last_accessed`` as ISO-8601 text,
  ``access_count``);
- ``{jid}_interactions.json``: ``{"agent_id": JID, "interactions":
  {conversation_id: [{"content": ..., "timestamp": ISO-8601}, ...]}}``.

(``{jid}`` is the JID with ``@`` and ``/`` replaced by ``_``.) Both are read only:
the database is opened read-only and never written. A file that cannot be read
raises :class:`~spade_memory.errors.StorageError` with one line saying why.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import StorageError
from ..limits import LIMITS

__all__ = [
    "BASE_MEMORY_SUFFIX",
    "INTERACTIONS_SUFFIX",
    "SpadeLlmMemoryRow",
    "SpadeLlmNotes",
    "datetime_of",
    "read_base_memory",
    "read_interactions",
    "seconds_of",
]

BASE_MEMORY_SUFFIX = "_base_memory.db"
INTERACTIONS_SUFFIX = "_interactions.json"
_COLUMNS = (
    "id",
    "agent_id",
    "category",
    "content",
    "context",
    "confidence",
    "created_at",
    "last_accessed",
    "access_count",
)


@dataclass(frozen=True, slots=True)
class SpadeLlmMemoryRow:
    """One row of spade_llm's ``agent_memories``, as stored (times as their text)."""

    id: str
    agent_id: str
    category: str
    content: str
    context: str | None
    confidence: float | None
    created_at: str | None
    last_accessed: str | None
    access_count: int | None


@dataclass(frozen=True, slots=True)
class SpadeLlmNotes:
    """One ``*_interactions.json`` file: its agent and its notes per conversation."""

    agent_id: str | None
    conversations: dict[str, list[dict[str, Any]]]
    left_out: list[str] = field(default_factory=list)
    """What is not a note of spade_llm's layout, one line each."""


def seconds_of(value: object) -> float | None:
    """Unix seconds of an ISO-8601 time as spade_llm writes it (local time when naive)."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        seconds = datetime.fromisoformat(value.strip()).timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    return seconds if 0 <= seconds <= LIMITS.latest_time else None  # else: not known


def datetime_of(seconds: float) -> datetime:
    """A stored time as the naive local ``datetime`` spade_llm gives (kept within
    1970 to :attr:`~spade_memory.limits.Limits.latest_time`, the times Python's
    dates show in every time zone)."""
    return datetime.fromtimestamp(min(max(seconds, 0.0), LIMITS.latest_time))


def read_base_memory(path: Path) -> list[SpadeLlmMemoryRow]:
    """The rows of a spade_llm ``*_base_memory.db``, oldest first.

    Raises:
        StorageError: the file is not an SQLite database, or has no ``agent_memories``
            table of spade_llm's columns.
    """
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StorageError(f"{path.name}: cannot open it ({exc})") from None
    connection.text_factory = _text_of  # a value that is not UTF-8 costs its bad bytes only
    try:
        try:
            found = {
                str(row[1])
                for row in connection.execute("PRAGMA table_info(agent_memories)").fetchall()
            }
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"{path.name}: not an SQLite database ({exc})") from None
        if not found:
            raise StorageError(f"{path.name}: no agent_memories table; not a spade_llm memory")
        missing = [column for column in ("id", "agent_id", "content") if column not in found]
        if missing:
            raise StorageError(
                f"{path.name}: agent_memories lacks {', '.join(missing)}; not a spade_llm memory"
            )
        selected = ", ".join(column if column in found else "NULL" for column in _COLUMNS)
        try:
            rows = connection.execute(
                f"SELECT {selected}, rowid FROM agent_memories ORDER BY created_at, id"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"{path.name}: cannot be read ({exc})") from None
    finally:
        connection.close()
    return [
        SpadeLlmMemoryRow(
            # a row without an id (SQLite lets a TEXT key be NULL) is told by its rowid
            id=_text(row[0]) if row[0] is not None else f"rowid-{row[-1]}",
            agent_id=_text(row[1]),
            category=_text(row[2]) if row[2] is not None else "fact",
            content=_text(row[3]) if row[3] is not None else "",
            context=_text(row[4]) if row[4] is not None else None,
            confidence=float(row[5]) if isinstance(row[5], int | float) else None,
            created_at=_text(row[6]) if row[6] is not None else None,
            last_accessed=_text(row[7]) if row[7] is not None else None,
            access_count=int(row[8]) if isinstance(row[8], int) else None,
        )
        for row in rows
    ]


def _text_of(raw: bytes) -> str:
    """A TEXT value as UTF-8, a byte that is not UTF-8 read as U+FFFD."""
    return raw.decode("utf-8", "replace")


def _text(value: object) -> str:
    """A column's value as text: a BLOB read as UTF-8 (not as ``b'...'``)."""
    if isinstance(value, bytes):
        return _text_of(value)
    return str(value)


def read_interactions(path: Path) -> SpadeLlmNotes:
    """The notes of a spade_llm ``*_interactions.json``.

    Raises:
        StorageError: the file cannot be read or is not of that layout.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageError(f"{path.name}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise StorageError(f"{path.name}: not JSON ({exc.msg} at line {exc.lineno})") from None
    interactions = data.get("interactions") if isinstance(data, dict) else None
    if not isinstance(interactions, dict):
        raise StorageError(f"{path.name}: no 'interactions' object; not a spade_llm notes file")
    agent = data.get("agent_id")
    conversations: dict[str, list[dict[str, Any]]] = {}
    left_out: list[str] = []
    for conversation, notes in interactions.items():
        if not isinstance(notes, list):
            left_out.append(f"the notes of {conversation!r} are not a list; left out")
            continue
        kept = conversations[str(conversation)] = []
        for number, note in enumerate(notes, 1):
            if isinstance(note, dict):
                kept.append(note)
            else:
                left_out.append(f"note {number} of {conversation!r} is not an object; left out")
    return SpadeLlmNotes(
        agent_id=agent if isinstance(agent, str) else None,
        conversations=conversations,
        left_out=left_out,
    )
