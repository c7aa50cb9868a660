"""The schema migration runner: back up, migrate in one transaction, restore on failure."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

import aiosqlite

from ..errors import MigrationError, StorageError
from .schema import MIGRATIONS, Migration

__all__ = ["backup_database", "migrate"]

logger = logging.getLogger(__name__)


async def backup_database(db: aiosqlite.Connection, target: Path) -> Path:
    """Copy a live database to ``target`` with SQLite's online backup API."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    try:
        async with aiosqlite.connect(partial) as dest:
            await db.backup(dest)
        partial.replace(target)
    except (sqlite3.Error, OSError) as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise StorageError(f"could not back up the database to {target}: {exc}") from exc
    return target


async def _restore(db: aiosqlite.Connection, backup: Path) -> None:
    async with aiosqlite.connect(backup) as source:
        await source.backup(db)


async def _version(db: aiosqlite.Connection) -> int:
    async with db.execute("PRAGMA user_version") as cursor:
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def migrate(
    db: aiosqlite.Connection,
    *,
    backup_dir: Path | None,
    label: str,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> int:
    """Bring ``db`` to the newest schema version and return that version.

    A database that already has a schema is backed up into ``backup_dir`` first
    (when one is given). Each migration runs in its own transaction; if one
    fails, the database is restored from the backup and :class:`MigrationError`
    is raised.

    Raises:
        MigrationError: a step failed; the database holds its previous content.
        StorageError: the database is newer than this version of spade_memory.
    """
    current = await _version(db)
    latest = migrations[-1].version if migrations else 0
    if current > latest:
        raise StorageError(
            f"{label} has schema version {current}, newer than this spade_memory "
            f"supports ({latest}); upgrade spade_memory"
        )
    pending = [m for m in migrations if m.version > current]
    if not pending:
        return current
    backup: Path | None = None
    if current > 0 and backup_dir is not None:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        backup = await backup_database(db, backup_dir / f"{label}.v{current}.{stamp}.db")
        logger.info("backed up %s (schema v%d) to %s before migrating", label, current, backup)
    # A new database takes every step in one transaction (nothing to restore);
    # each step is sent as one script: one round trip to the connection's thread
    # instead of one per statement (opening many agents' memories at once).
    steps = [pending] if current == 0 else [[m] for m in pending]
    for group in steps:
        migration = group[-1]
        script = ["BEGIN IMMEDIATE"]
        for step in group:
            script.extend(step.statements)
            script.append(f"PRAGMA user_version = {int(step.version)}")
        script.append("COMMIT")
        try:
            await db.executescript(";\n".join(script) + ";")
        except (sqlite3.Error, StorageError) as exc:
            with contextlib.suppress(sqlite3.Error):
                await db.execute("ROLLBACK")
            if await _version(db) >= migration.version:
                # Another process opening the same database took this step first.
                logger.debug("%s reached schema v%d in another process", label, migration.version)
                continue
            if backup is not None:
                await _restore(db, backup)
                raise MigrationError(
                    f"migrating {label} to schema v{migration.version} "
                    f"({migration.description}) failed: {exc}; restored from {backup}"
                ) from exc
            raise MigrationError(
                f"migrating {label} to schema v{migration.version} "
                f"({migration.description}) failed: {exc}; nothing was changed"
            ) from exc
        logger.debug("%s migrated to schema v%d", label, migration.version)
    return latest
