"""The schema migration runner: back up, migrate in one transaction, restore on failure.

A brand-new database skips the runner: :func:`create_database` builds it at the
newest version in a private file and links it into place only when complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sqlite3
import time
import uuid
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import aiosqlite

from ..errors import MigrationError, StorageError
from ..text.content_key import CONTENT_KEY_FUNCTION, content_key
from . import checksums
from .backup_files import backup_name, last_sequence
from .backup_sequence import take_sequence
from .files import create_private
from .on_thread import run_on_connection
from .schema import MIGRATIONS, Migration

__all__ = [
    "backup_database",
    "create_database",
    "migrate",
    "schema_functions",
    "schema_script",
    "schema_version",
]

logger = logging.getLogger(__name__)


async def backup_database(db: aiosqlite.Connection, target: Path) -> Path:
    """Copy a live database to ``target`` with SQLite's online backup API."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    try:
        create_private(partial)
        async with aiosqlite.connect(partial) as dest:
            await db.backup(dest)
        partial.replace(target)
    except (sqlite3.Error, OSError) as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise StorageError(f"could not back up the database to {target}: {exc}") from exc
    return target


async def _backup_before(
    db: aiosqlite.Connection, backup_dir: Path, label: str, version: int
) -> Path:
    """Back up ``db`` (schema ``version``) before migrating it, numbered after the
    backups already in ``backup_dir`` (:mod:`spade_memory.storage.backup_sequence`)."""
    after = await asyncio.to_thread(last_sequence, backup_dir, label)
    try:
        sequence = await run_on_connection(db, partial(take_sequence, after=after))
    except sqlite3.Error as exc:
        raise StorageError(f"{label}: could not number the backup before migrating: {exc}") from exc
    name = backup_name(label, time.time(), sequence, version=version)
    return await backup_database(db, backup_dir / name)


async def _restore(db: aiosqlite.Connection, backup: Path) -> None:
    async with aiosqlite.connect(backup) as source:
        await source.backup(db)


async def schema_version(db: aiosqlite.Connection) -> int:
    """The schema version recorded in the database (``PRAGMA user_version``)."""
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
    current = await schema_version(db)
    latest = migrations[-1].version if migrations else 0
    if current > latest:
        raise StorageError(
            f"{label} has schema version {current}, newer than this spade_memory "
            f"supports ({latest}); upgrade spade_memory"
        )
    pending = [m for m in migrations if m.version > current]
    if not pending:
        return current
    await db.create_function(CONTENT_KEY_FUNCTION, 2, content_key, deterministic=True)
    await checksums.install(db)  # a migration sums existing rows with it
    if current == 0:
        # A new database takes every step in one transaction (nothing to restore),
        # sent as one script: one round trip to the connection's thread instead of
        # one per statement (opening many agents' memories at once).
        try:
            await db.executescript(f"BEGIN IMMEDIATE;\n{schema_script(pending)}\nCOMMIT;")
        except (sqlite3.Error, StorageError) as exc:
            with contextlib.suppress(sqlite3.Error):
                await db.execute("ROLLBACK")
            if await schema_version(db) >= latest:
                return latest  # another process created it meanwhile
            raise MigrationError(f"creating the schema of {label} failed: {exc}") from exc
        return latest
    backup: Path | None = None
    if backup_dir is not None:
        backup = await _backup_before(db, backup_dir, label, current)
        logger.info("backed up %s (schema v%d) to %s before migrating", label, current, backup)
    written = await _data_version(db)  # changes when another connection commits
    for migration in pending:
        try:
            took = await run_on_connection(db, partial(_take_step, migration))
        except (sqlite3.Error, StorageError) as exc:
            with contextlib.suppress(sqlite3.Error):
                await db.execute("ROLLBACK")
            step = f"migrating {label} to schema v{migration.version} ({migration.description})"
            if backup is not None and await _data_version(db) == written:
                # Only this connection wrote since the backup: it holds all there is.
                await _restore(db, backup)
                raise MigrationError(f"{step} failed: {exc}; restored from {backup}") from exc
            # Another process wrote meanwhile (it may have migrated and stored):
            # its writes stay; the database is at the last step taken.
            raise MigrationError(
                f"{step} failed: {exc}; the database stays at schema "
                f"v{await schema_version(db)}"
                + (f" (backup from before the migration: {backup})" if backup else "")
            ) from exc
        if took:
            logger.debug("%s migrated to schema v%d", label, migration.version)
        else:
            logger.debug("%s reached schema v%d in another process", label, migration.version)
    return latest


