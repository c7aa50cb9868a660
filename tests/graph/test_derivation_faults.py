"""Background derivation when extraction fails, when its worker dies, and what wakes it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from spade_memory.config import MemoryConfig, RetrievalConfig, StorageConfig
from spade_memory.engine import derivation
from spade_memory.engine.derivation import Deriver
from spade_memory.engine.memory_input import MemoryInput
from spade_memory.errors import StorageCorrupted, StorageError
from spade_memory.manager import MemoryManager
from spade_memory.models import Memory

_REAL_GRAPH_OF = MemoryInput.graph_of


def _config(root: Path | None = None) -> MemoryConfig:
    retrieval = RetrievalConfig(cache_ttl_seconds=0)
    if root is None:
        return MemoryConfig(in_memory=True, embedder=None, retrieval=retrieval)
    return MemoryConfig(root=root, embedder="hashing", retrieval=retrieval)


@pytest.fixture
async def memory() -> AsyncIterator[MemoryManager]:
    async with await MemoryManager.open("faults@localhost", _config()) as opened:
        await opened.maintenance.wait()
        yield opened


class _Fault:
    """Makes extraction fail on the texts naming ``word`` while ``broken``."""

    def __init__(self, word: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.broken = True
        self.calls = 0
        fault = self

        def graph_of(
            self: MemoryInput, new: Any, entities: Any = None, relations: Any = None
        ) -> Any:
            if word in new.content:
                fault.calls += 1
                if fault.broken:
                    raise RuntimeError("the extractor tripped")
            return _REAL_GRAPH_OF(self, new, entities, relations)

        monkeypatch.setattr(MemoryInput, "graph_of", graph_of)


async def _pending(memory: MemoryManager) -> int:
    return await memory._engine.base.count_pending_derivations()


async def _atoms(memory: MemoryManager, stored: Memory) -> list[str]:
    return [a.text for a in await memory.atoms(stored.id)]


async def _until(condition: Any, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if await condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the condition was not met in time")


def test_derivation_is_in_the_background_by_default() -> None:
    assert StorageConfig().derive_in_background


async def test_a_failed_extraction_keeps_its_mark_and_heals(
    memory: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(derivation, "RETRY_FIRST_SECONDS", 0.05)
    fault = _Fault("Ghent", monkeypatch)
    bad = await memory.store("Ivo lives in Ghent.")
    good = await memory.store("Jan lives in Bruges.")
    await memory.flush()
    assert await _atoms(memory, good) == [good.content]
    assert await _atoms(memory, bad) == []
    assert await _pending(memory) == 1  # its mark is kept, not cleared with no graph
    assert memory._engine.deriver.failing == 1
    fault.broken = False  # the fault passes: the memory is derived by itself

    async def healed() -> bool:
        return await _pending(memory) == 0

    await _until(healed)
    assert await _atoms(memory, bad) == [bad.content]
    assert memory._engine.deriver.failing == 0


async def test_a_memory_failing_every_time_blocks_no_other(
    memory: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(derivation, "RETRY_FIRST_SECONDS", 0.02)
    monkeypatch.setattr(derivation, "RETRY_MAX_SECONDS", 0.08)
    fault = _Fault("Ghent", monkeypatch)
    bad = await memory.store("Ivo lives in Ghent.")
    for n in range(3):
        others = await memory.store_many(
            [{"content": f"Kees number {n}-{k} lives in Delft."} for k in range(5)]
        )
        await asyncio.wait_for(memory.flush(), 10)
        for other in others:
            assert await _atoms(memory, other) == [other.content]
        await asyncio.sleep(0.1)
    assert await _pending(memory) == 1
    assert fault.calls >= 3  # tried again, with a growing wait, for as long as it fails
    assert (await memory.stats()).pending_derivations == 1
    recalled = await memory.recall_memory(bad.id)  # recalled whole meanwhile
    assert recalled is not None and recalled.content == bad.content


async def test_a_failed_memory_is_tried_again_on_the_next_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = _Fault("Ghent", monkeypatch)
    async with await MemoryManager.open("faults@localhost", _config(tmp_path)) as memory:
        bad = await memory.store("Ivo lives in Ghent.")
        await memory.flush()
        assert await _pending(memory) == 1
    fault.broken = False
    async with await MemoryManager.open("faults@localhost", _config(tmp_path)) as memory:
        await memory.flush()
        assert await _pending(memory) == 0
        assert await _atoms(memory, bad) == [bad.content]


async def test_flush_raises_when_the_derivation_worker_dies(
    memory: MemoryManager, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(self: Deriver) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("a bug in the pipeline")

    monkeypatch.setattr(Deriver, "_derive_pending", broken)
    await memory.store("Kim lives in Seoul.")
    with caplog.at_level(logging.ERROR), pytest.raises(StorageError, match="derivation"):
        await asyncio.wait_for(memory.flush(), 5)
    assert "stopped on an unexpected error" in caplog.text
    assert isinstance(memory._engine.deriver.stopped_by, RuntimeError)
    with pytest.raises(StorageError, match="a bug in the pipeline"):
        await asyncio.wait_for(memory.flush(), 1)  # at once, every time


async def test_a_flush_waiting_is_told_when_the_database_is_found_damaged(
    memory: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker ends quietly on a damaged database; a flush waiting for it (and any
    later one) raises the damage instead of waiting until the memory is closed."""
    started = asyncio.Event()

    async def damaged(self: Deriver) -> None:
        started.set()
        await asyncio.sleep(0.1)
        raise StorageCorrupted("the database is damaged", path=Path("memory.db"))

    monkeypatch.setattr(Deriver, "_derive_pending", damaged)
    await memory.store("Kim lives in Seoul.")
    waiting = asyncio.create_task(memory.flush())
    await asyncio.wait_for(started.wait(), 5)
    with pytest.raises(StorageCorrupted, match="damaged"):
        await asyncio.wait_for(waiting, 5)
    with pytest.raises(StorageCorrupted):
        await asyncio.wait_for(memory._engine.deriver.flush(), 1)  # at once


