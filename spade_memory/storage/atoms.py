"""The atoms of one agent's base memory: reads, statuses and reinforcement.

Atoms are cut from a memory's text by :mod:`spade_memory.text.atoms` and written
with it by :mod:`spade_memory.storage.graph`; :class:`AtomBook` reads them back
with their status now, and records lapsed lifetimes and forgotten atoms. Its
reads are those of :class:`AtomReads`, which needs only a read query: a
read-only look into a memory (:mod:`.memory_view`) reads atoms with it too.
"""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from ..config import AtomConfig
from ..errors import MemoryNotFound
from ..text.atoms import Atom
from .graph import forget_atoms
from .scope_filter import same_scope
from .sql import chunks, placeholders

if TYPE_CHECKING:
    from .base import BaseMemoryStore
    from .memory_rows import Fetch

__all__ = ["AtomBook", "AtomReads"]


_COLUMNS = (
    "a.id, a.memory_id, a.position, a.text, a.type, a.status, a.subject, a.predicate, "
    "a.object, a.importance, a.reinforcements, a.created_at, a.reinforced_at, "
    "a.expires_at, a.superseded_by, a.ttl_seconds"
)
# Whether atom ``a`` was superseded by a claim of another scope: the memories of the
# two atoms differ in owner or visibility, or are conversation memories of two
# conversations. Such a supersession does not count for ``a`` (see AtomBook.atoms).
_ACROSS_SCOPES = (
    "(a.superseded_by IS NOT NULL AND EXISTS (SELECT 1 FROM memory_atoms AS s "
    "JOIN memories AS sm ON sm.id = s.memory_id JOIN memories AS am ON am.id = a.memory_id "
    f"WHERE s.id = a.superseded_by AND NOT {same_scope('sm', 'am')}))"
)


def _in_scope(row: Sequence[Any]) -> Sequence[Any]:
    """An atom's row (with ``_ACROSS_SCOPES`` last) as its own scope sees it: one
    superseded only by a claim of another scope is active, superseded by nothing
    (whose claim that was is none of its readers' business)."""
    if row[5] == "superseded" and row[16]:
        return (*row[:5], "active", *row[6:14], None, *row[15:])
    return row


class AtomReads:
    """The atoms of one agent's base memory as read by ``fetch`` (one read query),
    each with its status now."""

    def __init__(self, fetch: Fetch, config: AtomConfig) -> None:
        self._fetch = fetch
        self._config = config

    def _atom(self, row: Sequence[Any], now: float) -> Atom:
        status = str(row[5])
        expires_at, ttl = float(row[13]), float(row[15])
        if status in ("active", "dormant"):
            if now < expires_at:
                status = "active"
            elif now < expires_at + ttl * self._config.dormant_fraction:
                status = "dormant"
            else:
                status = "expired"
        return Atom(
            id=int(row[0]),
            memory_id=int(row[1]),
            position=int(row[2]),
            text=str(row[3]),
            type=str(row[4]),
            status=status,
            subject=row[6],
            predicate=row[7],
            object=row[8],
            importance=float(row[9]),
            reinforcements=int(row[10]),
            created_at=float(row[11]),
            reinforced_at=float(row[12]),
            expires_at=expires_at,
            superseded_by=None if row[14] is None else int(row[14]),
        )

    async def atoms(self, memory_ids: Iterable[int], now: float) -> dict[int, list[Atom]]:
        """Every atom of these memories (any status), in order, keyed by memory id.

        An atom superseded by a claim told in another scope (another owner or
        visibility, or another conversation's memory) is not superseded for its
        own: what Bob says never hides part of what Alice told privately. Its
        status is then that of its lifetime, as if the claim had not been made.
        """
        wanted = list(dict.fromkeys(int(i) for i in memory_ids))
        found: dict[int, list[Atom]] = {}
        for chunk in chunks(wanted):
            rows = await self._fetch(
                f"SELECT {_COLUMNS}, {_ACROSS_SCOPES} AS across FROM memory_atoms AS a "
                f"WHERE a.memory_id IN ({placeholders(len(chunk))}) "
                "ORDER BY a.memory_id, a.position",
                chunk,
            )
            for row in rows:
                atom = self._atom(_in_scope(row), now)
                found.setdefault(atom.memory_id, []).append(atom)
        return found

    async def forgotten_texts(self) -> dict[int, list[str]]:
        """The texts of the atoms marked forgotten, in order, keyed by memory id."""
        rows = await self._fetch(
            "SELECT memory_id, text FROM memory_atoms WHERE status = 'forgotten' "
            "ORDER BY memory_id, position",
            (),
        )
        found: dict[int, list[str]] = {}
        for memory_id, text in rows:
            found.setdefault(int(memory_id), []).append(str(text))
        return found

    async def atom(self, atom_id: int, now: float) -> Atom | None:
        """The atom ``atom_id`` with its status at ``now``, or ``None``."""
        rows = await self._fetch(
            f"SELECT {_COLUMNS}, {_ACROSS_SCOPES} FROM memory_atoms AS a WHERE a.id = ?",
            (int(atom_id),),
        )
        if not rows:
            return None
        return self._atom(_in_scope(rows[0]), now)

    async def live(self, memory_id: int, now: float) -> builtins.list[Atom]:
        """The atoms of a memory that are live now (the ones to recall), in order."""
        return [a for a in (await self.atoms([memory_id], now)).get(memory_id, []) if a.live]

    async def hidden(self, memory_ids: Iterable[int], now: float) -> set[int]:
        """The memories among ``memory_ids`` that have atoms but none live now."""
        wanted = list(dict.fromkeys(int(i) for i in memory_ids))
        hidden: set[int] = set()
        for chunk in chunks(wanted):
            rows = await self._fetch(
                "SELECT a.memory_id FROM memory_atoms AS a WHERE a.memory_id IN "
                f"({placeholders(len(chunk))}) GROUP BY a.memory_id "
                # 'dormant' as recorded, live again at ``now`` (a clock set back): as
                # _atom reads it, by its expiry, not by the status recorded
                "HAVING sum(a.expires_at > ? AND (a.status IN ('active', 'dormant') OR "
                f"(a.status = 'superseded' AND {_ACROSS_SCOPES}))) = 0",
                [*chunk, now],
            )
            hidden.update(int(row[0]) for row in rows)
        return hidden

    async def counts_by_status(self) -> dict[str, int]:
        """How many atoms are stored with each recorded status (lapsed lifetimes are
        recorded by :meth:`refresh`)."""
        rows = await self._fetch("SELECT status, count(*) FROM memory_atoms GROUP BY status", ())
        return {str(row[0]): int(row[1]) for row in rows}


