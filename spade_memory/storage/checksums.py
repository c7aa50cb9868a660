"""Checksums of the memories' rows: damage SQLite itself cannot see.

SQLite checks the structure of its pages, not what a row holds: a flipped byte
inside a memory's text reads back as another text, and ``PRAGMA quick_check``
and ``integrity_check`` both pass. Every row of ``memories`` therefore has a
checksum in ``memory_checksums``, written in the same transaction as the row:
:data:`TRIGGERS` (temporary triggers, created on each connection of the store,
so every write path is covered, whoever begins its transaction) compute it with
:data:`DIGEST_FUNCTION` over the fields a memory's identity and text are made of
(uid, category, content, context, created, source, metadata), and number it
with a growing ``seq``.

On open, :func:`mismatches` recomputes the checksums written since the last
verified open (every one when the memory is small) and compares: a row whose
text changed without its checksum, a checksum whose row is gone, or a row with
no checksum is damage, reported and quarantined like damage found by SQLite.
The fields that change all the time (access counts, importance, status) are
left out, so those writes (the daily decay rewrites every importance) cost
nothing more. Editing ``memories`` with another
tool (the ``sqlite3`` shell) is, to this check, damage too.
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite

__all__ = [
    "DIGEST_FUNCTION",
    "TRIGGERS",
    "Mismatch",
    "create_triggers",
    "install",
    "mismatches",
    "register",
    "row_digest",
    "set_verified",
    "verified_seq",
    "verify",
]

DIGEST_FUNCTION = "spade_memory_digest"
"""The SQL function computing a row's checksum (registered on every connection)."""

_FIELDS = (
    "uid, category, content, context, created_at, source_conversation, source_sender, metadata"
)
_NEW = ", ".join(f"new.{name}" for name in _FIELDS.split(", "))
_UPSERT = (
    "INSERT INTO memory_checksums (memory_id, seq, digest) VALUES (new.id, "
    "(SELECT coalesce(max(seq), 0) + 1 FROM memory_checksums), "
    f"{DIGEST_FUNCTION}({_NEW})) "
    "ON CONFLICT (memory_id) DO UPDATE SET seq = excluded.seq, digest = excluded.digest"
)
TRIGGERS: tuple[str, ...] = (
    "CREATE TEMP TRIGGER IF NOT EXISTS memory_checksum_on_insert "
    f"AFTER INSERT ON main.memories BEGIN {_UPSERT}; END",
    "CREATE TEMP TRIGGER IF NOT EXISTS memory_checksum_on_update "
    f"AFTER UPDATE OF {_FIELDS}, id ON main.memories BEGIN "
    "DELETE FROM memory_checksums WHERE memory_id = old.id AND old.id != new.id; "
    f"{_UPSERT}; END",
    "CREATE TEMP TRIGGER IF NOT EXISTS memory_checksum_on_delete "
    "AFTER DELETE ON main.memories BEGIN "
    "DELETE FROM memory_checksums WHERE memory_id = old.id; END",
)
"""Keep ``memory_checksums`` in step with ``memories`` on this connection."""

_VERIFIED = "checksums_verified"  # meta key: the last seq verified on open
_SAMPLE = 20

_SEPARATOR = b"\x1f"
_NULL = b"\x00"


def _encode(value: Any) -> bytes:
    if value is None:
        return _NULL
    if isinstance(value, float):
        return b"f" + struct.pack("<d", value)
    if isinstance(value, int):
        return b"i" + str(value).encode()
    if isinstance(value, bytes):
        return b"b" + value
    return b"s" + str(value).encode("utf-8", "surrogatepass")


def row_digest(*fields: Any) -> bytes:
    """The checksum of a row's fields (8 bytes of BLAKE2b over a typed encoding)."""
    return hashlib.blake2b(
        _SEPARATOR.join(_encode(field) for field in fields), digest_size=8
    ).digest()


