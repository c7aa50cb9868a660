"""Crash-safe file primitives: atomic replace, folder fsync, quarantine.

An atomic write goes to a temporary file in the same folder, is flushed and
fsynced, replaces the target with ``os.replace`` and then fsyncs the folder, so a
reader sees either the old file or the new one, never a mix, even after SIGKILL or
a power loss.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import StorageError

__all__ = [
    "append_at",
    "atomic_write_bytes",
    "create_private",
    "exclusive_lock",
    "fsync_dir",
    "quarantine",
    "remove_locked_temps",
    "remove_stale_temps",
]

logger = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"
LOCK_POLL_SECONDS = 0.005
"""How often a lock held by another process (or thread) is tried again."""

_TEMP_LISTINGS: dict[str, set[str]] = {}  # folder -> temporary files found at its listing
_TEMP_LISTINGS_LOCK = threading.Lock()
_LOCKED = "locked"


def _locked_temps(path: Path) -> tuple[Path, Path]:
    """The fixed temporary names of a write made under ``path``'s lock."""
    return (
        path.with_name(f".{path.name}.{_LOCKED}{TEMP_SUFFIX}"),
        path.with_name(f".{path.name}.{_LOCKED}.old{TEMP_SUFFIX}"),
    )


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (renames, creations) to disk."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_private(path: Path) -> None:
    """Create ``path`` empty, readable by its owner only, unless it exists.

    Called before SQLite creates a database file, which it would make with the
    process's default mode (often 0644); SQLite gives the files it makes beside
    a database (``-wal``, ``-shm``, ``-journal``) the database file's mode.

    Raises:
        OSError: the file could not be created.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, locked: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    Args:
        path: the file to replace (or create).
        data: its new content.
        locked: the caller holds an exclusive lock that every writer of ``path``
            takes, so the temporary files may have fixed names (any found are left
            by an interrupted write and are removed first).

    Raises:
        StorageError: the write failed; ``path`` still holds its previous content.
    """
    folder = path.parent
    if locked:
        tmp, keep = _locked_temps(path)
    else:
        stamp = f"{os.getpid()}.{time.monotonic_ns()}"
        tmp = folder / f".{path.name}.{stamp}{TEMP_SUFFIX}"
        # A second name for the previous content until the new one is durable, so a
        # failing folder fsync can put it back (hard link: no data is copied).
        keep = folder / f".{path.name}.{stamp}.old{TEMP_SUFFIX}"
    previous: Path | None = None
    try:
        if locked:
            _unlink_missing_ok(tmp, keep)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(path, keep)
            previous = keep
        except FileNotFoundError:
            pass  # nothing to keep: a new file
        except OSError:  # no hard links on this file system: keep nothing
            logger.debug("cannot keep the previous %s while replacing it", path)
        os.replace(tmp, path)
        try:
            fsync_dir(folder)
        except OSError:
            # The new content is visible but may not survive a power loss: put the
            # previous content back, so that the error tells the truth.
            if previous is not None:
                os.replace(previous, path)
                previous = None
            else:
                os.unlink(path)
            raise
    except OSError as exc:
        for leftover in (tmp, previous):
            if leftover is not None:
                with contextlib.suppress(OSError):
                    leftover.unlink()
        raise StorageError(f"could not write {path}: {exc.strerror or exc}") from exc
    if previous is not None:
        with contextlib.suppress(OSError):
            previous.unlink()


def append_at(path: Path, data: bytes, size: int) -> int:
    """Write ``data`` durably into the existing file ``path`` at ``size``, its new end.

    Whatever followed ``size`` (a torn write) is cut off; the data is fsynced before
    this returns. The caller holds a lock every writer of ``path`` takes. Returns
    the file's new size.

    Raises:
        StorageError: the write failed; the file was cut back to ``size``.
    """
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        raise StorageError(f"could not write {path}: {exc.strerror or exc}") from exc
    try:
        try:
            os.lseek(fd, size, os.SEEK_SET)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.ftruncate(fd, size + len(data))
            os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            except OSError as undo:
                logger.error("could not cut %s back after a failed write: %s", path, undo)
            raise StorageError(f"could not write {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    return size + len(data)


@contextlib.contextmanager
def exclusive_lock(path: Path, *, what: str = "the lock file") -> Iterator[None]:
    """Hold an exclusive lock on the lock file ``path`` (created if missing).

    Serialises read-modify-write cycles of one file across threads and processes,
    on every platform (``filelock``: ``flock`` on POSIX, ``LockFileEx`` on
    Windows). Waits as long as another holder keeps it, trying again every
    :data:`LOCK_POLL_SECONDS`. The file is left in place on POSIX. A symlink at
    ``path`` is refused.

    Args:
        path: the lock file.
        what: how an error names the lock file.

    Raises:
        StorageError: the lock file could not be opened.
    """
    import filelock  # not at the top: reading (``spade-memory ls``) takes no lock

    if os.path.islink(path):
        raise StorageError(f"could not open {what} {path}: it is a symbolic link")
    lock = filelock.FileLock(os.fspath(path), mode=0o600)
    try:
        lock.acquire(poll_interval=LOCK_POLL_SECONDS)
    except OSError as exc:
        raise StorageError(f"could not open {what} {path}: {exc.strerror or exc}") from exc
    try:
        yield
    finally:
        lock.release()


def quarantine(path: Path, reason: str) -> Path:
    """Move a damaged file aside (never delete it) and return its new path."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}-{time.monotonic_ns() % 1_000_000}")
    os.replace(path, target)
    with contextlib.suppress(OSError):
        fsync_dir(path.parent)
    logger.error("quarantined %s to %s: %s", path, target, reason)
    return target


def _unlink_missing_ok(*paths: Path) -> None:
    for leftover in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)


def remove_locked_temps(path: Path) -> None:
    """Remove the temporary files an interrupted ``locked=True`` write of ``path`` left.

    Call it holding the lock those writes take. Looks at two names only: the
    folder is not listed.
    """
    with contextlib.suppress(OSError):
        _unlink_missing_ok(*_locked_temps(path))


def remove_stale_temps(folder: Path, name: str) -> None:
    """Remove temporary files left by an interrupted atomic write of ``name``.

    The folder is listed once per process, on the first call for it: a memory root
    holds every agent's files, and listing it once per agent would cost each open
    time in proportion to the number of agents. A temporary file made after that
    listing belongs to a write that began while this process ran; one left by a
    crash meanwhile is removed by the next process to use the folder.
    """
    key = os.path.abspath(folder)
    with _TEMP_LISTINGS_LOCK:
        temps = _TEMP_LISTINGS.get(key)
        if temps is None:
            try:
                temps = {e.name for e in os.scandir(folder) if e.name.endswith(TEMP_SUFFIX)}
            except OSError:
                return
            _TEMP_LISTINGS[key] = temps
        prefix = f".{name}."
        mine = [temp for temp in temps if temp.startswith(prefix)]
        temps.difference_update(mine)
    for temp in mine:
        with contextlib.suppress(OSError):
            (folder / temp).unlink()
