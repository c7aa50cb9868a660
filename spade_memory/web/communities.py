"""The graph as the inspector draws it: entities sized by degree, coloured by community.

Communities come from weighted Louvain (networkx), computed on a worker thread for
each look and never written anywhere: they describe the drawing, not the memory.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..storage.graph_overview import GraphOverview

__all__ = ["communities", "graph_document"]

SEED = 7
"""Louvain's random seed: the same graph gets the same communities on every look."""


def communities(overview: GraphOverview) -> dict[int, int]:
    """``{node id: community}`` by weighted Louvain; communities numbered by size,
    the largest 0. An edge's weight is the sum over the memories saying it."""
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(node.id for node in overview.nodes)
    for edge in overview.edges:
        if graph.has_edge(edge.source, edge.target):
            graph[edge.source][edge.target]["weight"] += edge.weight
        else:
            graph.add_edge(edge.source, edge.target, weight=edge.weight)
    found = nx.community.louvain_communities(graph, weight="weight", seed=SEED)
    ordered = sorted(found, key=lambda group: (-len(group), min(group)))
    return {node: number for number, group in enumerate(ordered) for node in group}


async def graph_document(overview: GraphOverview) -> dict[str, Any]:
    """The JSON the graph page draws: nodes (with degree and community) and edges."""
    groups = await asyncio.to_thread(communities, overview)
    degree: dict[int, int] = {node.id: 0 for node in overview.nodes}
    for edge in overview.edges:
        degree[edge.source] += 1
        degree[edge.target] += 1
    return {
        "nodes": [
            {
                "id": node.id,
                "key": node.key,
                "type": node.type,
                "label": node.value,
                "memories": node.memories,
                "degree": degree[node.id],
                "community": groups.get(node.id, 0),
            }
            for node in overview.nodes
        ],
        "edges": [
            {
                "source": edge.source,
                "target": edge.target,
                "relation": edge.relation,
                "weight": edge.weight,
                "memories": edge.memories,
                "memory_id": edge.memory_id,
            }
            for edge in overview.edges
        ],
        "communities": len(set(groups.values())),
        "total_nodes": overview.total_nodes,
    }