class AtomBook(AtomReads):
    """The atoms of one agent's base memory: reads, statuses and reinforcement."""

    def __init__(self, base: BaseMemoryStore, config: AtomConfig) -> None:
        super().__init__(base.fetchall, config)
        self._base = base

    async def refresh(self, now: float) -> dict[str, int]:
        """Record lapsed lifetimes: active -> dormant -> expired. Returns counts changed."""
        fraction = self._config.dormant_fraction
        async with self._base.transaction() as db:
            cursor = await db.execute(
                "UPDATE memory_atoms SET status = 'expired' WHERE status IN "
                "('active', 'dormant') AND expires_at + ttl_seconds * ? <= ?",
                (fraction, now),
            )
            expired = cursor.rowcount
            await cursor.close()
            cursor = await db.execute(
                "UPDATE memory_atoms SET status = 'dormant' "
                "WHERE status = 'active' AND expires_at <= ?",
                (now,),
            )
            dormant = cursor.rowcount
            await cursor.close()
        return {"dormant": dormant, "expired": expired}

    async def forget_texts(self, texts: Mapping[int, Collection[str]]) -> int:
        """Mark forgotten every atom of memory ``m`` whose text is in ``texts[m]``;
        returns how many were marked."""
        pairs = [(int(m), str(text)) for m, wanted in texts.items() for text in wanted]
        if not pairs:
            return 0

        def work(db: sqlite3.Connection) -> int:
            return sum(forget_atoms("memory_id = ? AND text = ?", pair, db) for pair in pairs)

        return await self._base.run_write(work, "forgetting atoms")

    async def forget(self, atom_id: int) -> Atom:
        """Mark one atom forgotten (its memory stays). Raises MemoryNotFound."""
        found = await self._base.fetchall(
            "SELECT 1 FROM memory_atoms WHERE id = ?", (int(atom_id),)
        )
        if not found:
            raise MemoryNotFound(f"there is no memory atom with id {atom_id}")
        await self._base.run_write(
            partial(forget_atoms, "id = ?", (int(atom_id),)), "forgetting an atom"
        )
        rows = await self._base.fetchall(
            f"SELECT {_COLUMNS} FROM memory_atoms AS a WHERE a.id = ?", (int(atom_id),)
        )
        return self._atom(rows[0], 0.0)