def _take_step(migration: Migration, db: sqlite3.Connection) -> bool:
    """Take one schema step in a transaction of its own, on the connection's thread;
    ``False`` when another process took it first (read under the write lock).

    Raises:
        sqlite3.Error: a statement failed, or the database is not at the version
            the step starts from; nothing was changed.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version >= migration.version:
            db.execute("ROLLBACK")
            return False
        if version != migration.version - 1:
            raise sqlite3.OperationalError(
                f"the database is at schema v{version}, not v{migration.version - 1}"
            )
        for statement in migration.statements:
            db.execute(statement)
        db.execute(f"PRAGMA user_version = {int(migration.version)}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return True


async def _data_version(db: aiosqlite.Connection) -> int:
    async with db.execute("PRAGMA data_version") as cursor:
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


def schema_functions(db: sqlite3.Connection) -> None:
    """Register the SQL functions the schema's statements call (run a
    :func:`schema_script` only on a connection given them)."""
    db.create_function(CONTENT_KEY_FUNCTION, 2, content_key, deterministic=True)
    checksums.register(db)


def schema_script(migrations: Sequence[Migration]) -> str:
    """The statements of ``migrations``, each followed by its ``user_version``, as one script
    (for a connection with :func:`schema_functions`)."""
    script: list[str] = []
    for step in migrations:
        script.extend(step.statements)
        script.append(f"PRAGMA user_version = {int(step.version)}")
    return ";\n".join(script) + ";"


_NEW_SUFFIX = ".new"
_STALE_NEW_SECONDS = 600.0


def create_database(
    path: Path,
    *,
    rows: Sequence[tuple[str, Sequence[Sequence[Any]]]] = (),
    migrations: Sequence[Migration] = MIGRATIONS,
) -> bool:
    """Create a new database at ``path``, at the newest schema, in WAL mode.

    The file is built under a private name with no disk sync per step (nobody else
    can see it), synced once, and hard-linked to ``path``: the link fails if
    ``path`` appeared meanwhile, so a database another process created (or is
    creating) is never replaced. A crash leaves either no database or a complete
    one. A private file a crash left before the link is removed by a later
    creation (after ten minutes); one left after the link is only a second name of
    the same file.

    Args:
        path: the database file to create.
        rows: ``(statement, parameter rows)`` run after the schema, in the same
            transaction (the first rows of the new database).
        migrations: the schema steps; the result has the version of the last one.

    Returns:
        ``True`` if this call created ``path``; ``False`` if it exists already (or
        the file system cannot link), and the caller should open it the usual way.

    Raises:
        StorageError: the database could not be built or synced.
    """
    folder = path.parent
    if path.exists() or any(
        path.with_name(path.name + side).exists() for side in ("-wal", "-journal")
    ):
        return False
    _remove_stale_builds(folder)
    private = folder / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}{_NEW_SUFFIX}"
    try:
        try:
            _build(private, schema_script(migrations), rows)
            fd = os.open(private, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(private, path)
            except FileExistsError:
                return False
            except OSError as exc:  # no hard links here: open it the usual way
                logger.debug("cannot link a new database into place (%s)", exc)
                return False
        finally:
            with contextlib.suppress(OSError):
                private.unlink()
        # No folder sync here: the first commit syncs the folder (SQLite does when
        # it creates the write-ahead log), and until then the file holds nothing
        # that was acknowledged; if its name is lost, the next open creates it again.
    except (sqlite3.Error, OSError) as exc:
        raise StorageError(f"could not create the database {path}: {exc}") from exc
    return True


def _build(private: Path, script: str, rows: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> None:
    """Write the schema and ``rows`` into ``private`` and switch it to WAL mode."""
    create_private(private)
    db = sqlite3.connect(private, isolation_level=None)
    try:
        schema_functions(db)  # migrations key and sum existing rows with them
        # A private file: a crash here leaves only a file nobody opens.
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.executescript(f"BEGIN;\n{script}")
        for statement, params in rows:
            db.executemany(statement, params)
        db.execute("COMMIT")
        row = db.execute("PRAGMA journal_mode = WAL").fetchone()
        if row is None or str(row[0]).lower() != "wal":
            raise sqlite3.DatabaseError(f"could not enable WAL (got {row!r})")
    finally:
        db.close()


# ".{database name}.{pid}.{hex digits}.new", as create_database names its build.
_PRIVATE_BUILD = re.compile(r"\A\..+\.\d+\.[0-9a-f]+\.new\Z")

# When each folder was last swept by this process: listing a root of thousands of
# agents' files for every new agent made opening N new agents cost O(N²).
_SWEPT: dict[str, float] = {}


def _remove_stale_builds(folder: Path) -> None:
    """Remove private files of creations that a crash interrupted long ago.

    Lists ``folder`` at most once per ``_STALE_NEW_SECONDS`` per process, and then
    removes the stale builds of every database in it: a file is not
    stale before that age anyway, so a later sweep removes it.
    """
    key = os.path.abspath(folder)
    now = time.monotonic()
    last = _SWEPT.get(key)
    if last is not None and now - last < _STALE_NEW_SECONDS:
        return
    _SWEPT[key] = now
    cutoff = time.time() - _STALE_NEW_SECONDS
    try:
        entries = [e for e in os.scandir(folder) if _PRIVATE_BUILD.match(e.name)]
    except OSError:
        return
    for entry in entries:
        with contextlib.suppress(OSError):
            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.path)
