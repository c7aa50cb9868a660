"""Searches first: the derivation pipeline steps aside while a search of the process runs."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import pytest

import spade_memory.engine.derivation as derivation
from spade_memory.config import MemoryConfig, RetrievalConfig, StorageConfig
from spade_memory.in_flight import InFlight
from spade_memory.manager import MemoryManager
from spade_memory.retrieval.search_gate import search_gate


async def test_the_gate_counts_searches_and_waits_for_them() -> None:
    gate = InFlight()
    assert gate.count == 0
    assert await gate.wait_clear_async(0.0)  # none in flight: at once
    with gate.counting():
        assert gate.count == 1
        started = time.monotonic()
        assert not await gate.wait_clear_async(0.05)  # still searching when the wait ends
        assert time.monotonic() - started >= 0.05
    assert gate.count == 0

    async def search_for(seconds: float) -> None:
        with gate.counting():
            await asyncio.sleep(seconds)

    searching = asyncio.create_task(search_for(0.05))
    await asyncio.sleep(0)
    assert gate.count == 1
    assert await gate.wait_clear_async(5.0)  # returns when the search ends, not at the timeout
    assert searching.done()


async def test_a_failing_search_is_no_longer_counted() -> None:
    gate = InFlight()
    with pytest.raises(RuntimeError), gate.counting():
        raise RuntimeError("the search failed")
    assert gate.count == 0


def _config() -> MemoryConfig:
    return MemoryConfig(
        in_memory=True,
        embedder=None,
        storage=StorageConfig(derive_in_background=True),
        retrieval=RetrievalConfig(cache_ttl_seconds=0),
    )


@pytest.fixture
async def memory() -> AsyncIterator[MemoryManager]:
    async with await MemoryManager.open("gate@localhost", _config()) as opened:
        await opened.maintenance.wait()
        yield opened


async def _pending(memory: MemoryManager) -> int:
    return await memory._engine.base.count_pending_derivations()


async def test_derivation_waits_while_a_search_runs(
    memory: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(derivation, "DERIVATION_HOLD", 30.0)
    with search_gate().counting():  # a search of another memory of the process
        stored = await memory.store("Alice works at Acme in Berlin.")
        flushing = asyncio.create_task(memory.flush())
        await asyncio.sleep(0.5)
        assert await _pending(memory) == 1  # not extracted while the search runs
        assert not flushing.done()
    await asyncio.wait_for(flushing, 10)  # derived once it ended
    assert await _pending(memory) == 0
    assert [a.text for a in await memory.atoms(stored.id)] == ["Alice works at Acme in Berlin."]


async def test_derivation_advances_while_searches_never_pause(memory: MemoryManager) -> None:
    """Held at most DERIVATION_HOLD per memory: a search that never ends starves nothing."""
    with search_gate().counting():
        await memory.store_many({"content": f"Bob met Carol in town {n}."} for n in range(10))
        started = time.monotonic()
        await asyncio.wait_for(memory.flush(), 10)
        assert await _pending(memory) == 0
        assert time.monotonic() - started >= 10 * derivation.DERIVATION_HOLD * 0.9


async def test_recall_does_not_wait_behind_its_own_search(
    memory: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recall extracts the claims of memories not derived yet during its own search:
    that extraction never waits for the gate, or recall would wait for itself."""
    paris = await memory.store("Alice lives in Paris.")
    await memory.flush()
    await memory._engine.deriver.aclose()  # marks stay: recall reads the claim itself
    berlin = await memory.store("Alice lives in Berlin.")
    monkeypatch.setattr(derivation, "DERIVATION_HOLD", 30.0)
    with search_gate().counting():
        recalled = await asyncio.wait_for(memory.recall("where does Alice live"), 5)
    assert [r.memory.id for r in recalled] == [berlin.id]
    assert await memory.recall_memory(paris.id) is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_counts_nothing_of_its_parent() -> None:
    """A search (or query) counted in the parent when it forks never ends in the child:
    there, every count starts at zero, or the child's background work would wait on it."""
    gate = InFlight()
    with gate.counting(), search_gate().counting():
        pid = os.fork()
        if pid == 0:  # the child: 0 when nothing is counted there
            os._exit(0 if gate.count == 0 and search_gate().count == 0 else 1)
        _, status = os.waitpid(pid, 0)
        assert gate.count == 1  # the parent's own count is kept
    assert os.waitstatus_to_exitcode(status) == 0
