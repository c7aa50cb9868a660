"""Changes to interaction notes, as applied in memory and as written to the notes journal.

A change is one caller's edit of the notes: :class:`AddNotes` (a note, or the
notes of an import, which also orders their conversations by time) or
:class:`ClearConversation`. Each applies itself to a dict of conversations and
turns into one JSON record, a line of the journal
(:mod:`spade_memory.storage.notes_journal`); :func:`change_of` reads a record back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from ..documents import Document, Text, describe
from ..models import InteractionNote

__all__ = [
    "AddNotes",
    "Change",
    "ClearConversation",
    "Conversations",
    "change_of",
]

Conversations = dict[str, list[InteractionNote]]


class _NoteLine(Document):
    conversation: Text
    content: Text
    author: Text | None = None
    created_at: float


class _AddRecord(Document):
    op: Literal["add"]
    notes: list[_NoteLine]
    sort: bool = False


class _ClearRecord(Document):
    op: Literal["clear"]
    conversation: Text


@dataclass(frozen=True)
class AddNotes:
    """Append notes to their conversations; ``sort`` then orders those by time."""

    notes: tuple[InteractionNote, ...]
    sort: bool = False

    def __call__(self, state: Conversations) -> None:
        for note in self.notes:
            state.setdefault(note.conversation_id, []).append(note)
        if self.sort:
            for conversation in {note.conversation_id for note in self.notes}:
                state[conversation].sort(key=lambda n: n.created_at)

    def record(self) -> dict[str, Any]:
        """The change as a journal record."""
        notes = []
        for note in self.notes:
            line: dict[str, Any] = {"conversation": note.conversation_id, "content": note.content}
            if note.author is not None:
                line["author"] = note.author
            line["created_at"] = note.created_at
            notes.append(line)
        record: dict[str, Any] = {"op": "add", "notes": notes}
        if self.sort:
            record["sort"] = True
        return record


@dataclass(frozen=True)
class ClearConversation:
    """Remove every note of one conversation."""

    conversation: str

    def __call__(self, state: Conversations) -> None:
        state.pop(self.conversation, None)

    def record(self) -> dict[str, Any]:
        """The change as a journal record."""
        return {"op": "clear", "conversation": self.conversation}


Change = AddNotes | ClearConversation


def change_of(record: object) -> Change:
    """The change a journal record describes.

    Raises:
        ValueError: the record is not a change this version writes (says why).
    """
    op = record.get("op") if isinstance(record, Mapping) else None
    try:
        if op == "add":
            add = _AddRecord.model_validate(record)
            return AddNotes(
                tuple(
                    InteractionNote(n.conversation, n.content, n.author, n.created_at)
                    for n in add.notes
                ),
                sort=add.sort,
            )
        if op == "clear":
            return ClearConversation(_ClearRecord.model_validate(record).conversation)
    except ValidationError as exc:
        raise ValueError(describe(exc)) from None
    raise ValueError(f"unknown change {op!r}")
