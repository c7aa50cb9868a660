"""Two processes on one agent's memory: no stale vector survives a reopen.

One process keeps the agent's memory open while a second process (a real child)
updates, forgets and stores memories of the same agent; then the first writes
more and closes, and so its FAISS snapshot is the last one written. Opened again,
the memory's FAISS index holds exactly the stored vectors, each that of its
memory's current content: a forgotten memory's vector is gone and an updated
memory's vector is the new one, without a deep check or a repair.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from rel_support import crash_config, fork_run, memory_text

from spade_memory.manager import MemoryManager

JID = "shared@localhost"
FIRST = 30
UPDATED = 5
FORGOTTEN = 5


async def _other_process(spec: dict[str, Any]) -> None:
    """The second process: changes memories the first one stored and embedded."""
    config = crash_config(Path(spec["root"]))
    async with await MemoryManager.open(JID, config) as manager:
        for memory_id in spec["update"]:
            await manager.update(memory_id, content=memory_text(50_000 + memory_id))
        for memory_id in spec["forget"]:
            await manager.forget(memory_id)
        for seq in range(spec["start"], spec["start"] + 10):
            await manager.store(memory_text(seq))
        await manager.flush()  # its vectors are in SQLite, with sequence numbers


async def _in_child(spec: dict[str, Any]) -> None:
    pid = fork_run(_other_process, spec)
    _, status = await asyncio.to_thread(os.waitpid, pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the second process failed"


async def assert_no_stale_vector(manager: MemoryManager, forgotten: set[int]) -> None:
    indexer = manager.indexer
    assert indexer is not None
    stored = {memory.id: memory.content async for memory in manager.base_store.iter_all()}
    present = set(indexer.index.ids().tolist())
    assert not present & forgotten, f"vectors of forgotten memories: {present & forgotten}"
    assert present == set(stored)
    ids = sorted(stored)
    vectors = indexer.embedder.embed_documents([stored[i] for i in ids])
    stale = []
    for row, memory_id in enumerate(ids):
        found, scores = indexer.index.search(vectors[row], 1, allowed_ids=[memory_id])
        if found.tolist() != [memory_id] or abs(float(scores[0]) - 1.0) > 1e-4:
            stale.append(memory_id)
    assert not stale, f"stale vectors after reopening: {stale}"


@pytest.mark.parametrize("rounds", [1, pytest.param(2, marks=pytest.mark.slow)])
async def test_a_second_process_leaves_no_stale_vector(tmp_path: Path, rounds: int) -> None:
    root = tmp_path / "memory"
    config = crash_config(root)
    forgotten: set[int] = set()
    seq = 0
    for turn in range(rounds):
        manager = await MemoryManager.open(JID, config)
        try:
            mine = [(await manager.store(memory_text(seq + i))).id for i in range(FIRST)]
            seq += FIRST
            await manager.flush()  # embedded here, before the other process changes them
            spec = {
                "root": str(root),
                "update": mine[:UPDATED],
                "forget": mine[UPDATED : UPDATED + FORGOTTEN],
                "start": 100_000 * (turn + 1),
            }
            await _in_child(spec)
            forgotten.update(spec["forget"])
            for i in range(40):  # this process's vectors now follow the other's
                await manager.store(memory_text(seq + i))
            seq += 40
            await manager.flush()
        finally:
            await manager.aclose()  # its snapshot is the last one written
    async with await MemoryManager.open(JID, config) as manager:
        await manager.flush()
        await assert_no_stale_vector(manager, forgotten)
