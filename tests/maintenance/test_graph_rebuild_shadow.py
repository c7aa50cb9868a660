"""The graph is rebuilt into a shadow file and switched in one transaction.

Interrupted at random batches it resumes and ends with the graph an uninterrupted
rebuild makes; memories written during the rebuild have their graph after the
switch; until the switch, searches and the graph tables are the old graph's.
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from maint_support import Clock, Opener, graph_rows, rows

from spade_memory.config import MaintenanceConfig
from spade_memory.errors import StorageError
from spade_memory.maintenance.graph_rebuild import shadow_path
from spade_memory.manager import MemoryManager
from spade_memory.models import Memory
from spade_memory.text.graph import Entity, MemoryGraph

BATCH = 4
COUNT = 30
NAMES = ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank")
CITIES = ("Lisbon", "Berlin", "Madrid", "Oslo", "Porto")
MARKER = "marker:rebuilt"


class Interrupted(Exception):
    """Raised by a progress callback to cut a rebuild short."""


def fact(n: int) -> str:
    name, city = NAMES[n % len(NAMES)], CITIES[n % len(CITIES)]
    return f"{name} met {NAMES[(n + 1) % len(NAMES)]} in {city} on day {n} about project {n % 4}"


async def filled(open_memory: Opener, jid: str) -> MemoryManager:
    memory = await open_memory(jid)
    await memory.store_many([{"content": fact(n)} for n in range(COUNT)])
    await memory.flush()
    return memory


def stop_after(batches: int) -> Any:
    calls = 0

    def progress(done: int, total: int) -> None:
        nonlocal calls
        calls += 1
        if calls > batches:  # the first call comes before any batch
            raise Interrupted(f"after {batches} batches")

    return progress


def shadow_of(memory: MemoryManager) -> Path:
    path = shadow_path(memory.base_store.path)
    assert path is not None
    return path


def marked(memory: MemoryManager) -> None:
    """Make the memory's graph extraction add a marker node (a rebuild becomes visible)."""
    engine = memory.engine  # what maintenance works through
    extract = engine.graph_for

    def graph_for(item: Memory, given: Any = None) -> MemoryGraph:
        graph = extract(item, given)
        entity = Entity(MARKER, "thing", "Rebuilt")
        return dataclasses.replace(graph, entities=(*graph.entities, entity))

    engine.graph_for = graph_for  # type: ignore[method-assign]


async def leftovers(memory: MemoryManager) -> list[Any]:
    found = await rows(
        memory,
        "SELECT name FROM sqlite_master WHERE name LIKE 'rebuild_log%' "
        "UNION ALL SELECT key FROM meta WHERE key LIKE 'rebuild:%'",
    )
    return found + [p.name for p in shadow_of(memory).parent.glob("*.graph-rebuild*")]


