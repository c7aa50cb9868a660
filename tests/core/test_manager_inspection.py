"""The reads an inspector needs from ``MemoryManager``: lists by status and date, the
graph as a whole, one memory's neighbours, the memories naming an entity."""

from __future__ import annotations

import pytest

from spade_memory.errors import InvalidToolInput, MemoryNotFound
from spade_memory.limits import LIMITS
from spade_memory.manager import MemoryManager


async def test_list_by_status_and_date(manager: MemoryManager) -> None:
    first = await manager.store("The Oslo depot opens at 8")
    second = await manager.store("The Bergen depot opens at 9")
    await manager.archive(first.id)
    assert [m.id for m in await manager.list()] == [second.id]
    assert [m.id for m in await manager.list(status="archived")] == [first.id]
    assert {m.id for m in await manager.list(status=None)} == {first.id, second.id}
    now = manager.now()
    assert await manager.list(status=None, created_to=first.created_at) == []
    assert {m.id for m in await manager.list(status=None, created_from=first.created_at)} == {
        first.id,
        second.id,
    }
    assert [m.id for m in await manager.list(created_from=now - 60, created_to=now + 60)] == [
        second.id
    ]
    with pytest.raises(InvalidToolInput, match="status must be one of"):
        await manager.list(status="forgotten")
    for bad in ("yesterday", float("nan"), True):
        with pytest.raises(InvalidToolInput, match="created_from"):
            await manager.list(created_from=bad)  # type: ignore[arg-type]


async def test_graph_overview_neighbours_and_node_memories(manager: MemoryManager) -> None:
    moved = await manager.store("Carol Smith moved to Berlin with Dave Jones")
    works = await manager.store("Dave Jones works at Acme Corp in Berlin")
    tea = await manager.store("Carol Smith prefers green tea", category="preference")
    overview = await manager.graph_overview()
    by_value = {node.value: node for node in overview.nodes}
    assert by_value["Berlin"].memories == 2 and by_value["Dave Jones"].memories == 2
    assert overview.total_nodes == len(overview.nodes)
    counts = [node.memories for node in overview.nodes]
    assert counts == sorted(counts, reverse=True)
    ids = {node.id for node in overview.nodes}
    assert overview.edges and all(e.source in ids and e.target in ids for e in overview.edges)
    top = await manager.graph_overview(max_nodes=2)
    assert [n.value for n in top.nodes] == [n.value for n in overview.nodes[:2]]
    assert {e.source for e in top.edges} | {e.target for e in top.edges} <= {
        n.id for n in top.nodes
    }
    types = await manager.graph_node_types()
    assert types == sorted(types) and by_value["Berlin"].type in types
    places = await manager.graph_overview(node_type=by_value["Berlin"].type)
    assert {n.type for n in places.nodes} == {by_value["Berlin"].type}
    assert (await manager.graph_overview(conversation="none-such")).nodes == []

    near = await manager.neighbours(moved.id)
    assert {"Carol Smith", "Berlin", "Dave Jones"} <= {n.value for n in near.nodes}
    assert dict(near.related) == {works.id: 2, tea.id: 1}
    assert any(edge[0] == "Carol Smith" and edge[2] == "Berlin" for edge in near.edges)

    node, memories = await manager.node_memories(by_value["Berlin"].id)
    assert node.value == "Berlin"
    assert [m.id for m in memories] == [works.id, moved.id]
    await manager.archive(works.id)
    _, memories = await manager.node_memories(by_value["Berlin"].id)
    assert [m.id for m in memories] == [moved.id]
    assert "Acme Corp" not in {n.value for n in (await manager.graph_overview()).nodes}

    with pytest.raises(MemoryNotFound):
        await manager.node_memories(999_999)
    with pytest.raises(MemoryNotFound):
        await manager.neighbours(999_999)
    with pytest.raises(InvalidToolInput):
        await manager.graph_overview(max_nodes=LIMITS.graph_view_nodes + 1)
    with pytest.raises(InvalidToolInput):
        await manager.graph_overview(node_type="")


async def test_activity_counts_writes(manager: MemoryManager) -> None:
    before = await manager.activity()
    stored = await manager.store("The Tromso depot opens at 10")
    await manager.forget(stored.id)
    after = await manager.activity()
    assert after["stores"] == (before.get("stores") or 0) + 1
    assert after["forgets"] == (before.get("forgets") or 0) + 1
