"""The interaction memory file: its JSON format, and reading and writing it under its lock.

One JSON file per agent holds every conversation's notes::

    {"format": "spade_memory.interactions", "version": 1, "agent": "alice@example.org",
     "conversations": {"<conversation id>": [{"content": ..., "author": ..., "created_at": ...}]}}

The format is described by the strict pydantic models :class:`InteractionsDocument`
and :class:`NoteRecord`; a file is read and written through them. A file that cannot
be used (not JSON, not this format, another agent's, or a field of the wrong type)
is quarantined (moved aside) on load; one written by a newer version is refused
untouched. Every save rewrites the whole file atomically
while holding an exclusive lock (``.<file name>.lock`` beside the file), applying
its changes to the file as it is then, so processes sharing one agent's memory never
overwrite each other's notes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

from pydantic import ValidationError, field_validator

from ..documents import Document, Text, describe
from ..errors import StorageCorrupted, StorageError
from ..identity import normalize_jid
from ..models import InteractionNote
from . import files

__all__ = [
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
]

FORMAT_TAG: Final = "spade_memory.interactions"
FORMAT_VERSION = 1

Conversations = dict[str, list[InteractionNote]]
Change = Callable[[Conversations], None]


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
    """The whole file: this version's format, the owner's JID, the notes by conversation."""

    agent: Text
    conversations: dict[Text, list[NoteRecord]]

    @field_validator("version")
    @classmethod
    def _this_version(cls, version: int) -> int:
        if version != FORMAT_VERSION:
            raise ValueError(f"this reads format version {FORMAT_VERSION}")
        return version


class _Owner(Document):
    """Just enough of any version to name the agent the file belongs to."""

    format: Literal["spade_memory.interactions"]
    agent: str


def _encode(agent: str, conversations: Conversations) -> bytes:
    document = InteractionsDocument(
        format=FORMAT_TAG,
        version=FORMAT_VERSION,
        agent=agent,
        conversations={
            conversation: [
                NoteRecord(content=n.content, author=n.author, created_at=n.created_at)
                for n in notes
            ]
            for conversation, notes in conversations.items()
        },
    )
    return json.dumps(document.model_dump(), ensure_ascii=False, indent=1).encode("utf-8")


def _decode(raw: bytes, agent: str) -> Conversations:
    """Parse a file's bytes; raise ``ValueError`` saying what is wrong with them."""
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
    return {
        conversation: [
            InteractionNote(conversation, n.content, n.author, n.created_at) for n in notes
        ]
        for conversation, notes in document.conversations.items()
        if notes
    }


class _NewerVersion(Exception):
    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


def empty_document(agent: str) -> bytes:
    """The file of ``agent`` holding no notes (what a missing file stands for)."""
    return _encode(normalize_jid(agent), {})


def read_agent_of(path: Path) -> str | None:
    """The agent JID recorded inside an interaction file, or ``None`` if unreadable."""
    try:
        return _Owner.model_validate(json.loads(path.read_bytes().decode("utf-8"))).agent
    except (OSError, ValueError, RecursionError):  # ValidationError is a ValueError
        return None


def _load(path: Path, agent: str) -> Conversations | None:
    """Load ``path`` (``None`` if absent), quarantining a file that cannot be used."""
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


Stamp = tuple[int, int, int]  # inode, size, mtime: a file replaced by anyone changes it


def _stamp(path: Path) -> Stamp | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def _lock_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


def open_file(path: Path, agent: str) -> tuple[Conversations, Stamp | None]:
    """Load the file under its lock (a missing one holds no notes; nothing is created).

    The lock also makes it safe to remove what an interrupted write left: the
    fixed-name temporary files of a write made under this lock (found without
    listing the folder).
    """
    if not os.path.lexists(path):
        # No note yet: nothing to read, and no lock file made (a write made
        # meanwhile is read again by the first save, whose stamp then differs).
        return {}, None
    with files.exclusive_lock(_lock_of(path)):
        files.remove_locked_temps(path)
        loaded = _load(path, agent)
        return ({} if loaded is None else loaded), _stamp(path)


def save_merged(
    path: Path,
    agent: str,
    known: Conversations,
    stamp: Stamp | None,
    changes: list[Change],
) -> tuple[Conversations, Stamp | None]:
    """Apply ``changes`` to the file as it is now, under its lock; return what was written.

    ``known`` is the content last read or written here, still current if the file's
    ``stamp`` did not change; otherwise another process wrote it, and it is read again.
    Temporary files of interrupted writes that have no fixed name (left by older
    versions) are removed first (:func:`files.remove_stale_temps`).
    """
    with files.exclusive_lock(_lock_of(path)):
        files.remove_stale_temps(path.parent, path.name)
        current = known if _stamp(path) == stamp else _load(path, agent)
        if current is None:  # not created yet, or deleted meanwhile: write what is known here
            current = known
        target: Conversations = {k: list(v) for k, v in current.items()}
        for change in changes:
            change(target)
        target = {k: v for k, v in target.items() if v}
        _save(path, agent, target)
        return target, _stamp(path)


def _save(path: Path, agent: str, conversations: Conversations) -> None:
    """Write the file; the caller holds the file's lock (so fixed temporary names)."""
    files.atomic_write_bytes(path, _encode(agent, conversations), locked=True)
