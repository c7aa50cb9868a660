"""The backup folder of a memory root: backup names, listing, checking, restoring into a gap.

Backups live under ``backup/`` in the memory root::

    backup/{stem}_base_memory.{YYYYmmddTHHMMSS}.s{N}.db        taken on request or on schedule
    backup/{stem}_base_memory.v{V}.{YYYYmmddTHHMMSS}.s{N}.db   taken before a schema migration
    backup/{stem}_base_memory.{stamp}.s{N}.pre-restore.db      the database a restore replaced
    backup/{stem}_interactions.{stamp}.s{N}.json               the notes that go with a backup

``N`` is the backup's sequence: the order the agent's backups were taken in, whatever
the clock said (:mod:`spade_memory.storage.backup_sequence`); the time is the clock's,
for people and for the age of a backup. Backups named by older versions, without a
sequence (``{stem}_base_memory.{stamp}.db``, ``-{serial}`` after the stamp when two fell
in one second), are listed too: among themselves by their time, and before every
backup with a sequence, all taken after them. Listing reads names only.

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
    "backup_name",
    "backup_stamp",
    "check_backup",
    "last_sequence",
    "list_backups",
    "notes_backup_of",
    "restore_missing_database",
    "restore_missing_notes",
]

logger = logging.getLogger(__name__)

BACKUP_FOLDER = "backup"
_STAMP = "%Y%m%dT%H%M%S"
_DATABASE = "_base_memory"
_NAME = re.compile(
    rf"^(?P<stem>.+){_DATABASE}\.(?:v(?P<version>\d+)\.)?(?P<stamp>\d{{8}}T\d{{6}})"
    r"(?:-(?P<n>\d+))?(?:\.s(?P<seq>\d+))?(?P<pre>\.pre-restore)?\.db$"
)


@dataclass(frozen=True, slots=True)
class BackupInfo:
    """One backup file: whose, when (Unix seconds, from its name), how big, what kind,
    and its place among the agent's backups.

    ``kind`` is ``"manual"`` (on request or scheduled), ``"migration"`` (taken
    before a schema migration) or ``"pre-restore"`` (the database a restore replaced).
    ``sequence`` orders the agent's backups as they were taken (``None`` for a
    backup named by an older version, taken before every one that has it);
    ``created_at`` is what the clock said, which may have been wrong.
    """

    path: Path
    stem: str
    created_at: float
    size: int
    kind: str
    sequence: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "stem": self.stem,
            "created_at": self.created_at,
            "size": self.size,
            "kind": self.kind,
            "sequence": self.sequence,
        }


def backup_stamp(when: float) -> str:
    """The time part of a backup's name (UTC)."""
    return time.strftime(_STAMP, time.gmtime(when))


def backup_name(
    label: str,
    when: float,
    sequence: int,
    *,
    version: int | None = None,
    pre_restore: bool = False,
) -> str:
    """The name of a database backup.

    Args:
        label: the database's file name without ``.db`` (``{stem}_base_memory``).
        when: the time it is taken (Unix seconds, from the clock).
        sequence: its number among the agent's backups
            (:func:`~spade_memory.storage.backup_sequence.take_sequence`).
        version: the schema version it has, for one taken before a migration.
        pre_restore: it is the database a restore replaced.
    """
    migration = f"v{version}." if version is not None else ""
    replaced = ".pre-restore" if pre_restore else ""
    return f"{label}.{migration}{backup_stamp(when)}.s{sequence}{replaced}.db"


def backup_folder(root: Path) -> Path:
    """The backup folder of ``root`` (checked to stay inside it)."""
    return resolve_inside(root, BACKUP_FOLDER)


def notes_backup_of(database_backup: Path) -> Path:
    """The notes file that goes with a database backup."""
    match = _NAME.match(database_backup.name)
    if match is None:
        return database_backup.with_suffix(".json")
    # the parts of the database's name that set it apart (a migration's version,
    # a serial, a sequence, pre-restore) set its notes apart too
    suffix = (
        (f"v{match['version']}." if match["version"] else "")
        + match["stamp"]
        + (f"-{match['n']}" if match["n"] else "")
        + (f".s{match['seq']}" if match["seq"] else "")
        + (".pre-restore" if match["pre"] else "")
    )
    return database_backup.with_name(f"{match['stem']}_interactions.{suffix}.json")


def list_backups(root: Path, *, stem: str | None = None) -> list[BackupInfo]:
    """The database backups under ``root`` (of one agent's ``stem``), oldest first.

    Oldest in the order they were taken: by sequence, after those named without one
    (by their time); never by the clock alone, which may have been wrong.
    """
    return _listed(backup_folder(root), stem, root)


def last_sequence(folder: Path, label: str) -> int:
    """The largest sequence among the backups in ``folder`` of the database named
    ``label`` (``{stem}_base_memory``); 0 when none has one."""
    if not label.endswith(_DATABASE):
        return 0
    numbers = [info.sequence or 0 for info in _listed(folder, label[: -len(_DATABASE)], folder)]
    return max(numbers, default=0)


def _listed(folder: Path, stem: str | None, where: Path) -> list[BackupInfo]:
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"could not list the backups in {where}: {exc}") from exc
    found: list[BackupInfo] = []
    for entry in entries:
        match = _NAME.match(entry.name)
        if match is None or (stem is not None and match["stem"] != stem):
            continue
        created = calendar.timegm(time.strptime(match["stamp"], _STAMP))
        kind = "pre-restore" if match["pre"] else "migration" if match["version"] else "manual"
        sequence = int(match["seq"]) if match["seq"] else None
        with contextlib.suppress(OSError):
            size = entry.stat().st_size
            found.append(BackupInfo(entry, match["stem"], float(created), size, kind, sequence))
    return sorted(found, key=_order)


def _order(info: BackupInfo) -> tuple[int, int, float, int, str]:
    """Oldest first: those without a sequence by time, then by sequence; of one
    second, by serial ("-2" after the first: by name alone "-" sorts before ".")."""
    match = _NAME.match(info.path.name)
    serial = int(match["n"]) if match is not None and match["n"] else 1
    if info.sequence is None:
        return (0, 0, info.created_at, serial, info.path.name)
    return (1, info.sequence, info.created_at, serial, info.path.name)


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
