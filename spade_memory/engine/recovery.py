"""A known agent's memory found lost on open: restore a backup, start empty, or refuse.

An agent is known when its memory left traces in the root
(:mod:`spade_memory.storage.traces`): it is registered, or its notes file,
snapshot, quarantined files or backups are there. When such an agent's database
is missing (deleted, or moved aside as damaged by an earlier open, which raised
:class:`~spade_memory.errors.StorageCorrupted`), or its database records a notes
file that is gone, opening never starts silently empty. It does one of:

- ``start_empty`` (asked for): starts empty and logs a WARNING;
- ``on_damage="restore"`` (default): restores the newest backup that passes
  ``PRAGMA integrity_check`` and belongs to the agent, and logs a WARNING naming
  it and what was lost;
- otherwise, or with no good backup: raises :class:`~spade_memory.errors.MemoryLost`
  naming the lost file, its damaged copy, the newest good backup and the command
  that restores it.

What happened is returned as a :class:`~spade_memory.models.MemoryRecovery`.
Every function here blocks (file copies, integrity checks): run it in a thread.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import time
from pathlib import Path

from ..config import OnDamage
from ..errors import MemoryLost
from ..identity import AgentIdentity
from ..models import MemoryRecovery
from ..storage.backup_files import (
    BackupInfo,
    check_backup,
    notes_backup_of,
    restore_missing_database,
    restore_missing_notes,
)
from ..storage.file_peek import count_memories_readonly
from ..storage.interaction import read_agent_of
from ..storage.schema import NOTES_KEY
from ..storage.traces import Traces

__all__ = ["NOTES_KEY", "settle_lost_database", "settle_lost_notes"]

logger = logging.getLogger(__name__)


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def _restore_command(root: Path, jid: str, backup: Path) -> str:
    return shlex.join(["spade-memory", "restore", jid, str(backup), "--root", str(root)])


def _candidates(traces: Traces) -> list[BackupInfo]:
    """Backups to restore from, newest first (a pre-restore copy is the memory a user
    chose to replace: never restored on its own)."""
    return [info for info in reversed(traces.backups) if info.kind != "pre-restore"]


def _good_backup(traces: Traces, jid: str) -> tuple[BackupInfo | None, int | None, list[str]]:
    """The newest backup that passes the checks, the memories it holds, and why the
    newer ones did not pass."""
    refused: list[str] = []
    for info in _candidates(traces):
        why, count = check_backup(info.path, jid)
        if why is None:
            return info, count, refused
        refused.append(why)
    return None, None, refused


def _gone(path: Path, quarantined: tuple[Path, ...]) -> tuple[str, Path | None]:
    """How ``path`` went, and its newest damaged copy."""
    moved = [q for q in quarantined if q.name.startswith(path.name + ".corrupt-")]
    if moved:
        return f"{path.name} was moved aside as damaged to {moved[-1].name}", moved[-1]
    return f"{path.name} is missing", None


def _empty_hint(jid: str, root: Path) -> str:
    command = shlex.join(["spade-memory", "stats", jid, "--root", str(root), "--start-empty"])
    return (
        "To give it up and start with an empty memory, open it once with "
        "MemoryManager.open(..., start_empty=True) or MemoryConfig(start_empty=True) "
        f"(from the command line: {command}); the damaged copies and backups stay where they are."
    )


def settle_lost_database(
    root: Path,
    identity: AgentIdentity,
    traces: Traces,
    *,
    on_damage: OnDamage,
    start_empty: bool,
) -> MemoryRecovery | None:
    """Deal with the missing database of a known agent (``traces`` listed).

    Returns:
        What was done: the database was restored, or the memory starts empty
        (``start_empty``). ``None`` when a database appeared meanwhile (another
        process created or restored it): open it as usual.

    Raises:
        MemoryLost: no good backup, or ``on_damage="refuse"``; nothing was changed.
        StorageError: the restore failed.
    """
    database = root / identity.database_name
    how, moved = _gone(database, traces.quarantined)
    why = f"its database {how}" if moved else f"its database {how} ({traces.describe()})"
    before = None
    damaged = [q for q in traces.quarantined if q.name.startswith(database.name + ".corrupt-")]
    if damaged:
        before = count_memories_readonly(damaged[-1])
    kept = ", ".join(path.name for path in traces.quarantined)
    kept_note = f" The damaged copies stay in {root}: {kept}." if kept else ""
    if start_empty:
        message = (
            f"the memory of {identity.jid} is lost: {why}. Starting with an EMPTY memory "
            f"as asked (start_empty).{kept_note} Backups of it stay in backup/."
        )
        logger.warning("%s", message)
        return MemoryRecovery(
            action="started_empty",
            file="database",
            path=database,
            backup=None,
            lost_since=None,
            quarantined=traces.quarantined,
            memories_restored=None,
            memories_before=before,
            notes_restored=False,
            message=message,
        )
    info, count, refused = _good_backup(traces, identity.jid)
    if info is None or on_damage == "refuse":
        if info is not None:
            command = _restore_command(root, identity.jid, info.path)
            offer = (
                f"The newest good backup is {info.path} (taken {_when(info.created_at)}; "
                f"what was stored after it is not in it). Restore it with: {command} "
                '(or open with MemoryConfig(on_damage="restore"), which restores it).'
            )
        else:
            command = None
            tried = f" ({'; '.join(refused)})" if refused else ""
            offer = f"There is no good backup of it in {root / 'backup'}{tried}."
        raise MemoryLost(
            f"the memory of {identity.jid} is lost: {why}. It was not opened, so it "
            f"does not start empty unnoticed. {offer} {_empty_hint(identity.jid, root)}",
            path=database,
            quarantined_to=moved,
            backup=info.path if info is not None else None,
            restore_command=command,
        )
    notes_path = root / identity.interactions_name
    if not restore_missing_database(info.path, database):
        return None
    # a cache of the lost database's vectors: rebuilt from the restored ones
    with contextlib.suppress(FileNotFoundError):
        (root / identity.snapshot_name).unlink()
    notes_restored = restore_missing_notes(info.path, notes_path, identity.jid)
    counted = f"; the lost database counted {before}" if before is not None else ""
    notes_said = (
        f" Its notes were restored from {notes_backup_of(info.path).name} too."
        if notes_restored
        else ""
    )
    message = (
        f"the memory of {identity.jid} was lost: {why}. Restored it from the backup "
        f"{info.path} taken {_when(info.created_at)}, which holds {count} memories{counted}: "
        f"memories stored or changed after {_when(info.created_at)} are lost.{notes_said}"
        f"{kept_note}"
    )
    if refused:
        message += f" Newer backups were not used: {'; '.join(refused)}."
    logger.warning("%s", message)
    return MemoryRecovery(
        action="restored",
        file="database",
        path=database,
        backup=info.path,
        lost_since=info.created_at,
        quarantined=traces.quarantined,
        memories_restored=count,
        memories_before=before,
        notes_restored=notes_restored,
        message=message,
    )


def settle_lost_notes(
    root: Path,
    identity: AgentIdentity,
    traces: Traces,
    *,
    on_damage: OnDamage,
    start_empty: bool,
) -> MemoryRecovery:
    """Deal with a notes file the agent's database says was written, and is gone.

    Returns:
        What was done: the notes were restored from a backup, or start empty.

    Raises:
        MemoryLost: no backup holds notes of this agent, or ``on_damage="refuse"``.
        StorageError: the restore failed.
    """
    notes = root / identity.interactions_name
    how, moved = _gone(notes, traces.quarantined)
    why = f"its notes file {how}, though its database records writing it"
    if start_empty:
        message = (
            f"the interaction notes of {identity.jid} are lost: {why}. Starting with NO "
            "notes as asked (start_empty); the damaged copies and backups stay where they are."
        )
        logger.warning("%s", message)
        return MemoryRecovery(
            action="started_empty",
            file="notes",
            path=notes,
            backup=None,
            lost_since=None,
            quarantined=traces.quarantined,
            memories_restored=None,
            memories_before=None,
            notes_restored=False,
            message=message,
        )
    source: BackupInfo | None = None
    for info in _candidates(traces):
        if read_agent_of(notes_backup_of(info.path)) == identity.jid:
            source = info
            break
    if source is None or on_damage == "refuse":
        if source is not None:
            offer = (
                f"The newest backup of them is {notes_backup_of(source.path)} (taken "
                f"{_when(source.created_at)}): copy it to {notes} to restore them (or open "
                'with MemoryConfig(on_damage="restore"), which restores them).'
            )
        else:
            offer = f"No backup in {root / 'backup'} holds notes of it."
        raise MemoryLost(
            f"the interaction notes of {identity.jid} are lost: {why}. The memory was not "
            f"opened, so it does not go on without them unnoticed. {offer} "
            f"{_empty_hint(identity.jid, root)}",
            path=notes,
            quarantined_to=moved,
            backup=notes_backup_of(source.path) if source is not None else None,
        )
    restored = restore_missing_notes(source.path, notes, identity.jid)
    message = (
        f"the interaction notes of {identity.jid} were lost: {why}. Restored them from "
        f"{notes_backup_of(source.path)} taken {_when(source.created_at)}: notes written "
        f"after {_when(source.created_at)} are lost."
    )
    if not restored:  # written meanwhile by another process: nothing to restore
        message = f"the interaction notes of {identity.jid} reappeared while being restored."
    logger.warning("%s", message)
    return MemoryRecovery(
        action="restored",
        file="notes",
        path=notes,
        backup=notes_backup_of(source.path),
        lost_since=source.created_at,
        quarantined=traces.quarantined,
        memories_restored=None,
        memories_before=None,
        notes_restored=restored,
        message=message,
    )
