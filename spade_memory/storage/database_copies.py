"""Copies of closed database files through SQLite's backup API: backups and restores.

A live database is backed up by its store (:meth:`BaseMemoryStore.backup_to`);
these work on files no connection of this process holds:
:func:`make_standalone` turns a copy into one self-contained file, and
:class:`BackupFile` reads what a backup says of itself and restores it (saving
the database it replaces first).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import StorageError
from .files import create_private

__all__ = ["BackupFacts", "BackupFile", "make_standalone"]


def make_standalone(path: Path) -> None:
    """Switch a backup copy out of WAL mode: one self-contained file, no sidecars.

    Raises:
        StorageError: the copy could not be changed.
    """
    try:
        copy = sqlite3.connect(path)
        try:
            copy.execute("PRAGMA journal_mode = DELETE")
        finally:
            copy.close()
    except sqlite3.Error as exc:
        raise StorageError(f"could not finish the backup {path}: {exc}") from exc


def _copy(database: Path, target: Path) -> None:
    source = sqlite3.connect(database)
    try:
        create_private(target)
        copy = sqlite3.connect(target)
        try:
            source.backup(copy)
        finally:
            copy.close()
    finally:
        source.close()
    make_standalone(target)


@dataclass(frozen=True, slots=True)
class BackupFacts:
    """What a backup says of itself."""

    status: str
    """``PRAGMA quick_check``: ``"ok"`` when sound."""
    version: int
    """Its schema version."""
    owner: Any
    """The agent of its ``meta`` row (``None`` when it names none)."""


class BackupFile:
    """A backup database opened to be checked and restored; use as a context manager.

    Raises:
        StorageError: the backup could not be opened.
    """

    def __init__(self, backup: Path) -> None:
        self._backup = backup
        try:
            self._source = sqlite3.connect(backup)
        except sqlite3.Error as exc:
            raise StorageError(f"could not open the backup {backup}: {exc}") from exc

    def __enter__(self) -> BackupFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._source.close()

    def facts(self, *, thorough: bool = False) -> BackupFacts:
        """Its integrity, schema version and owner.

        Args:
            thorough: run ``PRAGMA integrity_check`` (every index against its
                table) instead of the faster ``quick_check``.

        Raises:
            StorageError: it is not a readable memory backup.
        """
        source = self._source
        check = "integrity_check(1)" if thorough else "quick_check"
        try:
            (status,) = source.execute(f"PRAGMA {check}").fetchone()
            (version,) = source.execute("PRAGMA user_version").fetchone()
            owner = source.execute("SELECT value FROM meta WHERE key = 'agent'").fetchone()
        except sqlite3.Error as exc:
            raise StorageError(f"{self._backup} is not a readable memory backup: {exc}") from exc
        return BackupFacts(status, int(version), None if owner is None else owner[0])

    def count_memories(self) -> int | None:
        """How many memories it holds; ``None`` when it cannot be read."""
        try:
            (count,) = self._source.execute("SELECT count(*) FROM memories").fetchone()
        except sqlite3.Error:
            return None
        return int(count)

    def restore_into(self, database: Path, *, save_to: Path | None) -> None:
        """Write the backup into the (closed) ``database``, first copying what it held
        to ``save_to`` when given.

        Raises:
            StorageError: the copy or the restore failed.
        """
        try:
            if save_to is not None:
                _copy(database, save_to)
            create_private(database)
            target = sqlite3.connect(database)
            try:
                self._source.backup(target)
            finally:
                target.close()
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"restoring {self._backup} into {database} failed: {exc}") from exc
