"""The consistency check while the agent keeps writing: no false problem, no repair undone.

The interleavings are driven, not hoped for: a write is frozen after each of its
statements (inside its transaction, where the check's unlocked reads see it half
done), and the checker's ``pause`` hook runs stores, forgets and updates exactly
between a check's reads and its confirmation, and between a check and its repair.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from maint_support import FACTS, Opener, fill

from spade_memory.maintenance.consistency import ConsistencyChecker
from spade_memory.maintenance.report import ConsistencyReport
from spade_memory.manager import MemoryManager

LIMIT = 30.0  # seconds; a safety net against a deadlock, never reached when all is well
ROUTINE = {"vectors_missing"}  # a memory stored meanwhile waits for the embedder


class Freezer:
    """Freezes one task's write after its ``after``-th SQL statement until released."""

    def __init__(self, memory: MemoryManager) -> None:
        self._db: Any = memory.base_store._db
        self.task: asyncio.Task[Any] | None = None
        self.after = 0
        self.seen = 0
        self.frozen = asyncio.Event()
        self.release = asyncio.Event()
        for name in ("execute", "execute_fetchall", "executemany"):
            setattr(self._db, name, self._wrap(getattr(self._db, name)))

    def _wrap(self, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            result = await method(*args, **kwargs)
            if self.task is not None and asyncio.current_task() is self.task:
                self.seen += 1
                if self.seen == self.after:
                    self.frozen.set()
                    await self.release.wait()
            return result

        return wrapped

    def start(self, write: Awaitable[Any], after: int) -> asyncio.Task[Any]:
        self.after, self.seen = after, 0
        self.frozen, self.release = asyncio.Event(), asyncio.Event()
        self.task = asyncio.ensure_future(write)
        return self.task


def false_problems(report: ConsistencyReport, written: set[int]) -> dict[str, int]:
    """Problems that are not the embedder catching up with a memory written meanwhile."""
    found = {k: n for k, n in report.found.items() if k not in ROUTINE}
    if not set(report.samples.get("vectors_missing", [])) <= written:
        found["vectors_missing"] = report.found["vectors_missing"]
    return found


async def test_a_write_half_done_is_never_reported_as_a_problem(open_memory: Opener) -> None:
    memory = await open_memory()
    ids = await fill(memory)
    freezer = Freezer(memory)
    confirmed = 0  # checks whose unlocked read saw a write half done

    async def resume(point: str) -> None:
        nonlocal confirmed
        if point == "read" and not freezer.release.is_set():
            confirmed += 1
            freezer.release.set()  # the confirmation under the write lock waits for it

    writes: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("rewrite", lambda: rewrite_keyword_row(memory, ids[0])),
        ("store", lambda: memory.store("Grace keeps bees behind the Oslo office")),
        ("update", lambda: memory.update(ids[1], content="The Lisbon office opens in May")),
        ("forget", lambda: memory.forget(ids.pop())),
    ]
    written = {ids[1]}  # updated: its new content waits for the embedder
    for kind, write in writes:
        after = 1
        while True:
            task = freezer.start(write(), after)
            frozen = asyncio.ensure_future(freezer.frozen.wait())
            done, _ = await asyncio.wait([task, frozen], return_when=asyncio.FIRST_COMPLETED)
            frozen.cancel()
            if task in done:  # the write has fewer statements: every point was tried
                if kind == "store":  # kept: its vector may still be on its way
                    written.add(task.result().id)
                break
            checker = ConsistencyChecker(memory.engine, pause=resume)
            report = await asyncio.wait_for(checker.run(repair=True, deep=True), LIMIT)
            freezer.release.set()
            result = await asyncio.wait_for(task, LIMIT)
            if kind == "store":
                written.add(result.id)
                await memory.forget(result.id)  # the next try stores it afresh
            elif kind == "forget":
                ids.append(await fill_one(memory))  # something to forget next time
                written.add(ids[-1])  # it waits for the embedder too
            assert false_problems(report, written) == {}, (kind, after, report.to_dict())
            after += 1
    assert confirmed > 0  # the unlocked reads did see writes half done
    await memory.flush()
    assert (await memory.check(deep=True)).clean


async def rewrite_keyword_row(memory: MemoryManager, memory_id: int) -> None:
    """A write in several statements: the keyword row is deleted, then written again."""
    async with memory.base_store.transaction() as db:
        rows = await db.execute_fetchall(
            "SELECT content_tokens, context_tokens FROM memories_fts WHERE rowid = ?", (memory_id,)
        )
        tokens = tuple(next(iter(rows)))
        await db.execute("DELETE FROM memories_fts WHERE rowid = ?", (memory_id,))
        await db.execute(
            "INSERT INTO memories_fts (rowid, content_tokens, context_tokens) VALUES (?, ?, ?)",
            (memory_id, *tokens),
        )


