"""A memory open in two processes: the vectors one writes are searched by the other."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from factories import hashing_config

from spade_memory import MemoryManager, RetrievalConfig


async def test_a_search_finds_by_meaning_what_another_process_embedded(tmp_path: Path) -> None:
    config = dataclasses.replace(
        hashing_config(tmp_path), retrieval=RetrievalConfig(cache_ttl_seconds=0)
    )
    async with await MemoryManager.open("keeper@localhost", config) as looking:
        await looking.store("Alice keeps bees in her garden")
        await looking.flush()
        await looking.search("lighthouse keeper", limit=5)  # its index is loaded and used
        # another process (here another open of the same memory) stores and embeds
        async with await MemoryManager.open("keeper@localhost", config) as writing:
            told = await writing.store("The Zanzibar lighthouse keeper is named Omar")
            await writing.flush()
        found = await looking.search("lighthouse keeper named", limit=5, explain=True)
        hit = next(r for r in found if r.memory.id == told.id)
        assert hit.explanation is not None and "vector" in hit.explanation.routes