async def test_closing_during_a_failing_write_is_not_taken_for_a_retry(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Closed while one batch is extracted and the one before fails to be written:
    the close is not delayed by a retry, and no retry is announced."""
    extracting = asyncio.Event()
    real_items = Deriver._items

    async def failing_write(self: Deriver, batch: Any, items: Any) -> None:
        await asyncio.sleep(0.2)
        raise StorageError("the disk is full")

    async def slow_items(self: Deriver, batch: Any) -> Any:
        if batch[0].memory.id > 1 and not extracting.is_set():
            extracting.set()  # the second batch: the first one is being written
            await asyncio.sleep(5)
        return await real_items(self, batch)

    monkeypatch.setattr(Deriver, "_write", failing_write)
    monkeypatch.setattr(Deriver, "_items", slow_items)
    # the extraction outlasts what closing gives the pipeline to finish
    monkeypatch.setattr(derivation, "CLOSE_DERIVE_SECONDS", 0.1)
    settings = StorageConfig(derive_in_background=True, derive_batch_size=1)
    config = MemoryConfig(in_memory=True, embedder=None, storage=settings)
    memory = await MemoryManager.open("faults@localhost", config)
    await memory.maintenance.wait()
    await memory.store_many({"content": f"{name} lives in Seoul."} for name in ("Kim", "Lee"))
    memory._engine.deriver.notify()
    await asyncio.wait_for(extracting.wait(), 5)
    started = asyncio.get_running_loop().time()
    with caplog.at_level(logging.INFO):
        await memory._engine.deriver.aclose()
    assert asyncio.get_running_loop().time() - started < 0.9  # no retry wait (1 s)
    assert "will retry" not in caplog.text
    assert "derived on the next open" in caplog.text  # said, not swallowed
    await memory.aclose()


async def test_closing_finishes_derivation_but_gives_up_at_a_failed_write(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def failing_write(self: Deriver, batch: Any, items: Any) -> None:
        raise StorageError("the disk is full")

    settings = StorageConfig(derive_in_background=True)
    config = MemoryConfig(in_memory=True, embedder=None, storage=settings)
    memory = await MemoryManager.open("faults@localhost", config)
    await memory.maintenance.wait()
    monkeypatch.setattr(Deriver, "_write", failing_write)
    await memory.store("Kim lives in Seoul.")
    started = asyncio.get_running_loop().time()
    with caplog.at_level(logging.INFO):
        await memory.aclose()
    assert asyncio.get_running_loop().time() - started < 0.9  # no retry wait (1 s)
    assert "will retry" not in caplog.text
    assert "failed while closing (the disk is full)" in caplog.text


async def test_a_change_that_marks_nothing_does_not_wake_the_pipeline(
    memory: MemoryManager,
) -> None:
    deriver = memory._engine.deriver
    stored = await memory.store("Lea lives in Graz.")
    assert deriver.maybe_pending
    await memory.flush()
    assert not deriver.maybe_pending
    await memory.update(stored.id, importance=0.9)
    other = await memory.store("Max lives in Linz.", entities=["Linz"])
    await memory.flush()
    await memory.forget(other.id)
    await memory.forget_atom((await memory.atoms(stored.id))[0].id)
    await memory.refresh_atoms()
    assert not deriver.maybe_pending  # no mark written: the pipeline sleeps on
    await memory.store_many([{"content": "Nina lives in Wels."}])
    assert deriver.maybe_pending


async def test_stats_count_the_pending_derivations(memory: MemoryManager) -> None:
    await memory._engine.deriver.aclose()  # stopped: the marks stay
    await memory.store_many([{"content": f"Olga number {n} lives in Brno."} for n in range(3)])
    stats = await memory.stats()
    assert stats.pending_derivations == 3
