"""What the damage checks of an open cost: row checksums and the write-ahead log scan.

    python -m benchmarks.perf_integrity                 # 10,000 memories
    python -m benchmarks.perf_integrity --sizes 1000,10000,100000

For each size, a fresh database of generated memories (written in batches of
500, with their keyword rows, no graph and no vectors) is opened again and again
(best of ``--repeat``), each time in a fresh store:

- *open, all rows verified*: every memory's checksum is compared with its row
  (what an open does while fewer than ``verify_all_checksums_below`` memories
  are stored);
- *open, rows since the last verified open*: ``verify_all_checksums_below=1``,
  so only what was written since the previous open is compared (none here);
- *full comparison alone*: :meth:`BaseMemoryStore.checksum_mismatches` (what a
  deep check adds).

Then the cost of the checksums on a store, before against after in one run: two
fresh databases, one whose checksum triggers are dropped (the write as it was
before them), written in turns, one memory each, ``--stores`` times per
``synchronous`` mode; p50 of each and the median of the paired ratios.

Then the write-ahead log scan (:func:`spade_memory.storage.wal_frames.dropped_commits`)
on a log of ``--wal-frames`` frames of 4 KiB, the most an automatic checkpoint
lets a log hold by default.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from spade_memory.config import StorageConfig
from spade_memory.storage.base import BaseMemoryStore, IndexedText, NewMemory
from spade_memory.storage.wal_frames import dropped_commits

from .metrics import markdown_table
from .perf_common import TextGenerator

AGENT = "bench@localhost"


async def fill(path: Path, count: int) -> None:
    texts = TextGenerator().texts(count)
    store = await BaseMemoryStore.open(path, agent=AGENT, storage=StorageConfig())
    try:
        for start in range(0, count, 500):
            items = [
                (
                    NewMemory(
                        uid=uuid.uuid4().hex,
                        category="fact",
                        content=text,
                        context=None,
                        confidence=1.0,
                        importance=0.5,
                        created_at=1.0,
                    ),
                    IndexedText.of(text, None),
                )
                for text in texts[start : start + 500]
            ]
            await store.insert_many(items)
    finally:
        await store.aclose()


async def open_seconds(path: Path, storage: StorageConfig) -> float:
    started = time.perf_counter()
    store = await BaseMemoryStore.open(path, agent=AGENT, storage=storage, expect_existing=True)
    elapsed = time.perf_counter() - started
    await store.aclose()
    return elapsed


async def compare_seconds(path: Path) -> float:
    store = await BaseMemoryStore.open(path, agent=AGENT, storage=StorageConfig())
    try:
        started = time.perf_counter()
        found = await store.checksum_mismatches()
        elapsed = time.perf_counter() - started
    finally:
        await store.aclose()
    assert not found, found.describe()
    return elapsed


def wal_log(folder: Path, frames: int) -> bytes:
    """A write-ahead log of about ``frames`` page frames, as SQLite writes it."""
    path = folder / "wal.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA wal_autocheckpoint = 0")
    db.execute("CREATE TABLE t (x BLOB)")
    wal = path.with_name(path.name + "-wal")
    while wal.stat().st_size < 32 + frames * (24 + 4096):
        db.execute("INSERT INTO t VALUES (randomblob(3900))")
    data = wal.read_bytes()
    db.close()
    return data


def _memory(text: str) -> tuple[NewMemory, IndexedText]:
    new = NewMemory(
        uid=uuid.uuid4().hex,
        category="fact",
        content=text,
        context=None,
        confidence=1.0,
        importance=0.5,
        created_at=time.time(),
    )
    return new, IndexedText.of(text, None)


async def store_cost(folder: Path, count: int, synchronous: str) -> list[str]:
    """p50 of single stores without and with the checksum triggers, and their ratio."""
    storage = StorageConfig(synchronous=synchronous)  # type: ignore[arg-type]
    before = await BaseMemoryStore.open(
        folder / f"before-{synchronous}.db", agent=AGENT, storage=storage
    )
    after = await BaseMemoryStore.open(
        folder / f"after-{synchronous}.db", agent=AGENT, storage=storage
    )
    times: dict[str, list[float]] = {"before": [], "after": []}
    try:
        for name in ("memory_checksum_on_insert", "memory_checksum_on_update"):
            await before.fetchall(f"DROP TRIGGER temp.{name}")
        texts = TextGenerator(seed=11).texts(count + 10)
        for seq, text in enumerate(texts):
            order = (("before", before), ("after", after))
            for name, store in order if seq % 2 else order[::-1]:
                new, indexed = _memory(text)
                started = time.perf_counter()
                await store.insert(new, indexed)
                if seq >= 10:  # the first ones warm the caches
                    times[name].append(time.perf_counter() - started)
    finally:
        await before.aclose()
        await after.aclose()
    p50_before = statistics.median(times["before"]) * 1000
    p50_after = statistics.median(times["after"]) * 1000
    paired = statistics.median(a / b for a, b in zip(times["after"], times["before"], strict=True))
    return [
        synchronous,
        f"{p50_before:.3f}",
        f"{p50_after:.3f}",
        f"{p50_after / p50_before:.3f}×",
        f"{paired:.3f}×",
    ]


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--wal-frames", type=int, default=1000)
    parser.add_argument("--stores", type=int, default=400)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="perf-integrity-") as scratch:
        folder = Path(scratch)
        for size in (int(s) for s in args.sizes.split(",")):
            path = folder / f"m{size}.db"
            await fill(path, size)
            await open_seconds(path, StorageConfig())  # the first open sums nothing new
            whole = [await open_seconds(path, StorageConfig()) for _ in range(args.repeat)]
            since = StorageConfig(verify_all_checksums_below=1)
            recent = [await open_seconds(path, since) for _ in range(args.repeat)]
            alone = [await compare_seconds(path) for _ in range(args.repeat)]
            rows.append(
                [
                    f"{size:,}",
                    f"{min(whole) * 1000:.1f} (median {statistics.median(whole) * 1000:.1f})",
                    f"{min(recent) * 1000:.1f} (median {statistics.median(recent) * 1000:.1f})",
                    f"{min(alone) * 1000:.1f} (median {statistics.median(alone) * 1000:.1f})",
                ]
            )
        print(
            markdown_table(
                [
                    "memories",
                    "open, all rows verified, ms",
                    "open, rows since the last verified open, ms",
                    "full comparison alone, ms",
                ],
                rows,
            )
        )
        print()
        print(
            markdown_table(
                [
                    "synchronous",
                    "store p50 ms, no checksums",
                    "store p50 ms, checksums",
                    "ratio of p50s",
                    "median of paired ratios",
                ],
                [await store_cost(folder, args.stores, mode) for mode in ("FULL", "NORMAL")],
            )
        )
        data = wal_log(folder, args.wal_frames)
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            assert dropped_commits(data) is None
            times.append(time.perf_counter() - started)
        print(
            f"\nwrite-ahead log scan: {len(data) / 2**20:.1f} MiB, "
            f"best {min(times) * 1000:.1f} ms, median {statistics.median(times) * 1000:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
