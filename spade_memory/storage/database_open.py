"""Opening a base-memory database: connection settings, ownership, damage handling.

:func:`configure_connection` sets the pragmas and touches the schema so a damaged
file fails while it is being opened; :func:`claim_database` records the owning
agent (refusing another agent's file); a file found damaged is moved aside by
:func:`quarantine_damaged`. :func:`first_rows` are the rows a new database
starts with, written when the whole file is created at once.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from ..config import StorageConfig
from ..errors import StorageCorrupted
from .files import quarantine
from .memory_rows import Transaction
from .migrations import schema_version

__all__ = [
    "Unusable",
    "claim_database",
    "configure_connection",
    "first_rows",
    "is_damage",
    "quarantine_damaged",
]

# SQLite result codes meaning the file itself is damaged (the rest, such as a busy
# lock or a full disk, leave the file alone and must never get it quarantined).
_DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


class Unusable(sqlite3.DatabaseError):
    """A database this agent must not use as it is (damaged, another agent's, emptied)."""


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the database file itself is damaged or unusable."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, Unusable) or (code is not None and code & 0xFF in _DAMAGE_CODES)


def first_rows(
    agent: str, categories: Sequence[str], now: float, meta: Mapping[str, str]
) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """The rows a new database starts with: what :func:`claim_database` writes."""
    return [
        (
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [("agent", agent), ("instance", uuid.uuid4().hex)]
            + [(key, value) for key, value in meta.items() if key not in ("agent", "instance")],
        ),
        (
            "INSERT OR IGNORE INTO categories (name, created_at) VALUES (?, ?)",
            [(name, now) for name in categories],
        ),
        ("INSERT INTO agent_stats (agent) VALUES (?)", [(agent,)]),
    ]


async def configure_connection(
    db: aiosqlite.Connection,
    storage: StorageConfig,
    *,
    in_memory: bool,
    expect_existing: bool = False,
    check: bool = False,
) -> None:
    """Set the connection's pragmas and read the schema once.

    Raises:
        Unusable: an expected memory holds no schema, or ``check`` found damage.
        sqlite3.DatabaseError: the file is not a readable database.
    """
    # First, so every later statement waits for another process's lock.
    await db.execute(f"PRAGMA busy_timeout = {int(storage.busy_timeout_ms)}")
    # Before anything can write to the file (enabling WAL writes a header).
    if expect_existing and await schema_version(db) == 0:
        raise Unusable(
            "it holds no memory at all, yet this agent's memory existed before (the "
            "memory root keeps traces of it): it was emptied or replaced"
        )
    if not in_memory:
        async with db.execute("PRAGMA journal_mode = WAL") as cursor:
            row = await cursor.fetchone()
        if row is None or str(row[0]).lower() != "wal":
            raise sqlite3.DatabaseError(f"could not enable WAL (got {row!r})")
    await db.execute(f"PRAGMA synchronous = {storage.synchronous}")
    if not in_memory:
        # The log's size: checkpointed every so many pages, cut back once copied.
        await db.execute(f"PRAGMA wal_autocheckpoint = {int(storage.wal_checkpoint_pages)}")
        await db.execute(f"PRAGMA journal_size_limit = {int(storage.wal_size_limit_bytes)}")
    await db.execute("PRAGMA foreign_keys = ON")
    await db.execute("PRAGMA temp_store = MEMORY")
    # Touch the schema so a damaged file fails here, inside open().
    async with db.execute("SELECT count(*) FROM sqlite_master") as cursor:
        await cursor.fetchone()
    if not in_memory and check:
        problems = [str(row[0]) for row in await db.execute_fetchall("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise Unusable(f"PRAGMA quick_check found damage: {'; '.join(problems[:3])}")


async def claim_database(
    meta_get: Callable[[str], Awaitable[str | None]],
    transaction: Transaction,
    agent: str,
    categories: Sequence[str],
    now: float,
    initial_meta: Mapping[str, str],
) -> None:
    """Record ``agent`` as the owner, with its categories and stats row.

    Raises:
        Unusable: the database belongs to another agent.
    """
    before = await meta_get("agent")
    if before is not None and before != agent:
        raise Unusable(f"this database belongs to {before!r}, not {agent!r}")
    async with transaction() as db:
        # Another process may claim a new database at the same moment: insert
        # only if absent, then read the owner again inside the transaction.
        await db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('agent', ?)", (agent,))
        rows = await db.execute_fetchall("SELECT value FROM meta WHERE key = 'agent'")
        owner = str(next(iter(rows))[0])
        if owner != agent:
            raise Unusable(f"this database belongs to {owner!r}, not {agent!r}")
        # Names this database: a FAISS snapshot made from another file is refused.
        await db.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('instance', ?)",
            (uuid.uuid4().hex,),
        )
        await db.executemany(
            "INSERT OR IGNORE INTO categories (name, created_at) VALUES (?, ?)",
            [(name, now) for name in categories],
        )
        await db.execute("INSERT OR IGNORE INTO agent_stats (agent) VALUES (?)", (agent,))
        if before is None and initial_meta:  # a new database: nobody had claimed it
            await db.executemany(
                "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                list(initial_meta.items()),
            )


def quarantine_damaged(path: Path, exc: sqlite3.DatabaseError) -> StorageCorrupted:
    """Move a damaged database (with its ``-wal``/``-shm``) aside; the error to raise."""
    moved = quarantine(path, f"not a readable SQLite database: {exc}")
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            with contextlib.suppress(OSError):
                side.replace(moved.with_name(moved.name + suffix))
    return StorageCorrupted(
        f"{path} is not a readable memory database ({exc}); it was moved to "
        f"{moved}. The next open restores the newest good backup from backup/ "
        '(MemoryConfig.on_damage="restore", the default) or, if there is none, refuses '
        "and says how to restore it or start empty.",
        path=path,
        quarantined_to=moved,
    )
