"""The write-ahead log stays within the checkpoint policy of ``StorageConfig``.

Left to SQLite's defaults, the log grows by some 80 KiB per stored memory of 850
characters up to 4 MiB, and keeps that size; a large transaction leaves it as large
as the transaction for good.
"""

from __future__ import annotations

import random
from pathlib import Path

from spade_memory.config import MemoryConfig, StorageConfig
from spade_memory.manager import MemoryManager

AGENT = "wal@localhost"
WORDS = ("amber", "river", "falcon", "orchard", "lantern", "copper", "meadow", "harbor")


def text(rng: random.Random, seq: int) -> str:
    return (" ".join(rng.choice(WORDS) for _ in range(140)))[:840] + f" n{seq}"


def wal_size(root: Path) -> int:
    return sum(path.stat().st_size for path in root.glob("*-wal"))


async def test_single_stores_keep_the_log_within_the_checkpoint_policy(tmp_path: Path) -> None:
    storage = StorageConfig()
    config = MemoryConfig(root=tmp_path, embedder="hashing", storage=storage)
    bound = max(storage.wal_checkpoint_pages * 4096, storage.wal_size_limit_bytes) * 3 // 2
    rng = random.Random(5)
    largest = 0
    async with await MemoryManager.open(AGENT, config) as memory:
        for seq in range(90):  # about 7 MiB of log frames
            await memory.store(text(rng, seq))
            largest = max(largest, wal_size(tmp_path))
        await memory.flush()
    assert 0 < largest <= bound, f"the log reached {largest} bytes (bound {bound})"


async def test_a_large_transaction_leaves_a_log_cut_back_to_the_limit(tmp_path: Path) -> None:
    storage = StorageConfig(wal_checkpoint_pages=64, wal_size_limit_bytes=256 * 1024)
    config = MemoryConfig(root=tmp_path, embedder=None, storage=storage)
    rng = random.Random(6)
    async with await MemoryManager.open(AGENT, config) as memory:
        await memory.store_many([{"content": text(rng, seq)} for seq in range(400)])
        grown = wal_size(tmp_path)
        for seq in range(400, 420):  # later commits checkpoint and restart the log
            await memory.store(text(rng, seq))
        after = wal_size(tmp_path)
    assert grown > 2 * storage.wal_size_limit_bytes
    assert after <= storage.wal_size_limit_bytes + 64 * 4096 * 2, after
