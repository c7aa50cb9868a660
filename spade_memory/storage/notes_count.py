"""How many conversations and notes an agent's notes file holds, read without changing it.

The notes file and its journal (:mod:`.interaction_file`, :mod:`.notes_journal`)
are read by strict pydantic models, under the file's lock, and opening them
settles what an interrupted write left (a torn journal line is cut, a stale
journal removed) or moves a damaged file aside. :func:`count_notes` counts the
same notes with neither the models nor the lock, changing nothing: it checks
every value at least as strictly as the models do, and gives ``None`` (open the
notes as a store does, which settles or reports it) for anything it cannot
confirm: a file the models would refuse, one of another agent or of a newer
version, a torn or stale journal, a file changed while it was read.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["count_notes"]

_SNAPSHOT_TAG = "spade_memory.interactions"  # interaction_file.FORMAT_TAG
_SNAPSHOT_VERSIONS = (1, 2)  # the versions interaction_file reads
_JOURNAL_TAG = "spade_memory.interactions.journal"  # notes_journal.JOURNAL_TAG
_JOURNAL_VERSION = 1
_JOURNAL_SUFFIX = ".journal"
_LARGEST_TIME = 2**63  # integer times beyond are left to the models to judge

_FileStamp = tuple[int, int, int] | None


class _Unsure(Exception):
    """What was read is not confirmed as the models would read it."""


def count_notes(path: Path, agent: str) -> tuple[int, int] | None:
    """``(conversations, notes)`` in the notes file ``path`` of ``agent`` (a bare JID),
    with its journal; ``(0, 0)`` when there is no file. ``None`` when only opening
    the notes as a store can tell (see the module's docstring)."""
    if not os.path.lexists(path):
        return 0, 0
    journal = path.with_name(path.name + _JOURNAL_SUFFIX)
    before = (_stamp(path), _stamp(journal))
    try:
        snapshot = path.read_bytes()
        journal_bytes = journal.read_bytes() if before[1] is not None else None
    except OSError:
        return None
    if (_stamp(path), _stamp(journal)) != before:
        return None  # written meanwhile
    try:
        counts, journal_id = _snapshot_counts(snapshot, agent)
        if journal_bytes is not None:
            _apply_journal(journal_bytes, agent, journal_id, counts)
    except (_Unsure, ValueError, UnicodeDecodeError, RecursionError):
        return None
    live = [count for count in counts.values() if count]
    return len(live), sum(live)


def _stamp(path: Path) -> _FileStamp:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def _snapshot_counts(raw: bytes, agent: str) -> tuple[dict[str, int], str | None]:
    """The notes per conversation of a snapshot, and the id of the journal extending it."""
    data = json.loads(raw.decode("utf-8"))
    document = _mapping(data)
    if document.get("format") != _SNAPSHOT_TAG or not isinstance(document["format"], str):
        raise _Unsure
    if _integer(document.get("version")) not in _SNAPSHOT_VERSIONS:
        raise _Unsure
    if _text(document.get("agent")) != agent:
        raise _Unsure
    journal_id = _optional_text(document, "journal")
    conversations = _mapping(document.get("conversations"))
    counts: dict[str, int] = {}
    for conversation, notes in conversations.items():
        _text(conversation)
        if not isinstance(notes, list):
            raise _Unsure
        for note in notes:
            _note(_mapping(note))
        counts[conversation] = len(notes)
    return counts, journal_id


def _apply_journal(raw: bytes, agent: str, journal_id: str | None, counts: dict[str, int]) -> None:
    """Apply the changes of a journal to ``counts``, as loading the notes does."""
    lines = raw.split(b"\n")
    if lines.pop() or not lines:
        raise _Unsure  # a torn last line, cut on open; or no header at all
    header = _mapping(json.loads(lines[0].decode("utf-8")))
    if header.get("format") != _JOURNAL_TAG or not isinstance(header["format"], str):
        raise _Unsure
    if _integer(header.get("version")) != _JOURNAL_VERSION:
        raise _Unsure
    if _text(header.get("agent")) != agent:
        raise _Unsure
    if journal_id is None or _text(header.get("snapshot")) != journal_id:
        raise _Unsure  # stale: removed on open
    for line in lines[1:]:
        record = _mapping(json.loads(line.decode("utf-8")))
        op = record.get("op")
        if op == "add" and isinstance(op, str):
            notes = record.get("notes")
            sort = record.get("sort", False)
            if not isinstance(notes, list) or not isinstance(sort, bool):
                raise _Unsure
            added = [_text(_mapping(note).get("conversation")) for note in notes]
            for note in notes:
                _note(note)
            for conversation in added:
                counts[conversation] = counts.get(conversation, 0) + 1
        elif op == "clear" and isinstance(op, str):
            counts.pop(_text(record.get("conversation")), None)
        else:
            raise _Unsure


def _note(note: Mapping[str, Any]) -> None:
    """Check one note as the models do (``conversation`` is checked by the caller)."""
    _text(note.get("content"))
    _optional_text(note, "author")
    when = note.get("created_at")
    if type(when) is float:
        if not math.isfinite(when):
            raise _Unsure
    elif type(when) is not int or abs(when) >= _LARGEST_TIME:
        raise _Unsure


def _mapping(value: object) -> dict[str, Any]:
    if type(value) is not dict:
        raise _Unsure
    return value


def _integer(value: object) -> int:
    if type(value) is not int:
        raise _Unsure
    return value


def _text(value: object) -> str:
    """A string that can be written as UTF-8 (no lone surrogate)."""
    if type(value) is not str:
        raise _Unsure
    value.encode("utf-8")  # UnicodeEncodeError is a ValueError
    return value


def _optional_text(record: Mapping[str, Any], key: str) -> str | None:
    value = record.get(key)
    return None if value is None else _text(value)
