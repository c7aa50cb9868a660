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

__all__ = ["Given", "forget_given", "keep_given", "read_given"]

Given = tuple[tuple[str, ...], tuple[dict[str, str], ...]]
"""The entity names and the ``{source, relation, target}`` relations of a memory."""

Fetch = Callable[[str, Sequence[Any]], Awaitable[list[Any]]]


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
    db.execute(
        "INSERT OR REPLACE INTO memory_given (memory_id, entities, relations) VALUES (?, ?, ?)",
        (
            memory_id,
            json.dumps(list(entities), ensure_ascii=False) if entities else None,
            json.dumps([dict(r) for r in relations], ensure_ascii=False) if relations else None,
        ),
    )


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
