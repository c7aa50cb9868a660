"""A mark, seen by every process, that a memory's database is open.

While a store has a database file open it holds an exclusive lock (``filelock``:
``flock`` on POSIX, ``LockFileEx`` on Windows) on a marker file of its own in the
hidden folder ``.open/`` beside the database::

    .open/{database name}.{pid}-{random}.lock

Many processes may have the same memory open, each with its own marker.
:func:`open_anywhere` tries each marker of a database without waiting: one it
cannot lock is held by an open store (of this process or another); one it can
lock was left by a process that ended without closing (the operating system
released its lock) and is removed once it is older than a minute (a younger one
may be a marker whose holder is about to lock it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from pathlib import Path

import filelock

from ..errors import StorageError

__all__ = ["OPEN_FOLDER", "OpenMarker", "open_anywhere"]

logger = logging.getLogger(__name__)

OPEN_FOLDER = ".open"
_SUFFIX = ".lock"
_STALE_SECONDS = 60.0


def _folder(database: Path) -> Path:
    return database.parent / OPEN_FOLDER


def _markers(database: Path) -> list[Path]:
    prefix = database.name + "."
    try:
        entries = list(os.scandir(_folder(database)))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"could not list the open markers of {database}: {exc}") from exc
    return [
        Path(entry.path)
        for entry in entries
        if entry.name.startswith(prefix) and entry.name.endswith(_SUFFIX)
    ]


class OpenMarker:
    """The marker one open store holds; :meth:`release` when the store closes."""

    def __init__(self, path: Path, lock: filelock.BaseFileLock) -> None:
        self._path = path
        self._lock = lock

    @property
    def path(self) -> Path:
        return self._path

    @classmethod
    def hold(cls, database: Path) -> OpenMarker:
        """Create and lock a marker of ``database`` (blocking for a moment: a file).

        Raises:
            StorageError: the marker could not be made.
        """
        folder = _folder(database)
        name = f"{database.name}.{os.getpid()}-{secrets.token_hex(4)}{_SUFFIX}"
        path = folder / name
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            if folder.is_symlink():
                raise OSError(f"{folder} is a symbolic link")
            # thread_local=False: acquired in one worker thread, released in another
            lock = filelock.FileLock(os.fspath(path), mode=0o600, thread_local=False)
            lock.acquire(timeout=0)
        except (OSError, filelock.Timeout) as exc:
            raise StorageError(f"could not mark {database} as open: {exc}") from exc
        return cls(path, lock)

    def release(self) -> None:
        """Unlock and remove the marker; idempotent, never raises."""
        if not self._lock.is_locked:
            return
        with contextlib.suppress(OSError):
            self._path.unlink()  # while locked: nobody takes it for a stale one meanwhile
        try:
            self._lock.release()
        except OSError:
            logger.debug("could not unlock %s", self._path, exc_info=True)


def open_anywhere(database: Path) -> bool:
    """Whether a store of any process (this one included) has ``database`` open.

    Raises:
        StorageError: the markers could not be listed.
    """
    held = False
    now = time.time()
    for marker in _markers(database):
        lock = filelock.FileLock(os.fspath(marker), mode=0o600, thread_local=False)
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            held = True
            continue
        except OSError:
            continue  # removed meanwhile: its store closed
        try:
            with contextlib.suppress(OSError):
                if now - marker.stat().st_mtime > _STALE_SECONDS:
                    marker.unlink()  # left by a process that ended without closing
        finally:
            lock.release()
    return held
