"""StorageConfig.vector_index: the FAISS index kind is chosen by config, kept across reopen."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from factories import fill, hashing_config

from spade_memory.config import StorageConfig
from spade_memory.errors import ConfigError
from spade_memory.manager import MemoryManager

JID = "kind@localhost"
LINES = [f"note {i}: the {word} is on shelf {i}" for i, word in enumerate("abcdefghijkl")]


async def kind_after_open(root: Path, **storage: object) -> tuple[str, int]:
    async with await MemoryManager.open(JID, hashing_config(root, **storage)) as manager:
        await manager.flush()
        assert manager.indexer is not None
        return manager.indexer.index.kind, manager.indexer.index.ntotal


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
async def test_configured_kind_is_built_and_searched(memory_root: Path, kind: str) -> None:
    config = hashing_config(memory_root, vector_index=kind)
    async with await MemoryManager.open(JID, config) as manager:
        await fill(manager, LINES)
        await manager.flush()
        assert manager.indexer is not None and manager.indexer.index.kind == kind
        results = await manager.search("shelf 3 the d", limit=3)
        assert results and results[0].memory.content == LINES[3]


async def test_switching_kind_rebuilds_from_sqlite(memory_root: Path) -> None:
    async with await MemoryManager.open(JID, hashing_config(memory_root)) as manager:
        await fill(manager, LINES)
        await manager.flush()
    assert await kind_after_open(memory_root, vector_index="hnsw") == ("hnsw", len(LINES))
    assert await kind_after_open(memory_root, vector_index="flat") == ("flat", len(LINES))


async def test_auto_picks_hnsw_above_the_threshold(memory_root: Path) -> None:
    async with await MemoryManager.open(JID, hashing_config(memory_root)) as manager:
        await fill(manager, LINES)
        await manager.flush()
    above = await kind_after_open(memory_root, vector_index="auto", hnsw_threshold=5)
    below = await kind_after_open(memory_root, vector_index="auto", hnsw_threshold=100)
    assert above == ("hnsw", len(LINES))
    assert below == ("flat", len(LINES))


def test_default_is_flat_and_bad_values_are_refused() -> None:
    assert StorageConfig().vector_index == "flat"
    with pytest.raises(ConfigError, match="vector_index"):
        StorageConfig(vector_index="ivf")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="hnsw_threshold"):
        dataclasses.replace(StorageConfig(), hnsw_threshold=0)
    with pytest.raises(ConfigError, match="hnsw_ef_search"):
        StorageConfig(hnsw_ef_search=0)


async def test_hnsw_search_breadth_comes_from_the_config(memory_root: Path) -> None:
    storage = {"vector_index": "hnsw", "hnsw_ef_search": 77}
    async with await MemoryManager.open(JID, hashing_config(memory_root, **storage)) as manager:
        await fill(manager, LINES)
        await manager.flush()
        assert manager.indexer is not None
        assert manager.indexer.index._ef_search == 77
    async with await MemoryManager.open(JID, hashing_config(memory_root, **storage)) as manager:
        assert manager.indexer is not None  # loaded from the snapshot written at close
        assert manager.indexer.index._ef_search == 77


async def test_an_index_rebuilt_from_sqlite_is_snapshotted_for_the_next_open(
    memory_root: Path,
) -> None:
    async with await MemoryManager.open(JID, hashing_config(memory_root)) as manager:
        await fill(manager, LINES)
        await manager.flush()
    (snapshot,) = memory_root.glob("*.faiss")
    snapshot.unlink()
    assert await kind_after_open(memory_root) == ("flat", len(LINES))  # rebuilt, no writes
    assert snapshot.exists()
