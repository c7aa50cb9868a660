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
text changed without its checksum, or a row with no checksum, is damage,
reported and quarantined like damage found by SQLite. A checksum whose row is
gone is what a ``DELETE`` made by hand leaves: logged, and cleared with the rest
of what the row left by the consistency check.
The fields that change all the time (access counts, importance, status) are
left out, so those writes (the daily decay rewrites every importance) cost
nothing more. Editing ``memories`` with another
tool (the ``sqlite3`` shell) is, to this check, damage too.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a read-only check (``memory_view``) runs on a plain connection
    import aiosqlite

__all__ = [
    "DIGEST_FUNCTION",
    "TRIGGERS",
    "Mismatch",
    "create_triggers",
    "forget_lost",
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


def row_digest(*fields: Any) -> bytes:
    """The checksum of a row's fields: 8 bytes of BLAKE2b over their ``repr``.

    ``repr`` of a tuple of SQLite values (``None``, ``int``, ``float``, ``str``,
    ``bytes``) tells every value and type apart (a float's shortest round-trip
    digits, strings quoted and escaped, lone surrogates too), and is the fastest
    encoding at hand: a memory's checksum costs a few microseconds.
    """
    return hashlib.blake2b(repr(fields).encode("utf-8", "surrogatepass"), digest_size=8).digest()


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

    @property
    def damaged(self) -> bool:
        """Whether a row was altered or appeared without its checksum (a row that
        vanished whole is what a hand-made ``DELETE`` leaves, and the consistency
        check clears what it left behind)."""
        return bool(self.altered or self.unsummed)

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
    # Only the rows that differ come back: the comparison runs inside SQLite.
    rows = await fetch(
        "SELECT c.memory_id, m.id IS NULL FROM memory_checksums AS c "
        "LEFT JOIN memories AS m ON m.id = c.memory_id WHERE c.seq > ? "
        f"AND (m.id IS NULL OR {DIGEST_FUNCTION}({fields}) != c.digest)",
        (int(after_seq),),
    )
    altered = [int(row[0]) for row in rows if not row[1]]
    lost = [int(row[0]) for row in rows if row[1]]
    counted = await fetch(
        "SELECT count(*), max(seq) FROM memory_checksums WHERE seq > ?", (int(after_seq),)
    )
    checked = int(counted[0][0])
    last = int(after_seq) if counted[0][1] is None else int(counted[0][1])
    unsummed_rows = await fetch(
        "SELECT id FROM memories WHERE id NOT IN (SELECT memory_id FROM memory_checksums)",
        (),
    )
    unsummed = [int(row[0]) for row in unsummed_rows]
    return Mismatch(altered, lost, unsummed, checked, last)


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


async def forget_lost(db: aiosqlite.Connection, memory_ids: Sequence[int]) -> None:
    """Delete the checksums of memories that are gone (inside the caller's transaction)."""
    await db.executemany(
        "DELETE FROM memory_checksums WHERE memory_id = ? "
        "AND memory_id NOT IN (SELECT id FROM memories)",
        [(int(memory_id),) for memory_id in memory_ids],
    )
