"""The interaction memory file: its JSON format, and reading and writing it under its lock.

One JSON file per agent, the snapshot, holds every conversation's notes as of its
writing::

    {"format": "spade_memory.interactions", "version": 2, "agent": "alice@example.org",
     "journal": "<id>",
     "conversations": {"<conversation id>": [{"content": ..., "author": ..., "created_at": ...}]}}

and the changes made since are appended to its journal, ``<file>.journal``
(:mod:`spade_memory.storage.notes_journal`), whose header names the snapshot's
``journal`` id. A save appends its changes to the journal and fsyncs it; once the
journal outgrows the snapshot (and at least :data:`COMPACT_AT_BYTES`), the save
writes a new snapshot, with a new id, atomically, and removes the journal, so a
note costs about its own size on disk and a file of any size is never rewritten
for one note. A journal whose id is not the snapshot's is left from before the last
snapshot and is ignored; version 1 files (no journal) load as they are and become
version 2 at their first save.

The format is described by the strict pydantic models :class:`InteractionsDocument`
and :class:`NoteRecord`; a file is read and written through them. A file that cannot
be used (not JSON, not this format, another agent's, or a field of the wrong type)
is quarantined (moved aside) on load; one written by a newer version is refused
untouched; a damaged journal is quarantined the same way. Every save holds an
exclusive lock (``.<file name>.lock`` beside the file) and applies its changes to
the files as they are then, so processes sharing one agent's memory never
overwrite each other's notes.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import ValidationError, field_validator

from ..documents import Document, Text, describe
from ..errors import StorageCorrupted, StorageError
from ..identity import normalize_jid
from ..models import InteractionNote
from . import files
from .note_changes import Change, Conversations
from .notes_journal import (
    append_journal,
    create_journal,
    cut_journal,
    encode_changes,
    journal_path,
    read_journal,
)

__all__ = [
    "COMPACT_AT_BYTES",
    "FORMAT_TAG",
    "FORMAT_VERSION",
    "Change",
    "Conversations",
    "InteractionsDocument",
    "NoteRecord",
    "Stamp",
    "empty_document",
    "open_file",
    "read_agent_of",
    "save_merged",
    "snapshot_document",
]

logger = logging.getLogger(__name__)

FORMAT_TAG: Final = "spade_memory.interactions"
FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)

COMPACT_AT_BYTES = 256 * 1024
"""A journal is folded into a new snapshot once it is larger than the snapshot and this."""


class NoteRecord(Document):
    """One note as the file holds it (``author`` may be absent: no author)."""

    content: Text
    author: Text | None = None
    created_at: float


class _Header(Document):
    """What every version of the file starts with."""

    format: Literal["spade_memory.interactions"]
    version: int


class InteractionsDocument(_Header):
    """The snapshot: its format, the owner's JID, its journal's id, the notes by conversation.

    ``journal`` is absent in version 1 files and in a snapshot no journal extends.
    """

    agent: Text
    journal: Text | None = None
    conversations: dict[Text, list[NoteRecord]]

    @field_validator("version")
    @classmethod
    def _this_version(cls, version: int) -> int:
        if version not in _READABLE_VERSIONS:
            raise ValueError(f"this reads format versions {_READABLE_VERSIONS}")
        return version


class _Owner(Document):
    """Just enough of any version to name the agent the file belongs to."""

    format: Literal["spade_memory.interactions"]
    agent: str


def _encode(agent: str, conversations: Conversations, journal: str | None) -> bytes:
    document = InteractionsDocument(
        format=FORMAT_TAG,
        version=FORMAT_VERSION,
        agent=agent,
        journal=journal,
        conversations={
            conversation: [
                NoteRecord(content=n.content, author=n.author, created_at=n.created_at)
                for n in notes
            ]
            for conversation, notes in conversations.items()
        },
    )
    return json.dumps(document.model_dump(), ensure_ascii=False, indent=1).encode("utf-8")


def _decode(raw: bytes, agent: str) -> tuple[Conversations, str | None]:
    """Parse a snapshot's bytes into its notes and its journal's id.

    Raises:
        ValueError: what is wrong with them.
    """
    data = json.loads(raw.decode("utf-8"))
    try:
        header = _Header.model_validate(data)
    except ValidationError as exc:
        if any(e["loc"][:1] in ((), ("format",)) for e in exc.errors()):
            raise ValueError(
                f"not an interaction memory file (no format tag {FORMAT_TAG!r})"
            ) from None
        raise ValueError(f"unknown format version {data.get('version')!r}") from None
    if header.version > FORMAT_VERSION:
        raise _NewerVersion(header.version)
    try:
        document = InteractionsDocument.model_validate(data)
    except ValidationError as exc:
        raise ValueError(describe(exc)) from None
    if document.agent != agent:
        raise ValueError(f"the file belongs to agent {document.agent!r}, not {agent!r}")
    conversations = {
        conversation: [
            InteractionNote(conversation, n.content, n.author, n.created_at) for n in notes
        ]
        for conversation, notes in document.conversations.items()
        if notes
    }
    return conversations, document.journal


class _NewerVersion(Exception):
    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


def empty_document(agent: str) -> bytes:
    """The file of ``agent`` holding no notes (what a missing file stands for)."""
    return _encode(normalize_jid(agent), {}, None)


def read_agent_of(path: Path) -> str | None:
    """The agent JID recorded inside an interaction file, or ``None`` if unreadable."""
    try:
        return _Owner.model_validate(json.loads(path.read_bytes().decode("utf-8"))).agent
    except (OSError, ValueError, RecursionError):  # ValidationError is a ValueError
        return None


def _load_snapshot(path: Path, agent: str) -> tuple[Conversations, str | None] | None:
    """Load the snapshot ``path`` (``None`` if absent), quarantining one that cannot be used."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"could not read interaction memory {path}: {exc}") from exc
    try:
        return _decode(raw, agent)
    except _NewerVersion as exc:
        raise StorageError(
            f"interaction memory {path} has format version {exc.version}, newer than this "
            f"spade_memory understands ({FORMAT_VERSION}); upgrade spade_memory to open it"
        ) from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        reason = str(exc) or type(exc).__name__
        try:
            moved = files.quarantine(path, reason)
        except OSError as move_error:
            raise StorageCorrupted(
                f"interaction memory {path} is damaged ({reason}) and could not be moved "
                f"aside ({move_error}); move it away by hand, then open the memory again",
                path=path,
            ) from exc
        raise StorageCorrupted(
            f"interaction memory {path} is damaged ({reason}); it was moved to {moved}. "
            "Repair that copy and move it back, or leave it there to start again with no notes",
            path=path,
            quarantined_to=moved,
        ) from exc


