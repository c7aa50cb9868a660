"""The backup folder of a memory root: backup names, listing, checking, restoring into a gap.

Backups live under ``backup/`` in the memory root::

    backup/{stem}_base_memory.{YYYYmmddTHHMMSS}.db        taken on request or on schedule
    backup/{stem}_base_memory.v{N}.{YYYYmmddTHHMMSS}.db   taken before a schema migration
    backup/{stem}_base_memory.{stamp}.pre-restore.db      the database a restore replaced
    backup/{stem}_interactions.{stamp}.json               the notes that go with a backup

Taking and pruning backups, and the restore a user asks for, are
:mod:`spade_memory.maintenance.backup`. Here is what opening a memory needs too:
:func:`list_backups`, :func:`check_backup` (a full integrity check and the owner)
and :func:`restore_missing_database`, which writes a backup into a database file
that is not there, never over one that is.
"""

from __future__ import annotations

import calendar
import contextlib
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import StorageError
from ..identity import resolve_inside
from .database_copies import BackupFile
from .files import TEMP_SUFFIX, atomic_write_bytes, fsync_dir
from .schema import SCHEMA_VERSION

__all__ = [
    "BACKUP_FOLDER",
    "BackupInfo",
    "backup_folder",
    "backup_stamp",
    "check_backup",
    "list_backups",
    "notes_backup_of",
    "restore_missing_database",
    "restore_missing_notes",
]

logger = logging.getLogger(__name__)

BACKUP_FOLDER = "backup"
_STAMP = "%Y%m%dT%H%M%S"
_NAME = re.compile(
    r"^(?P<stem>.+)_base_memory\.(?:v(?P<version>\d+)\.)?(?P<stamp>\d{8}T\d{6})"
    r"(?:-(?P<n>\d+))?(?P<pre>\.pre-restore)?\.db$"
)


@dataclass(frozen=True, slots=True)
class BackupInfo:
    """One backup file: whose, when (Unix seconds, from its name), how big, what kind.

    ``kind`` is ``"manual"`` (on request or scheduled), ``"migration"`` (taken
    before a schema migration) or ``"pre-restore"`` (the database a restore replaced).
    """

    path: Path
    stem: str
    created_at: float
    size: int
    kind: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "stem": self.stem,
            "created_at": self.created_at,
            "size": self.size,
            "kind": self.kind,
        }


def backup_stamp(when: float) -> str:
    """The time part of a backup's name (UTC)."""
    return time.strftime(_STAMP, time.gmtime(when))


def backup_folder(root: Path) -> Path:
    """The backup folder of ``root`` (checked to stay inside it)."""
    return resolve_inside(root, BACKUP_FOLDER)


def notes_backup_of(database_backup: Path) -> Path:
    """The notes file that goes with a database backup."""
    match = _NAME.match(database_backup.name)
    if match is None:
        return database_backup.with_suffix(".json")
    # the parts of the database's name that set it apart (a migration's version,
    # a serial, pre-restore) set its notes apart too
    suffix = (
        (f"v{match['version']}." if match["version"] else "")
        + match["stamp"]
        + (f"-{match['n']}" if match["n"] else "")
        + (".pre-restore" if match["pre"] else "")
    )
    return database_backup.with_name(f"{match['stem']}_interactions.{suffix}.json")


def list_backups(root: Path, *, stem: str | None = None) -> list[BackupInfo]:
    """The database backups under ``root`` (of one agent's ``stem``), oldest first."""
    try:
        entries = list(backup_folder(root).iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"could not list the backups in {root}: {exc}") from exc
    found: list[BackupInfo] = []
    for entry in entries:
        match = _NAME.match(entry.name)
        if match is None or (stem is not None and match["stem"] != stem):
            continue
        created = calendar.timegm(time.strptime(match["stamp"], _STAMP))
        with contextlib.suppress(OSError):
            kind = "pre-restore" if match["pre"] else "migration" if match["version"] else "manual"
            found.append(
                BackupInfo(entry, match["stem"], float(created), entry.stat().st_size, kind)
            )
    return sorted(found, key=_order)


def _order(info: BackupInfo) -> tuple[float, int, str]:
    """Oldest first; of one second, by serial ("-2" after the first: by name alone
    "-" sorts before ".")."""
    match = _NAME.match(info.path.name)
    serial = int(match["n"]) if match is not None and match["n"] else 1
    return (info.created_at, serial, info.path.name)


def check_backup(backup: Path, jid: str) -> tuple[str | None, int | None]:
    """Whether ``backup`` can be restored as ``jid``'s memory, after a full integrity check.

    Returns:
        ``(None, memories it holds)`` when it can, else ``(why not, None)``.
    """
    try:
        with BackupFile(backup) as source:
            facts = source.facts(thorough=True)
            count = source.count_memories()
    except StorageError as exc:
        return str(exc), None
    if facts.status != "ok":
        return f"{backup.name} is damaged ({facts.status})", None
    if facts.owner != jid:
        whose = "no agent" if facts.owner is None else repr(facts.owner)
        return f"{backup.name} holds the memory of {whose}, not of {jid!r}", None
    if int(facts.version) > SCHEMA_VERSION:
        return (
            f"{backup.name} has schema version {facts.version}, newer than this "
            f"spade_memory supports ({SCHEMA_VERSION})",
            None,
        )
    return None, count


def restore_missing_database(backup: Path, database: Path) -> bool:
    """Write ``backup`` into ``database``, which is not there (blocking).

    The copy is built under a private name in the same folder, synced, and
    hard-linked to ``database``: if another process created the database
    meanwhile, the link fails and nothing is replaced.

    Returns:
        ``True`` if the database now holds the backup; ``False`` if a database
        appeared meanwhile (it was left alone).

    Raises:
        StorageError: the copy could not be made.
    """
    folder = database.parent
    private = folder / f".{database.name}.restore-{os.getpid()}-{time.monotonic_ns()}{TEMP_SUFFIX}"
    try:
        with BackupFile(backup) as source:
            source.restore_into(private, save_to=None)
        try:
            fd = os.open(private, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.link(private, database)
        except FileExistsError:
            return False
        except OSError as exc:
            raise StorageError(f"could not restore {backup} into {database}: {exc}") from exc
        with contextlib.suppress(OSError):
            fsync_dir(folder)
        return True
    finally:
        with contextlib.suppress(OSError):
            private.unlink()


def restore_missing_notes(backup: Path, notes: Path, jid: str) -> bool:
    """Copy the notes that go with ``backup`` to ``notes`` if they are ``jid``'s and
    ``notes`` is not there (blocking); whether they were copied."""
    from .interaction import read_agent_of  # not at the top: it loads the notes' models

    source = notes_backup_of(backup)
    if os.path.lexists(notes) or read_agent_of(source) != jid:
        return False
    try:
        data = source.read_bytes()
    except OSError as exc:
        logger.warning("could not read the notes backup %s: %s", source, exc)
        return False
    atomic_write_bytes(notes, data)
    return True