def register(db: sqlite3.Connection) -> None:
    """Register :data:`DIGEST_FUNCTION` on a plain ``sqlite3`` connection."""
    db.create_function(DIGEST_FUNCTION, -1, row_digest, deterministic=True)


async def install(db: aiosqlite.Connection) -> None:
    """Register :data:`DIGEST_FUNCTION` on the store's connection."""
    await db.create_function(DIGEST_FUNCTION, -1, row_digest, deterministic=True)


async def create_triggers(db: aiosqlite.Connection) -> None:
    """Create :data:`TRIGGERS` (once the schema holds ``memory_checksums``)."""
    for statement in TRIGGERS:
        await db.execute(statement)


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Rows whose checksums do not match what they hold.

    Attributes:
        altered: memories whose fields changed without their checksum.
        lost: checksums whose memory is gone (its row vanished without a delete).
        unsummed: memories with no checksum.
        checked: how many checksums were compared.
        last_seq: the highest checksum number seen.
    """

    altered: Sequence[int]
    lost: Sequence[int]
    unsummed: Sequence[int]
    checked: int
    last_seq: int

    def __bool__(self) -> bool:
        return bool(self.altered or self.lost or self.unsummed)

    def describe(self) -> str:
        """One sentence naming what was found (up to 20 ids of each kind)."""
        parts = []
        for what, ids in (
            ("altered after they were written", self.altered),
            ("lost without being deleted", self.lost),
            ("without a checksum", self.unsummed),
        ):
            if ids:
                shown = ", ".join(str(i) for i in ids[:_SAMPLE])
                parts.append(f"{len(ids)} memories {what} (ids {shown})")
        return "; ".join(parts)


Fetch = Callable[[str, Sequence[Any]], Awaitable[list[Any]]]


async def verified_seq(fetch: Fetch) -> int:
    """The last checksum number verified by an earlier open (0 when none)."""
    rows = await fetch("SELECT value FROM meta WHERE key = ?", (_VERIFIED,))
    return int(rows[0][0]) if rows else 0


async def mismatches(fetch: Fetch, *, after_seq: int = 0) -> Mismatch:
    """Compare the checksums numbered after ``after_seq`` with their rows.

    Memories with no checksum at all are looked for whatever ``after_seq`` is
    (an anti-join of two integer keys: cheap).
    """
    fields = ", ".join(f"m.{name}" for name in _FIELDS.split(", "))
    rows = await fetch(
        "SELECT c.memory_id, m.id IS NULL, "
        f"m.id IS NOT NULL AND {DIGEST_FUNCTION}({fields}) != c.digest, c.seq "
        "FROM memory_checksums AS c "
        "LEFT JOIN memories AS m ON m.id = c.memory_id WHERE c.seq > ?",
        (int(after_seq),),
    )
    altered = [int(row[0]) for row in rows if row[2]]
    lost = [int(row[0]) for row in rows if row[1]]
    last = max((int(row[3]) for row in rows), default=int(after_seq))
    unsummed_rows = await fetch(
        "SELECT id FROM memories WHERE id NOT IN (SELECT memory_id FROM memory_checksums)",
        (),
    )
    unsummed = [int(row[0]) for row in unsummed_rows]
    return Mismatch(altered, lost, unsummed, len(rows), last)


async def set_verified(db: aiosqlite.Connection, seq: int) -> None:
    """Record ``seq`` as verified (inside the caller's write transaction)."""
    await db.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value "
        "WHERE CAST(value AS INTEGER) < CAST(excluded.value AS INTEGER)",
        (_VERIFIED, str(int(seq))),
    )


async def verify(fetch: Fetch, *, whole_below: int) -> Mismatch:
    """The open's check: every checksum when fewer than ``whole_below`` memories have
    one, else those written since the last verified open."""
    after = await verified_seq(fetch)
    if after:
        rows = await fetch("SELECT count(*) FROM memory_checksums", ())
        if int(rows[0][0]) < whole_below:
            after = 0
    return await mismatches(fetch, after_seq=after)
