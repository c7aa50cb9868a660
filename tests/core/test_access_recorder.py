"""The coalesced write of access counts when its writer is cancelled mid-write (a
close, or the end of the event loop, cancels it)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from factories import held

from spade_memory import MemoryConfig, MemoryManager
from spade_memory.storage import memory_writes


@pytest.mark.parametrize("where", ["commit", "work"])
async def test_accesses_cancelled_while_written_are_counted_once(
    file_config: MemoryConfig, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    async with await MemoryManager.open("a@localhost", file_config) as memory:
        stored = await memory.store("The parrot speaks three languages")
        await memory.flush()
        started, go_on = threading.Event(), threading.Event()
        touch_work = memory_writes.touch_work
        monkeypatch.setattr(
            memory_writes,
            "touch_work",
            lambda *a, **k: held(touch_work(*a, **k), where, started, go_on),
        )
        await memory.search("parrot languages", limit=1)
        access = memory.engine.access
        writing = asyncio.create_task(access.write())
        while not started.is_set():
            await asyncio.sleep(0.001)
        writing.cancel()  # as closing the memory cancels the coalescing timer
        await asyncio.gather(writing, return_exceptions=True)
        go_on.set()
        monkeypatch.setattr(memory_writes, "touch_work", touch_work)

        await access.write()  # what the close writes

        written = await memory.engine.base.get(stored.id)
        assert written is not None and written.access_count == 1
        assert (await memory.get(stored.id)).access_count == 1