async def test_interrupted_at_random_batches_it_ends_as_a_full_rebuild(
    open_memory: Opener,
) -> None:
    reference = await filled(open_memory, "reference@localhost")
    [full] = await reference.maintenance.rebuild("graph", batch=BATCH)
    assert (full.processed, full.resumed) == (COUNT, False)
    expected = await graph_rows(reference)
    draw = random.Random(11)
    for trial in range(3):
        memory = await filled(open_memory, f"interrupted{trial}@localhost")
        before = await graph_rows(memory)
        stops = sorted(draw.sample(range(1, COUNT // BATCH), 2))
        for batches in stops:  # each run resumes the last and is cut short again
            with pytest.raises(Interrupted):
                await memory.maintenance.rebuild(
                    "graph", batch=BATCH, progress=stop_after(batches - stops[0] + 1)
                )
            assert shadow_of(memory).exists()
            assert await graph_rows(memory) == before  # the live graph is untouched
        [result] = await memory.maintenance.rebuild("graph", batch=BATCH)
        assert result.resumed and result.processed < COUNT, (stops, result)
        assert await graph_rows(memory) == expected
        assert await leftovers(memory) == []
        assert (await memory.check(deep=True)).clean


async def test_writes_during_the_rebuild_are_in_the_switched_graph(open_memory: Opener) -> None:
    memory = await filled(open_memory, "writer@localhost")
    marked(memory)
    added: list[int] = []

    async def write(done: int, total: int) -> None:
        if 0 < done < COUNT:  # between batches, behind the rebuild's cursor and ahead of it
            added.append((await memory.store(f"Grace visited Oslo on call {done}")).id)
            await memory.update(done, content=f"Heidi moved to Porto in week {done}")
            await memory.forget(COUNT - done)

    [result] = await memory.maintenance.rebuild("graph", batch=BATCH, progress=write)
    assert result.replayed >= len(added) > 2
    await memory.flush()
    graph = await graph_rows(memory)
    memory_ids = {m.id async for m in memory.base_store.iter_all()}
    # every memory, old or written meanwhile, has the rebuilt graph: the marker, its atoms
    marked_ids = {row[0] for row in graph["entry_nodes"] if row[1] == MARKER}
    assert marked_ids == memory_ids
    assert {row[0] for row in graph["atoms"]} == memory_ids
    for memory_id in (1, 2, added[-1]):
        text = (await memory.get(memory_id)).content
        assert any(row[0] == memory_id and row[2] == text for row in graph["atoms"])
    assert await leftovers(memory) == []
    report = await memory.check(deep=True)
    assert report.clean, report.to_dict()
    found = await memory.search("Heidi Porto", limit=3)
    assert found and found[0].memory.content.startswith("Heidi moved to Porto")


async def test_searches_during_the_rebuild_answer_from_the_old_graph(open_memory: Opener) -> None:
    memory = await filled(open_memory, "reader@localhost")
    before = await graph_rows(memory)
    queries = ("Alice Lisbon", "Carol Madrid project 2", "Who met Bob in Berlin?")
    answers = [[r.memory.id for r in await memory.search(q, limit=5)] for q in queries]
    marked(memory)
    seen: list[tuple[bool, bool]] = []  # (graph tables as before, same answers), per call

    async def look(done: int, total: int) -> None:
        found = [[r.memory.id for r in await memory.search(q, limit=5)] for q in queries]
        seen.append((await graph_rows(memory) == before, found == answers))

    await memory.maintenance.rebuild("graph", batch=BATCH, progress=look)
    # every call before the switch saw the old graph; the last one, after it, the new one
    assert len(seen) > COUNT // BATCH
    assert seen[:-1] == [(True, True)] * (len(seen) - 1) and not seen[-1][0]
    after = await rows(
        memory,
        "SELECT count(*) FROM graph_entry_nodes AS e JOIN graph_nodes "
        f"AS n ON n.id = e.node_id WHERE n.key = '{MARKER}'",
    )
    assert after == [(COUNT,)]  # switched: every entry names the marker now


async def test_a_rebuild_cut_by_a_close_resumes_when_the_memory_opens(open_memory: Opener) -> None:
    memory = await filled(open_memory, "alice@localhost")
    with pytest.raises(Interrupted):
        await memory.maintenance.rebuild("graph", batch=BATCH, progress=stop_after(3))
    shadow = shadow_of(memory)
    await memory.aclose()
    assert shadow.exists()
    memory = await open_memory(maintenance=MaintenanceConfig(check_on_open=True))
    stored = await memory.store("Ivan met Judy in Lisbon on the last day")
    status = await memory.maintenance.wait()
    assert status.state == "done" and status.report is not None, status
    assert not shadow.exists() and await leftovers(memory) == []
    graph = await graph_rows(memory)
    assert any(row[0] == stored.id for row in graph["atoms"])
    [full] = await memory.maintenance.rebuild("graph", batch=BATCH)
    assert not full.resumed and await graph_rows(memory) == graph  # as a full rebuild makes
    assert (await memory.check(deep=True)).clean


async def test_a_shadow_that_fails_verification_is_dropped(open_memory: Opener) -> None:
    memory = await filled(open_memory, "verify@localhost")
    before = await graph_rows(memory)
    with pytest.raises(Interrupted):
        await memory.maintenance.rebuild("graph", batch=BATCH, progress=stop_after(2))
    shadow = sqlite3.connect(shadow_of(memory))
    try:
        shadow.execute("DELETE FROM memory_atoms WHERE memory_id = 1")
        shadow.commit()
    finally:
        shadow.close()
    with pytest.raises(StorageError, match="did not match its memories"):
        await memory.maintenance.rebuild("graph", batch=BATCH)
    assert await graph_rows(memory) == before
    assert await leftovers(memory) == []
    [result] = await memory.maintenance.rebuild("graph", batch=BATCH)
    assert not result.resumed and await graph_rows(memory) == before


async def test_a_second_rebuild_of_the_same_memory_waits_its_turn(open_memory: Opener) -> None:
    first = await filled(open_memory, "twice@localhost")
    second = await open_memory("twice@localhost")  # the same memory, opened again
    refused: list[str] = []

    async def meanwhile(done: int, total: int) -> None:
        if done and not refused:
            with pytest.raises(StorageError, match="being rebuilt by another") as caught:
                await second.maintenance.rebuild("graph", batch=BATCH)
            refused.append(str(caught.value))

    [result] = await first.maintenance.rebuild("graph", batch=BATCH, progress=meanwhile)
    assert refused and result.processed == COUNT
    assert await leftovers(first) == []
    [again] = await second.maintenance.rebuild("graph", batch=BATCH)
    assert not again.resumed and again.processed == COUNT


async def test_forgotten_atoms_and_entry_vectors_survive_the_switch(open_memory: Opener) -> None:
    memory = await filled(open_memory, "keeper@localhost")
    [(atom_id,)] = await rows(memory, "SELECT id FROM memory_atoms WHERE memory_id = 3")
    await memory.forget_atom(atom_id)
    vectors = await rows(memory, "SELECT memory_id, vector FROM graph_embeddings ORDER BY 1")
    assert len(vectors) == COUNT
    await memory.maintenance.rebuild("graph", batch=BATCH)
    statuses = await rows(memory, "SELECT memory_id, status FROM memory_atoms ORDER BY 1")
    assert [s for m, s in statuses if m == 3] == ["forgotten"]
    assert {s for m, s in statuses if m != 3} == {"active"}
    # the summaries did not change: their vectors are kept, none waits to be embedded again
    assert (
        await rows(memory, "SELECT memory_id, vector FROM graph_embeddings ORDER BY 1") == vectors
    )


async def test_atoms_extracted_anew_keep_the_lives_of_the_atoms_they_replace(
    open_memory: Opener, clock: Clock
) -> None:
    memory = await open_memory("lives@localhost")
    stored = await memory.store("We went to the zoo yesterday with Alice.")
    await memory.flush()
    (before,) = await memory.atoms(stored.id)
    engine = memory.engine
    extract = engine.graph_for

    def reworded(item: Memory, given: Any = None) -> MemoryGraph:
        graph = extract(item, given)  # the same atom, cut otherwise (a new version)
        atoms = tuple(dataclasses.replace(a, text=a.text + " (again)") for a in graph.atoms)
        return dataclasses.replace(graph, atoms=atoms)

    engine.graph_for = reworded  # type: ignore[method-assign]
    clock.advance(2)
    await memory.update(stored.id, importance=0.9)  # moves updated_at, tells nothing
    await memory.rebuild_graph()
    (after,) = await memory.atoms(stored.id)
    assert after.text.endswith("(again)")
    assert (after.created_at, after.reinforced_at) == (before.created_at, before.reinforced_at)
