"""Backups of an agent's memory: take, list, restore, and keep only so many days.

A backup is a copy of the live SQLite database made with SQLite's online backup
API (never a file copy of a database in use) plus a copy of the interaction
notes (written atomically, so a plain read is consistent), under ``backup/`` in
the memory root::

    backup/{stem}_base_memory.{YYYYmmddTHHMMSS}.s{N}.db
    backup/{stem}_interactions.{YYYYmmddTHHMMSS}.s{N}.json

Migrations leave ``{stem}_base_memory.v{V}.{stamp}.s{N}.db`` there too, and a restore
first saves the database it replaces as ``....s{N}.pre-restore.db``. ``N`` orders an
agent's backups as they were taken, whatever the clock said
(:mod:`spade_memory.storage.backup_sequence`): the newest backup is the one taken
last, for a restore on open, for ``spade-memory backup JID --list`` and for pruning.
Backups older than :attr:`~spade_memory.config.StorageConfig.backup_keep_days` are
removed, except the newest of each agent; one whose time is ahead of the clock is
as old as the backups taken after it (:func:`prune_backups`).

A restore writes into a closed agent's database (again through the backup API)
and refuses one open in this process or another. The FAISS snapshot, a cache, is
removed so that the next open rebuilds it from the restored vectors. Backup names
and their listing are :mod:`spade_memory.storage.backup_files` (opening a lost
memory restores from there too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, StorageError
from ..identity import AgentIdentity, resolve_inside
from ..storage.backup_files import (
    BACKUP_FOLDER,
    BackupInfo,
    backup_folder,
    backup_name,
    last_sequence,
    list_backups,
    notes_backup_of,
)
from ..storage.backup_sequence import recorded_sequence
from ..storage.database_copies import BackupFacts, BackupFile, make_standalone
from ..storage.files import atomic_write_bytes
from ..storage.interaction import empty_document, snapshot_document
from ..storage.registry import Registry
from ..storage.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = [
    "BACKUP_FOLDER",
    "BackupInfo",
    "backup_memory",
    "list_backups",
    "prune_backups",
    "restore_backup",
]

logger = logging.getLogger(__name__)

_DAY = 86_400.0


async def backup_memory(engine: Engine) -> Path:
    """Back up the memory of an open engine now; returns the database backup's path.

    Backups older than ``backup_keep_days`` are removed afterwards.

    Raises:
        ConfigError: the memory is in-memory (it has no root to back up into).
        StorageError: the backup failed; no partial file is left.
    """
    root = engine.root
    if root is None:
        raise ConfigError("an in-memory memory has no root folder: there is nowhere to back it up")
    now = engine.now()
    folder = backup_folder(root)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    stem = engine.identity.stem
    label = _label(engine.identity)
    after = await asyncio.to_thread(last_sequence, folder, label)
    target = await engine.base.backup_numbered(
        lambda sequence: folder / backup_name(label, now, sequence), after=after
    )
    await asyncio.to_thread(make_standalone, target)
    notes = resolve_inside(root, engine.identity.interactions_name)
    try:  # snapshot and journal as one file
        data = await asyncio.to_thread(snapshot_document, notes, engine.jid)
    except FileNotFoundError:  # no note yet (the first note creates the file)
        data = empty_document(engine.jid)
    except OSError as exc:
        raise StorageError(f"could not read {notes} to back it up: {exc}") from exc
    atomic_write_bytes(notes_backup_of(target), data)
    prune_backups(root, keep_days=engine.config.storage.backup_keep_days, now=now, stem=stem)
    logger.info("%s: backed up to %s", engine.jid, target)
    return target


def _label(identity: AgentIdentity) -> str:
    """The name of the agent's database without ``.db``: what its backups' names begin with."""
    return identity.database_name.removesuffix(".db")


def prune_backups(
    root: Path, *, keep_days: float, now: float, stem: str | None = None
) -> list[Path]:
    """Remove backups older than ``keep_days``, keeping the newest of each agent.

    The newest is the one taken last (:func:`list_backups`' order), whatever the
    clock said. A backup's age is its time, except when that time is after
    ``now`` (the clock was ahead when it was taken): it is then no younger than
    the backups taken after it, and counts as taken at the earliest of their times.
    It goes with them, and never outlives them on a wrong time; with none after
    it, it is the newest and stays.

    Returns the database backups removed (their notes files go with them).
    """
    backups = list_backups(root, stem=stem)
    cutoff = now - keep_days * _DAY
    removed: list[Path] = []
    for info, taken in _ages(backups, now):
        if taken >= cutoff:
            continue
        for path in (info.path, notes_backup_of(info.path)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        removed.append(info.path)
    if removed:
        logger.info("removed %d backups older than %g days from %s", len(removed), keep_days, root)
    return removed


def _ages(backups: list[BackupInfo], now: float) -> list[tuple[BackupInfo, float]]:
    """Each backup but the newest of each agent, with the time its age is judged by
    (see :func:`prune_backups`); ``backups`` oldest first."""
    aged: list[tuple[BackupInfo, float]] = []
    later: dict[str, float] = {}  # per agent: the earliest time of the backups after
    for info in reversed(backups):
        if info.stem in later:
            taken = info.created_at
            if taken > now:
                taken = min(taken, later[info.stem])
            aged.append((info, taken))
            later[info.stem] = min(later[info.stem], info.created_at)
        else:  # the newest of its agent: always kept
            later[info.stem] = info.created_at
    aged.reverse()
    return aged


def _check_backup(facts: BackupFacts, backup: Path, jid: str) -> None:
    status, version, owner = facts.status, facts.version, facts.owner
    if status != "ok":
        raise StorageError(f"{backup} is damaged ({status}); choose another backup")
    if owner is None or owner != jid:
        whose = "no agent" if owner is None else repr(owner)
        raise StorageError(f"{backup} holds the memory of {whose}, not of {jid!r}")
    if int(version) > SCHEMA_VERSION:
        raise StorageError(
            f"{backup} has schema version {version}, newer than this spade_memory "
            f"supports ({SCHEMA_VERSION}); upgrade spade_memory"
        )


def restore_backup(root: Path, jid: str, backup: Path, *, now: float | None = None) -> Path:
    """Replace a closed agent's memory with a backup (blocking: run it in a thread).

    The database being replaced is saved first as a ``pre-restore`` backup, with
    the notes being replaced beside it. The notes are restored too when the backup
    has them.

    Args:
        root: the memory root.
        jid: the agent whose memory is restored.
        backup: a database backup of that agent (any path).
        now: the time used to name the pre-restore backup (default: now).

    Returns:
        The pre-restore backup, or the database path when there was nothing to save.

    Raises:
        InvalidAgentId: ``jid`` is not a valid JID.
        StorageError: the memory is open (in this process or another), the backup is missing,
            damaged or another agent's, or the restore failed.
    """
    from ..storage.base import BaseMemoryStore  # here: listing backups needs no store

    identity = AgentIdentity.of(jid)
    root = Path(root).expanduser().resolve()
    database = resolve_inside(root, identity.database_name)
    if BaseMemoryStore.is_open(database):
        raise StorageError(
            f"the memory of {identity.jid} is open in this process; stop the agent "
            "(close its Engine) before restoring it"
        )
    if BaseMemoryStore.open_in_any_process(database):
        raise StorageError(
            f"the memory of {identity.jid} is open in another process (a running agent "
            "or command); stop it before restoring"
        )
    backup = Path(backup).expanduser().resolve()
    if not backup.is_file():
        raise StorageError(f"there is no backup file at {backup}")
    saved = database
    when = time.time() if now is None else now
    with BackupFile(backup) as source:
        _check_backup(source.facts(), backup, identity.jid)
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        save_to = None
        live_notes = resolve_inside(root, identity.interactions_name)
        if database.exists():
            folder = backup_folder(root)
            folder.mkdir(exist_ok=True, mode=0o700)
            # after every backup there and every number the database gave
            label = _label(identity)
            sequence = max(last_sequence(folder, label), recorded_sequence(database)) + 1
            save_to = folder / backup_name(label, when, sequence, pre_restore=True)
            while save_to.exists() or save_to == backup:  # a name taken meanwhile
                sequence += 1
                save_to = folder / backup_name(label, when, sequence, pre_restore=True)
            saved = save_to
            # the notes being replaced go beside it: restoring it brings them back
            try:
                kept = snapshot_document(live_notes, identity.jid)
            except FileNotFoundError:
                kept = empty_document(identity.jid)
            except OSError as exc:
                raise StorageError(f"could not read {live_notes} to keep it: {exc}") from exc
            atomic_write_bytes(notes_backup_of(save_to), kept)
        source.restore_into(database, save_to=save_to)
    with contextlib.suppress(FileNotFoundError):
        resolve_inside(root, identity.snapshot_name).unlink()  # a cache of the old vectors
    notes = notes_backup_of(backup)
    if notes.is_file():
        atomic_write_bytes(live_notes, notes.read_bytes())
    Registry(root).register(identity)
    logger.info("restored the memory of %s from %s", identity.jid, backup)
    return saved
