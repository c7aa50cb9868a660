"""Shared helpers of the maintenance tests: a simulated clock, facts, queries."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from spade_memory.manager import MemoryManager

START = 1_750_000_000.0
DAY = 86_400.0

FACTS = (
    "Alice prefers green tea in the morning",
    "The Lisbon office opens on 3 March",
    "Bob's birthday is on 12 July",
    "The staging database password rotates every 30 days",
    "Carol manages the Berlin data team",
    "The quarterly report is due on Friday",
    "Dave is allergic to peanuts",
    "The build server runs Ubuntu 22.04",
    "Erin plays the cello in an orchestra",
    "The coffee machine on floor 2 is broken",
    "用户喜欢在周末去爬山",
    "Frank moved from Paris to Madrid",
)
QUERIES = ("green tea", "Lisbon office", "database password", "Berlin team", "爬山", "birthday")


Opener = Callable[..., Awaitable[MemoryManager]]


class Clock:
    """A clock that moves only when told to."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, days: float) -> None:
        self.now += days * DAY


async def fill(
    manager: MemoryManager, facts: tuple[str, ...] = FACTS, *, dedupe: bool = True
) -> list[int]:
    ids = [(await manager.store(fact, dedupe=dedupe)).id for fact in facts]
    await manager.flush()
    return ids


async def answers(manager: MemoryManager) -> list[list[tuple[str, float]]]:
    """What every query of :data:`QUERIES` finds: ``(uid, score)`` best first."""
    found = []
    for query in QUERIES:
        results = await manager.search(query, limit=5)
        found.append([(r.memory.uid, round(r.score, 6)) for r in results])
    return found


async def rows(memory: MemoryManager, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in await memory.base_store.fetchall(sql)]


async def graph_rows(memory: MemoryManager) -> dict[str, list[tuple[Any, ...]]]:
    """The graph tables' content, by keys and memory ids (not by node or atom ids)."""
    return {
        "nodes": await rows(memory, "SELECT key, type, value FROM graph_nodes ORDER BY key"),
        "edges": await rows(
            memory,
            "SELECT s.key, t.key, e.relation, e.weight, e.memory_id FROM graph_edges AS e "
            "JOIN graph_nodes AS s ON s.id = e.source_id JOIN graph_nodes AS t "
            "ON t.id = e.target_id ORDER BY 1, 2, 3, 5",
        ),
        "entries": await rows(
            memory,
            "SELECT memory_id, summary, relation_type FROM graph_entries ORDER BY memory_id",
        ),
        "entry_nodes": await rows(
            memory,
            "SELECT e.memory_id, n.key FROM graph_entry_nodes AS e "
            "JOIN graph_nodes AS n ON n.id = e.node_id ORDER BY 1, 2",
        ),
        "entry_text": await rows(
            memory, "SELECT rowid, summary FROM graph_entries_fts ORDER BY rowid"
        ),
        "atoms": await rows(
            memory,
            "SELECT memory_id, position, text, key, type, status, subject, predicate, object, "
            "reinforcements FROM memory_atoms ORDER BY memory_id, position",
        ),
    }
