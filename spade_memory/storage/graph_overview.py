"""Reads of the graph as a whole, for looking at it: its busiest nodes and the edges
between them, one memory's graph neighbourhood, the memories that name a node.

The retriever reads the graph a few nodes at a time (:mod:`.graph_store`); an
inspector draws it. Only active memories count: an archived memory's entities are
not drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .memory_rows import Fetch
from .sql import placeholders

__all__ = [
    "GraphEdgeRow",
    "GraphNodeRow",
    "GraphOverview",
    "MemoryNeighbours",
    "graph_overview",
    "memory_neighbours",
    "node_memory_ids",
    "node_types",
]


@dataclass(frozen=True, slots=True)
class GraphNodeRow:
    """An entity of the graph and how many active memories name it."""

    id: int
    key: str
    type: str
    value: str
    memories: int


@dataclass(frozen=True, slots=True)
class GraphEdgeRow:
    """A relation between two entities, summed over the active memories that say it."""

    source: int
    target: int
    relation: str
    weight: float
    memories: int
    memory_id: int
    """The newest memory that says it."""


@dataclass(frozen=True, slots=True)
class GraphOverview:
    """The busiest nodes of a graph and the edges between them."""

    nodes: list[GraphNodeRow]
    edges: list[GraphEdgeRow]
    total_nodes: int
    """How many nodes matched the filters before the cut to the busiest."""


@dataclass(frozen=True, slots=True)
class MemoryNeighbours:
    """What one memory names in the graph, what it relates, and who shares its entities."""

    nodes: list[GraphNodeRow]
    edges: list[tuple[str, str, str, float]]
    """``(source value, relation, target value, weight)`` of the memory's own edges."""
    related: list[tuple[int, int]]
    """``(memory id, entities shared)`` of other active memories, most shared first."""


def _active(conversation: str | None) -> tuple[str, list[Any]]:
    clause = "m.status = 'active'"
    if conversation is None:
        return clause, []
    return clause + " AND m.source_conversation = ?", [conversation]


async def graph_overview(
    fetch: Fetch,
    *,
    max_nodes: int,
    conversation: str | None = None,
    node_type: str | None = None,
) -> GraphOverview:
    """The ``max_nodes`` nodes named by the most active memories (of ``conversation``,
    of ``node_type``), and the edges between them, summed per relation."""
    where, params = _active(conversation)
    typed = ""
    if node_type is not None:
        typed = " AND n.type = ?"
        params = [*params, node_type]
    joined = (
        "FROM graph_entry_nodes AS e JOIN memories AS m ON m.id = e.memory_id "
        f"JOIN graph_nodes AS n ON n.id = e.node_id WHERE {where}{typed}"
    )
    rows = await fetch(
        f"SELECT n.id, n.key, n.type, n.value, count(*) AS named {joined} "
        "GROUP BY n.id ORDER BY named DESC, n.id LIMIT ?",
        [*params, int(max_nodes)],
    )
    nodes = [GraphNodeRow(int(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4])) for r in rows]
    total = len(nodes)
    if total == int(max_nodes):
        counted = await fetch(f"SELECT count(DISTINCT n.id) {joined}", params)
        total = int(counted[0][0])
    if not nodes:
        return GraphOverview([], [], total)
    ids = [node.id for node in nodes]
    marks = placeholders(len(ids))
    where, params = _active(conversation)
    edge_rows = await fetch(
        "SELECT g.source_id, g.target_id, g.relation, sum(g.weight), count(DISTINCT g.memory_id), "
        "max(g.memory_id) FROM graph_edges AS g JOIN memories AS m ON m.id = g.memory_id "
        f"WHERE {where} AND g.source_id IN ({marks}) AND g.target_id IN ({marks}) "
        "AND g.source_id != g.target_id GROUP BY g.source_id, g.target_id, g.relation",
        [*params, *ids, *ids],
    )
    edges = [
        GraphEdgeRow(int(r[0]), int(r[1]), str(r[2]), float(r[3]), int(r[4]), int(r[5]))
        for r in edge_rows
    ]
    return GraphOverview(nodes, edges, total)


async def node_types(fetch: Fetch) -> list[str]:
    """The entity types the graph holds, sorted."""
    rows = await fetch("SELECT DISTINCT type FROM graph_nodes ORDER BY type", ())
    return [str(r[0]) for r in rows]


async def memory_neighbours(fetch: Fetch, memory_id: int, *, limit: int) -> MemoryNeighbours:
    """The entities ``memory_id`` names, its relations, and the ``limit`` active memories
    sharing the most entities with it."""
    rows = await fetch(
        "SELECT n.id, n.key, n.type, n.value, n.entries FROM graph_entry_nodes AS e "
        "JOIN graph_nodes AS n ON n.id = e.node_id WHERE e.memory_id = ? ORDER BY n.value",
        (memory_id,),
    )
    nodes = [GraphNodeRow(int(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4])) for r in rows]
    edge_rows = await fetch(
        "SELECT s.value, g.relation, t.value, g.weight FROM graph_edges AS g "
        "JOIN graph_nodes AS s ON s.id = g.source_id JOIN graph_nodes AS t ON t.id = g.target_id "
        "WHERE g.memory_id = ? ORDER BY g.id",
        (memory_id,),
    )
    edges = [(str(r[0]), str(r[1]), str(r[2]), float(r[3])) for r in edge_rows]
    related_rows = await fetch(
        "SELECT o.memory_id, count(*) AS shared FROM graph_entry_nodes AS e "
        "JOIN graph_entry_nodes AS o ON o.node_id = e.node_id AND o.memory_id != e.memory_id "
        "JOIN memories AS m ON m.id = o.memory_id "
        "WHERE e.memory_id = ? AND m.status = 'active' "
        "GROUP BY o.memory_id ORDER BY shared DESC, o.memory_id DESC LIMIT ?",
        (memory_id, int(limit)),
    )
    related = [(int(r[0]), int(r[1])) for r in related_rows]
    return MemoryNeighbours(nodes, edges, related)


async def node_memory_ids(
    fetch: Fetch, node_id: int, *, limit: int
) -> tuple[GraphNodeRow | None, list[int]]:
    """A node and the ids of the newest ``limit`` active memories that name it."""
    rows = await fetch(
        "SELECT id, key, type, value, entries FROM graph_nodes WHERE id = ?", (node_id,)
    )
    if not rows:
        return None, []
    r = rows[0]
    node = GraphNodeRow(int(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]))
    id_rows = await fetch(
        "SELECT e.memory_id FROM graph_entry_nodes AS e JOIN memories AS m ON m.id = e.memory_id "
        "WHERE e.node_id = ? AND m.status = 'active' ORDER BY e.memory_id DESC LIMIT ?",
        (node_id, int(limit)),
    )
    return node, [int(r[0]) for r in id_rows]
