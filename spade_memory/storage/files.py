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
import time
from pathlib import Path

from ..errors import StorageError

__all__ = ["atomic_write_bytes", "fsync_dir", "quarantine", "remove_stale_temps"]

logger = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (renames, creations) to disk."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    Raises:
        StorageError: the write failed; ``path`` still holds its previous content.
    """
    folder = path.parent
    tmp = folder / f".{path.name}.{os.getpid()}.{time.monotonic_ns()}{TEMP_SUFFIX}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(folder)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StorageError(f"could not write {path}: {exc.strerror or exc}") from exc


def quarantine(path: Path, reason: str) -> Path:
    """Move a damaged file aside (never delete it) and return its new path."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}-{time.monotonic_ns() % 1_000_000}")
    os.replace(path, target)
    with contextlib.suppress(OSError):
        fsync_dir(path.parent)
    logger.error("quarantined %s to %s: %s", path, target, reason)
    return target


def remove_stale_temps(folder: Path, name: str) -> None:
    """Remove temporary files left by an interrupted atomic write of ``name``."""
    prefix = f".{name}."
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(prefix) and entry.name.endswith(TEMP_SUFFIX):
            with contextlib.suppress(OSError):
                entry.unlink()
