"""Removing a memory that was just made: an agent's files and registry entry, its root.

A command that creates an agent's memory and then fails (an import whose embedding
endpoint is down, a disk that fills up) leaves no agent behind:
:func:`remove_agent` takes the agent out of the registry of its root and deletes
the files its memory is kept in, and :func:`remove_unused_root` removes a root the
command made that holds no other agent. Neither touches a memory any process has
open, nor backups or files moved aside as damaged (which a new memory has none of).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from ..errors import StorageError
from ..identity import AgentIdentity, resolve_inside
from .backup_files import backup_folder
from .open_marker import OPEN_FOLDER, open_anywhere
from .registry import LOCK_NAME, REGISTRY_NAME, Registry

__all__ = ["agent_files", "remove_agent", "remove_unused_root"]

logger = logging.getLogger(__name__)

_DICTIONARY_CACHE = "cache"  # engine.opening.DICTIONARY_CACHE: jieba's cache, under the root


def agent_files(root: Path, identity: AgentIdentity) -> list[Path]:
    """The files an agent's memory is kept in under ``root`` (present or not): its
    database with SQLite's side files, its notes file with its journal and lock, its
    vector snapshot and an interrupted graph rebuild's file."""
    database = identity.database_name
    notes = identity.interactions_name
    names = [
        database,
        f"{database}-wal",
        f"{database}-shm",
        f"{database}-journal",
        f"{database}.graph-rebuild",
        notes,
        f"{notes}.journal",
        f".{notes}.lock",
        identity.snapshot_name,
    ]
    return [resolve_inside(root, name) for name in names]


def remove_agent(root: Path, identity: AgentIdentity) -> list[Path]:
    """Remove ``identity``'s memory from ``root``: its registry entry, then its files
    (blocking). Backups and quarantined files are kept. Returns the files removed.

    Raises:
        StorageError: a process has the memory open (nothing was removed), or the
            registry could not be written, or a file could not be removed.
    """
    database = resolve_inside(root, identity.database_name)
    if open_anywhere(database):
        raise StorageError(f"the memory of {identity.jid} in {root} is open; it was not removed")
    Registry(root).unregister(identity)
    removed: list[Path] = []
    for path in agent_files(root, identity):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StorageError(f"could not remove {path}: {exc}") from exc
        removed.append(path)
    logger.info("removed the memory of %s from %s", identity.jid, root)
    return removed


def remove_unused_root(root: Path) -> bool:
    """Remove a memory root that holds no agent (blocking): its registry (when it
    registers none), the registry's lock, its empty ``.open/`` and ``backup/``
    folders, jieba's dictionary cache, then the folder itself. A root that holds
    anything else is left as it is (only what is known to be empty of memories is
    removed). Returns whether the root is gone.
    """
    if not root.is_dir():
        return not root.exists()
    registry = Registry(root)
    with contextlib.suppress(StorageError, OSError):
        if os.path.lexists(registry.path) and not registry.agents():
            registry.path.unlink()
    if os.path.lexists(root / REGISTRY_NAME):
        return False
    with contextlib.suppress(OSError):
        (root / LOCK_NAME).unlink()
    for folder in (root / OPEN_FOLDER, backup_folder(root)):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only if empty
    cache = root / _DICTIONARY_CACHE
    if cache.is_dir() and not cache.is_symlink():
        for entry in cache.iterdir():
            if entry.name.startswith("jieba") and entry.is_file():
                with contextlib.suppress(OSError):
                    entry.unlink()
        with contextlib.suppress(OSError):
            cache.rmdir()
    try:
        root.rmdir()
    except OSError:
        return False
    return True
