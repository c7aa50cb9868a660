"""The coalesced write of access counts when its writer is cancelled mid-write."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

from spade_memory.engine.access_counts import AccessRecorder
from spade_memory.storage.base import BaseMemoryStore


class SlowCommit:
    """A store whose access write goes on to commit when its caller stops waiting,
    as a COMMIT already running on a connection's thread does."""

    closed = False

    def __init__(self) -> None:
        self.committed: list[tuple[list[int], int]] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def touch(
        self, memory_ids: Iterable[int], when: float, *, searches: int = 0, **_: Any
    ) -> None:
        ids = list(memory_ids)

        async def commit() -> None:
            self.started.set()
            await self.release.wait()
            self.committed.append((ids, searches))

        await asyncio.shield(asyncio.ensure_future(commit()))


def recorder(store: SlowCommit) -> AccessRecorder:
    return AccessRecorder(
        cast(BaseMemoryStore, store), jid="a@x", clock=lambda: 1.0, closed=lambda: False
    )


async def test_a_write_cancelled_while_it_commits_is_not_written_again() -> None:
    store = SlowCommit()
    access = recorder(store)
    access.note([1, 2], search=True)
    writing = asyncio.create_task(access.write())
    await store.started.wait()
    writing.cancel()  # as closing the memory cancels the coalescing timer
    await asyncio.gather(writing, return_exceptions=True)
    assert access.pending() == {1: 1, 2: 1}  # still counted while the write is open
    store.release.set()

    await access.aclose()  # writes what is still pending

    assert store.committed == [([1, 2], 1)]
    assert access.pending() == {}