FileStamp = tuple[int, int, int]  # inode, size, mtime: a file replaced by anyone changes it


@dataclass(frozen=True)
class Stamp:
    """The snapshot and journal as last read or written by this process.

    Attributes:
        files: the stamps of the snapshot and of the journal (``None``: absent);
            another process's write changes them.
        snapshot: the snapshot's journal id (``None``: a version 1 file).
        snapshot_size: the snapshot's size in bytes.
        journal_size: where the journal's next line goes (0: no journal).
    """

    files: tuple[FileStamp | None, FileStamp | None]
    snapshot: str | None
    snapshot_size: int
    journal_size: int


def _file_stamp(path: Path) -> FileStamp | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def _stamps(path: Path) -> tuple[FileStamp | None, FileStamp | None]:
    return _file_stamp(path), _file_stamp(journal_path(path))


def _lock_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


def _drop_journal(path: Path) -> None:
    """Remove a journal that extends no current snapshot (one left is ignored all the same)."""
    try:
        os.unlink(journal_path(path))
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.warning("could not remove the stale notes journal of %s: %s", path, exc)


def _load(path: Path, agent: str) -> tuple[Conversations, Stamp] | None:
    """The notes of snapshot and journal (``None``: no snapshot); the caller holds the lock.

    Raises:
        StorageCorrupted: the snapshot or the journal is damaged; it was quarantined.
        StorageError: a file could not be read.
    """
    snapshot = _load_snapshot(path, agent)
    if snapshot is None:
        _drop_journal(path)
        return None
    conversations, journal_id = snapshot
    journal = journal_path(path)
    try:
        content = read_journal(journal, agent)
    except OSError as exc:
        raise StorageError(f"could not read the notes journal {journal}: {exc}") from exc
    except ValueError as exc:
        moved = files.quarantine(journal, str(exc))
        raise StorageCorrupted(
            f"the notes journal {journal} is damaged ({exc}); it was moved to {moved}. "
            "The notes saved before it are kept; open the memory again to go on without "
            "the journal's notes, or repair that copy and move it back first",
            path=journal,
            quarantined_to=moved,
        ) from exc
    journal_size = 0
    if content is not None and (journal_id is None or content.snapshot != journal_id):
        _drop_journal(path)  # left by a compaction: its notes are in the snapshot
        content = None
    if content is not None:
        for change in content.changes:
            change(conversations)
        conversations = {k: v for k, v in conversations.items() if v}
        if content.torn:
            cut_journal(journal, content.size, content.torn)
        journal_size = content.size
    stamps = _stamps(path)
    size = stamps[0][1] if stamps[0] is not None else 0
    return conversations, Stamp(stamps, journal_id, size, journal_size)


