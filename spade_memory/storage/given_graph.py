"""The entities and relations a caller named for a memory, kept as long as the memory.

``store(..., entities=[...], relations=[...])`` adds names and links its text does not
show. Its graph is extracted from its text and those, when it is stored (or derived
behind the acknowledgement), and again whenever the graph is rebuilt (a new graph
version, ``rebuild_graph``) or repaired: :func:`keep_given` keeps them in the
memory's insert transaction, :func:`read_given` gives them to those extractions.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from .sql import chunks, placeholders

__all__ = [
    "KEEP_GIVEN",
    "Given",
    "forget_given",
    "given_values",
    "keep_given",
    "read_given",
    "union_given",
]

Given = tuple[tuple[str, ...], tuple[dict[str, str], ...]]
"""The entity names and the ``{source, relation, target}`` relations of a memory."""

Fetch = Callable[[str, Sequence[Any]], Awaitable[list[Any]]]


KEEP_GIVEN = "INSERT OR REPLACE INTO memory_given (memory_id, entities, relations) VALUES (?, ?, ?)"
"""Keeps a memory's row of :func:`given_values`."""


def given_values(
    memory_id: int, entities: Sequence[str], relations: Sequence[Mapping[str, str]]
) -> tuple[int, str | None, str | None]:
    """The values of :data:`KEEP_GIVEN` for what was named for a memory."""
    return (
        memory_id,
        json.dumps(list(entities), ensure_ascii=False) if entities else None,
        json.dumps([dict(r) for r in relations], ensure_ascii=False) if relations else None,
    )


def keep_given(
    memory_id: int,
    entities: Sequence[str],
    relations: Sequence[Mapping[str, str]],
    db: sqlite3.Connection,
) -> None:
    """Keep what a caller named for a new memory (nothing when it named nothing);
    inside the memory's insert transaction."""
    if not entities and not relations:
        return
    db.execute(KEEP_GIVEN, given_values(memory_id, entities, relations))


def union_given(named: Iterable[Given]) -> Given:
    """Everything named in ``named``, each name and relation once, in order."""
    named = list(named)
    entities = tuple(dict.fromkeys(name for found, _ in named for name in found))
    linked = dict.fromkeys(tuple(sorted(r.items())) for _, found in named for r in found)
    return entities, tuple(dict(r) for r in linked)


def forget_given(memory_id: int, db: sqlite3.Connection) -> None:
    """Drop what was named for a memory that goes; inside its delete transaction."""
    db.execute("DELETE FROM memory_given WHERE memory_id = ?", (memory_id,))


async def read_given(fetch: Fetch, memory_ids: Iterable[int]) -> dict[int, Given]:
    """What was named for each of ``memory_ids`` (those named nothing left out)."""
    found: dict[int, Given] = {}
    for chunk in chunks(list(dict.fromkeys(int(i) for i in memory_ids))):
        rows = await fetch(
            "SELECT memory_id, entities, relations FROM memory_given "
            f"WHERE memory_id IN ({placeholders(len(chunk))})",
            chunk,
        )
        for memory_id, entities, relations in rows:
            found[int(memory_id)] = (
                tuple(json.loads(entities)) if entities else (),
                tuple(json.loads(relations)) if relations else (),
            )
    return found
