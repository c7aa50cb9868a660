"""Each search gets its own timings; the old shared attribute still works, deprecated."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig


def _config() -> MemoryConfig:
    retrieval = RetrievalConfig(cache_ttl_seconds=0.0, graph_route=False)
    return MemoryConfig(in_memory=True, embedder=None, retrieval=retrieval)


async def test_two_concurrent_searches_each_get_their_own_timings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with await MemoryManager.open("timed@localhost", _config()) as memory:
        await memory.store("the slow heron waits by the river")
        await memory.store("the quick swift crosses the sky")
        base = memory.engine.base
        keyword_search = base.keyword_search
        fast_done = asyncio.Event()

        async def paced(terms: Sequence[str], **kwargs: Any) -> list[tuple[int, float]]:
            if "heron" in terms:  # the slow search finishes after the fast one
                await fast_done.wait()
                await asyncio.sleep(0.2)
            return await keyword_search(terms, **kwargs)

        monkeypatch.setattr(base, "keyword_search", paced)

        async def fast() -> Any:
            try:
                return await memory.search_with_timings("swift", limit=1)
            finally:
                fast_done.set()

        (slow_results, slow), (fast_results, quick) = await asyncio.gather(
            memory.search_with_timings("heron", limit=1), fast()
        )
        assert slow_results[0].memory.content.startswith("the slow heron")
        assert fast_results[0].memory.content.startswith("the quick swift")
        assert slow is not quick
        assert slow.keyword >= 0.2 and slow.total >= slow.keyword
        assert quick.keyword < 0.2 and quick.total < slow.total
        with pytest.warns(DeprecationWarning, match="search_with_timings"):
            last = memory.last_search_timings
        assert last is slow  # the search that finished last


async def test_a_cached_search_reports_cached_timings_of_its_own() -> None:
    retrieval = RetrievalConfig(cache_ttl_seconds=60.0, graph_route=False)
    config = MemoryConfig(in_memory=True, embedder=None, retrieval=retrieval)
    async with await MemoryManager.open("cached@localhost", config) as memory:
        await memory.store("otters hold hands while they sleep")
        first_results, first = await memory.search_with_timings("otters")
        second_results, second = await memory.search_with_timings("otters")
        assert [(r.memory.id, r.score) for r in first_results] == [
            (r.memory.id, r.score) for r in second_results
        ]
        assert second_results[0].memory.access_count == 1  # the first search, counted at once
        assert (first.cached, second.cached) == (False, True)
        assert "mmr" in first.extra and "rerank" in first.extra


async def test_recall_reports_the_timings_of_its_search() -> None:
    retrieval = RetrievalConfig(cache_ttl_seconds=0.0, graph_route=False)
    config = MemoryConfig(in_memory=True, embedder="hashing", retrieval=retrieval)
    async with await MemoryManager.open("recalled@localhost", config) as memory:
        await memory.store("Marta repairs bicycles on Saturdays")
        await memory.flush()
        plain = await memory.recall("who repairs bicycles")
        results, timings = await memory.recall_with_timings("who repairs bicycles")
        assert [(r.memory.id, r.memory.content) for r in results] == [
            (r.memory.id, r.memory.content) for r in plain
        ]
        assert results and not timings.cached
        assert 0.0 < timings.embed <= timings.total  # the query was embedded, and timed
