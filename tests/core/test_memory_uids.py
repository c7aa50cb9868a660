"""A memory's uid is a version 7 UUID: unique, and later ones sort later."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from pathlib import Path

from factories import hashing_config

from spade_memory import MemoryManager
from spade_memory.engine.memory_input import time_ordered_uid

AGENT = "keeper@localhost"


def test_a_uid_is_a_version_7_uuid_holding_the_time_in_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    uid = time_ordered_uid()
    after = time.time_ns() // 1_000_000
    parsed = uuid.UUID(uid)
    assert len(uid) == 32 and parsed.hex == uid
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert before <= parsed.int >> 80 <= after


def test_uids_are_unique_within_one_millisecond() -> None:
    uids = [time_ordered_uid() for _ in range(20_000)]
    assert len(set(uids)) == len(uids)


async def test_memories_stored_later_have_uids_that_sort_later(tmp_path: Path) -> None:
    async with await MemoryManager.open(AGENT, hashing_config(tmp_path)) as memory:
        stored = []
        for number in range(5):
            stored.append(await memory.store(f"Note number {number} about the garden."))
            await asyncio.sleep(0.002)  # a new millisecond
        together = await memory.store_many(
            [{"content": f"Batch line {number} about the kitchen."} for number in range(10)]
        )
        database = memory.base_store.path
    uids = [m.uid for m in stored]
    assert uids == sorted(uids)
    assert all(m.uid > stored[-1].uid for m in together)
    assert database is not None
    with sqlite3.connect(database) as db:
        by_uid = [row[0] for row in db.execute("SELECT id FROM memories ORDER BY uid")]
    # the unique index on uid grows at its end: uid order is insertion order
    # across milliseconds (within one, the random part decides)
    first_five = [m.id for m in stored]
    assert by_uid[:5] == first_five