def open_file(path: Path, agent: str) -> tuple[Conversations, Stamp | None]:
    """Load the notes under the file's lock (a missing file holds none; nothing is created).

    The lock also makes it safe to remove what an interrupted write left: the
    fixed-name temporary files of a write made under this lock (found without
    listing the folder), a torn last line of the journal, a stale journal.
    """
    if not os.path.lexists(path):
        # No note yet: nothing to read, and no lock file made (a write made
        # meanwhile is read again by the first save, whose stamp then differs).
        return {}, None
    with files.exclusive_lock(_lock_of(path)):
        files.remove_locked_temps(path)
        files.remove_locked_temps(journal_path(path))
        loaded = _load(path, agent)
        return ({}, None) if loaded is None else loaded


def save_merged(
    path: Path,
    agent: str,
    known: Conversations,
    stamp: Stamp | None,
    changes: list[Change],
) -> tuple[Conversations, Stamp | None]:
    """Apply ``changes`` to the notes as they are now, under the lock; return what was written.

    ``known`` is the content last read or written here, still current if the files'
    stamps did not change; otherwise another process wrote them, and they are read
    again. The changes are appended to the journal, or written in a new snapshot
    when there is none yet or the journal has outgrown it. Temporary files of
    interrupted writes that have no fixed name (left by older versions) are removed
    first (:func:`files.remove_stale_temps`).

    Raises:
        StorageError: nothing could be written; the files hold what they held.
    """
    with files.exclusive_lock(_lock_of(path)):
        files.remove_stale_temps(path.parent, path.name)
        base: Stamp | None = stamp
        current = known
        if stamp is None or _stamps(path) != stamp.files:
            loaded = _load(path, agent)
            # not created yet, or deleted meanwhile: write what is known here
            current, base = loaded if loaded is not None else (known, None)
        target: Conversations = {k: list(v) for k, v in current.items()}
        for change in changes:
            change(target)
        target = {k: v for k, v in target.items() if v}
        if base is None or base.snapshot is None:
            return target, _compact(path, agent, target)
        lines = encode_changes(changes)
        if _compaction_due(base.journal_size + len(lines), base.snapshot_size):
            try:
                return target, _compact(path, agent, target)
            except StorageError as exc:  # e.g. no room for a whole snapshot: append
                logger.warning("%s: kept the notes journal, could not fold it in: %s", path, exc)
        journal = journal_path(path)
        if base.journal_size:
            size = append_journal(journal, lines, base.journal_size)
        else:
            size = create_journal(journal, agent, base.snapshot, lines)
        return target, Stamp(_stamps(path), base.snapshot, base.snapshot_size, size)


def _compaction_due(journal_size: int, snapshot_size: int) -> bool:
    """Whether a journal of ``journal_size`` bytes is folded into a new snapshot.

    Once it is larger than the snapshot (and than :data:`COMPACT_AT_BYTES`): the
    bytes written per note stay within about three times its own size, whatever
    the file's size.
    """
    return journal_size > max(COMPACT_AT_BYTES, snapshot_size)


def _compact(path: Path, agent: str, conversations: Conversations) -> Stamp:
    """Write a new snapshot of ``conversations`` and drop the journal; the caller holds the lock."""
    journal_id = uuid.uuid4().hex
    data = _encode(agent, conversations, journal_id)
    files.atomic_write_bytes(path, data, locked=True)
    # A journal still there after a crash names the old id: ignored on load.
    _drop_journal(path)
    return Stamp(_stamps(path), journal_id, len(data), 0)


def snapshot_document(path: Path, agent: str) -> bytes:
    """One self-contained file of the notes, snapshot and journal merged (for backups).

    It names no journal, so a journal found beside it once it is restored is ignored.

    Raises:
        FileNotFoundError: there is no notes file (no note yet).
        StorageCorrupted: a file is damaged; it was quarantined.
        StorageError: a file could not be read.
    """
    with files.exclusive_lock(_lock_of(path)):
        loaded = _load(path, agent)
    if loaded is None:
        raise FileNotFoundError(path)
    return _encode(agent, loaded[0], None)