async def fill_one(memory: MemoryManager) -> int:
    return (await memory.store("Heidi repairs clocks on Tuesdays")).id


async def snapshot(memory: MemoryManager, ids: list[int]) -> dict[str, list[tuple[Any, ...]]]:
    """What the repair must leave alone: atoms (with their ids), keyword rows, vector seqs."""
    marks = ",".join("?" * len(ids))
    fetch = memory.base_store.fetchall
    return {
        "atoms": [
            tuple(r)
            for r in await fetch(
                "SELECT id, memory_id, text, status FROM memory_atoms "
                f"WHERE memory_id IN ({marks}) ORDER BY id",
                ids,
            )
        ],
        "fts": [
            tuple(r)
            for r in await fetch(
                f"SELECT rowid, content_tokens FROM memories_fts WHERE rowid IN ({marks}) "
                "ORDER BY rowid",
                ids,
            )
        ],
        "vectors": [
            tuple(r)
            for r in await fetch(
                f"SELECT memory_id, seq FROM embeddings WHERE memory_id IN ({marks}) "
                "ORDER BY memory_id",
                ids,
            )
        ],
    }


async def test_writes_between_check_and_repair_are_never_repaired_away(
    open_memory: Opener,
) -> None:
    memory = await open_memory()
    ids = await fill(memory, FACTS * 3, dedupe=False)
    damaged_fts, damaged_vector, damaged_graph = ids[0], ids[1], ids[2]
    async with memory.base_store.transaction() as db:
        await db.execute("DELETE FROM memories_fts WHERE rowid = ?", (damaged_fts,))
        await db.execute(
            "UPDATE embeddings SET vector = x'00112233' WHERE memory_id = ?", (damaged_vector,)
        )
        await db.execute("DELETE FROM memory_atoms WHERE memory_id = ?", (damaged_graph,))
    # Stores and forgets land at every point; the damaged memories are mended by
    # their own writes between the check and the repair.
    spare = ids[3:]
    forgotten: list[int] = []
    stored: list[int] = []
    untouched = spare[len(spare) // 2 :]
    before = await snapshot(memory, untouched)
    after_write: dict[str, Any] = {}
    points: list[str] = []

    async def churn(point: str) -> None:
        points.append(point)
        for n in range(3):
            stored.append((await memory.store(f"Churn note {len(stored)} {n} about kestrels")).id)
        victim = spare[len(forgotten)]
        await memory.forget(victim)
        forgotten.append(victim)
        if point == "repair fts":
            await memory.update(damaged_fts, content="Alice now prefers mint tea")
        elif point == "repair vectors":
            await memory.update(damaged_vector, content="The Lisbon office moved to Porto")
            await memory.flush()  # a sound vector, embedded and indexed, before the repair
            after_write["vector"] = await snapshot(memory, [damaged_vector])
        elif point == "repair graph":
            await memory.update(damaged_graph, content="Bob's birthday is on 14 August")
            after_write["graph"] = await snapshot(memory, [damaged_graph])

    checker = ConsistencyChecker(memory.engine, pause=churn)
    report = await asyncio.wait_for(checker.run(repair=True, deep=True), LIMIT)
    assert {"repair fts", "repair vectors", "repair graph"} <= set(points), points
    assert {"fts_missing", "vectors_malformed", "graph_missing"} <= set(report.found)
    assert report.remaining == 0, report.to_dict()
    # The repair changed nothing its writes had made right, nor anything untouched.
    assert (await snapshot(memory, [damaged_vector]))["vectors"] == after_write["vector"]["vectors"]
    graph_now = await snapshot(memory, [damaged_graph])
    assert (graph_now["atoms"], graph_now["fts"]) == (
        after_write["graph"]["atoms"],
        after_write["graph"]["fts"],
    )
    assert memory.indexer is not None and damaged_vector in set(memory.indexer.index.ids())
    assert await snapshot(memory, untouched) == before
    await memory.flush()
    assert (await memory.check(deep=True)).clean
    assert len(stored) == 3 * len(points) and set(forgotten) <= set(spare)
    assert (await memory.search("mint tea"))[0].memory.id == damaged_fts
    assert (await memory.search("Porto"))[0].memory.id == damaged_vector
    assert (await memory.search("14 August"))[0].memory.id == damaged_graph
