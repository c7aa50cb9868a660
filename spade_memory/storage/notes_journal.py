"""The notes journal: interaction-note changes appended to a file beside the notes snapshot.

Saving a note appends one line to ``<notes file>.journal`` and syncs it, instead
of rewriting the whole notes file; the journal is folded into a new snapshot
(:mod:`spade_memory.storage.interaction_file`) once it outgrows it. The file is
JSON Lines::

    {"format": "spade_memory.interactions.journal", "version": 1, "agent": ..., "snapshot": "<id>"}
    {"op": "add", "notes": [{"conversation": ..., "content": ..., "created_at": ...}]}
    {"op": "clear", "conversation": ...}

The first line names the snapshot the journal extends (the ``journal`` field of
that snapshot): a journal left beside another snapshot (one written by a
compaction that then could not remove it) is stale and ignored. The journal is
created whole (temporary file, fsync, rename, folder fsync), and each append is
written and fsynced before its callers are told. A crash during an append can
leave a last line without its newline: that torn line was never acknowledged;
it is ignored, reported and cut off. Any other line that cannot be read is
damage.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import ValidationError

from ..documents import Document, Text, describe
from . import files
from .note_changes import Change, change_of

__all__ = [
    "JOURNAL_SUFFIX",
    "JOURNAL_TAG",
    "JournalContent",
    "append_journal",
    "create_journal",
    "cut_journal",
    "encode_changes",
    "journal_path",
    "read_journal",
]

logger = logging.getLogger(__name__)

JOURNAL_TAG: Final = "spade_memory.interactions.journal"
JOURNAL_VERSION = 1
JOURNAL_SUFFIX = ".journal"


class _Header(Document):
    format: Literal["spade_memory.interactions.journal"]
    version: int
    agent: Text
    snapshot: Text


@dataclass(frozen=True)
class JournalContent:
    """What a journal file holds.

    Attributes:
        snapshot: the id of the snapshot it extends.
        changes: its changes, oldest first.
        size: the bytes of its header and complete lines (where the next line goes).
        torn: the bytes of a torn last line after them (0: none).
    """

    snapshot: str
    changes: list[Change]
    size: int
    torn: int


def journal_path(path: Path) -> Path:
    """The journal of the notes file ``path``."""
    return path.with_name(path.name + JOURNAL_SUFFIX)


def encode_changes(changes: Sequence[Change]) -> bytes:
    """The journal lines of ``changes`` (JSON never holds a raw newline)."""
    return b"".join(
        json.dumps(change.record(), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        + b"\n"
        for change in changes
    )


def read_journal(path: Path, agent: str) -> JournalContent | None:
    """Read the journal ``path`` (``None`` if absent).

    Raises:
        ValueError: it is damaged: its header or a complete line cannot be read,
            or it is another agent's (says which line and why).
        OSError: it could not be read.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    lines = raw.split(b"\n")
    torn = lines.pop()  # b"" when the file ends with its last newline
    if not lines:
        raise ValueError("its header line is incomplete")
    try:
        header = _Header.model_validate(json.loads(lines[0].decode("utf-8")))
    except (ValueError, UnicodeDecodeError) as exc:
        reason = describe(exc) if isinstance(exc, ValidationError) else str(exc)
        raise ValueError(f"line 1 is not a notes journal header ({reason})") from None
    if header.version != JOURNAL_VERSION:
        raise ValueError(f"unknown journal version {header.version}")
    if header.agent != agent:
        raise ValueError(f"the journal belongs to agent {header.agent!r}, not {agent!r}")
    changes: list[Change] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            changes.append(change_of(json.loads(line.decode("utf-8"))))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return JournalContent(header.snapshot, changes, len(raw) - len(torn), len(torn))


def create_journal(path: Path, agent: str, snapshot: str, lines: bytes) -> int:
    """Create the journal ``path`` for ``snapshot`` holding ``lines``, atomically.

    The caller holds the notes file's lock. Returns the journal's size.

    Raises:
        StorageError: it could not be written; no journal was made.
    """
    header = {"format": JOURNAL_TAG, "version": JOURNAL_VERSION, "agent": agent}
    header["snapshot"] = snapshot
    data = json.dumps(header, ensure_ascii=False).encode("utf-8") + b"\n" + lines
    files.atomic_write_bytes(path, data, locked=True)
    return len(data)


def append_journal(path: Path, lines: bytes, size: int) -> int:
    """Append ``lines`` to the journal ``path``, whose complete lines end at ``size``.

    Written and fsynced before it returns (a torn line after ``size`` is written
    over); the caller holds the notes file's lock. Returns the journal's new size.

    Raises:
        StorageError: the append failed; the journal was cut back to ``size``.
    """
    return files.append_at(path, lines, size)


def cut_journal(path: Path, size: int, torn: int) -> None:
    """Cut a torn last line (``torn`` bytes after ``size``) off the journal, and say so."""
    logger.warning(
        "%s: ignored a torn last line (%d bytes) left by a write that was interrupted "
        "before it was acknowledged",
        path,
        torn,
    )
    try:
        os.truncate(path, size)
    except OSError as exc:  # the next append writes over it all the same
        logger.warning("could not cut the torn line off %s: %s", path, exc)
