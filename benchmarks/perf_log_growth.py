"""What one store or one note adds to disk: the SQLite write-ahead log and the notes files.

    python -m benchmarks.perf_log_growth                           # both parts
    python -m benchmarks.perf_log_growth --baseline-tree DIR      # notes before/after too
    python -m benchmarks.perf_log_growth --quick                  # fewer stores and notes

**Write-ahead log.** Two memories in one run, each filled with 200 memories and then
given ``--stores`` single stores of an 850-character memory (hashing embedder, so
the figures are SQLite's alone; ``synchronous=FULL``): one with SQLite's own
checkpoint policy (``wal_autocheckpoint`` 1000 pages, no size limit: what
spade_memory used before it had ``StorageConfig.wal_checkpoint_pages`` and
``wal_size_limit_bytes``), one with the defaults. Per store: the bytes this process
handed to ``write()`` (``wchar`` of ``/proc/self/io``) and the time; over the
window: the log's largest and last size.

**Notes.** A conversation holding 10 or 10,000 notes of about 100 characters is
given ``--notes`` more, one ``add`` each; per note: the bytes handed to
``write()`` and the time. With ``--baseline-tree DIR`` (a checkout of an earlier
version, e.g. ``git worktree add DIR <commit>``) the same measurement runs in a
child process importing spade_memory from ``DIR``, and the table shows both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .perf_common import io_counters, markdown_table, scratch_dir, write_json

WORDS = [
    "amber",
    "river",
    "falcon",
    "orchard",
    "lantern",
    "copper",
    "meadow",
    "harbor",
    "signal",
    "quarry",
    "willow",
    "ember",
    "granite",
    "velvet",
    "summit",
    "thistle",
    "cobalt",
    "prairie",
    "beacon",
    "saffron",
]
NOTE_SIZES = (10, 10_000)
PREFILL = 200


def memory_text(rng: random.Random, seq: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(140))[:840] + f" n{seq:06d}"


async def measure_wal(root: Path, policy: str, stores: int) -> dict[str, Any]:
    """Bytes, time and log size per single store under one checkpoint policy."""
    from spade_memory import MemoryConfig, MemoryManager, StorageConfig

    storage = (
        StorageConfig(wal_checkpoint_pages=1000, wal_size_limit_bytes=-1)
        if policy == "sqlite"
        else StorageConfig()
    )
    config = MemoryConfig(root=root, embedder="hashing", storage=storage)
    rng = random.Random(11)
    async with await MemoryManager.open("bench@localhost", config) as memory:
        await memory.store_many([{"content": memory_text(rng, i)} for i in range(PREFILL)])
        await memory.flush()
        wal = next(root.glob("*-wal"))
        largest = 0
        before = io_counters()["wchar"]
        started = time.perf_counter()
        for seq in range(PREFILL, PREFILL + stores):
            await memory.store(memory_text(rng, seq))
            largest = max(largest, wal.stat().st_size)
        await memory.flush()
        elapsed = time.perf_counter() - started
        written = io_counters()["wchar"] - before
        last = wal.stat().st_size
    return {
        "policy": policy,
        "stores": stores,
        "per_store_bytes": written / stores,
        "per_store_ms": elapsed / stores * 1000,
        "wal_max_bytes": largest,
        "wal_last_bytes": last,
    }


async def measure_notes(root: Path, existing: int, notes: int) -> dict[str, Any]:
    """Bytes and time per note added to a conversation that holds ``existing`` notes."""
    from spade_memory.storage.interaction import InteractionStore

    path = root / "bench_interactions.json"
    rng = random.Random(existing)
    store = await InteractionStore.open(path, agent="bench@localhost")
    try:
        await store.import_notes(
            {
                "conv": [
                    {"content": memory_text(rng, i)[:100], "created_at": float(i)}
                    for i in range(existing)
                ]
            }
        )
        before = io_counters()["wchar"]
        started = time.perf_counter()
        for seq in range(notes):
            await store.add("conv", memory_text(rng, existing + seq)[:100])
        elapsed = time.perf_counter() - started
        written = io_counters()["wchar"] - before
    finally:
        await store.aclose()
    on_disk = sum(p.stat().st_size for p in root.glob("bench_interactions.json*"))
    return {
        "existing": existing,
        "notes": notes,
        "per_note_bytes": written / notes,
        "per_note_ms": elapsed / notes * 1000,
        "file_bytes": on_disk,
    }


def notes_in_child(tree: Path, scratch: Path, existing: int, notes: int) -> dict[str, Any]:
    """:func:`measure_notes` run on the spade_memory of another tree, in a child process."""
    code = (
        "import asyncio, json, sys\n"
        f"sys.path.insert(0, {str(tree)!r})\n"
        "import spade_memory\n"  # the other tree's; its submodules follow it
        f"sys.path[0] = {str(Path(__file__).resolve().parent.parent)!r}\n"
        "from pathlib import Path\n"
        "from benchmarks.perf_log_growth import measure_notes\n"
        f"print(json.dumps(asyncio.run(measure_notes(Path({str(scratch)!r}), "
        f"{existing}, {notes}))))\n"
    )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.perf_log_growth", description=__doc__
    )
    parser.add_argument("--stores", type=int, default=None, help="single stores per policy (600)")
    parser.add_argument("--notes", type=int, default=None, help="notes added per size (200)")
    parser.add_argument("--baseline-tree", type=Path, default=None, help="an earlier checkout")
    parser.add_argument("--quick", action="store_true", help="150 stores, 50 notes")
    parser.add_argument("--dir", type=Path, default=None, help="scratch folder")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    stores = args.stores or (150 if args.quick else 600)
    notes = args.notes or (50 if args.quick else 200)
    logging.basicConfig(level=logging.WARNING)

    wal = []
    for policy in ("sqlite", "default"):
        with scratch_dir(args.dir, "perf-wal") as root:
            wal.append(asyncio.run(measure_wal(root, policy, stores)))
    before, after = wal
    kib = 1024
    print(f"## Write-ahead log ({stores} single stores of 850 characters, synchronous=FULL)\n")
    print(
        markdown_table(
            ["policy", "KiB written / store", "ms / store", "largest log KiB", "last log KiB"],
            [
                [
                    r["policy"],
                    r["per_store_bytes"] / kib,
                    r["per_store_ms"],
                    r["wal_max_bytes"] / kib,
                    r["wal_last_bytes"] / kib,
                ]
                for r in wal
            ]
            + [
                [
                    "default / sqlite",
                    after["per_store_bytes"] / before["per_store_bytes"],
                    after["per_store_ms"] / before["per_store_ms"],
                    after["wal_max_bytes"] / before["wal_max_bytes"],
                    after["wal_last_bytes"] / max(1, before["wal_last_bytes"]),
                ]
            ],
        )
    )

    rows = []
    results: list[dict[str, Any]] = []
    for existing in NOTE_SIZES:
        with scratch_dir(args.dir, "perf-notes") as root:
            now = asyncio.run(measure_notes(root, existing, notes))
        old = None
        if args.baseline_tree is not None:
            with scratch_dir(args.dir, "perf-notes-old") as root:
                old = notes_in_child(args.baseline_tree.resolve(), root, existing, notes)
        results.append({"current": now, "baseline": old})
        if old is not None:
            rows.append(
                [
                    existing,
                    "baseline",
                    old["per_note_bytes"] / kib,
                    old["per_note_ms"],
                    old["file_bytes"] / kib,
                ]
            )
        rows.append(
            [
                existing,
                "current",
                now["per_note_bytes"] / kib,
                now["per_note_ms"],
                now["file_bytes"] / kib,
            ]
        )
        if old is not None:
            rows.append(
                [
                    existing,
                    "current / baseline",
                    now["per_note_bytes"] / old["per_note_bytes"],
                    now["per_note_ms"] / old["per_note_ms"],
                    now["file_bytes"] / old["file_bytes"],
                ]
            )
    print(f"\n## Interaction notes ({notes} notes added one by one)\n")
    print(
        markdown_table(
            ["notes before", "tree", "KiB written / note", "ms / note", "files KiB after"], rows
        )
    )
    write_json(args.json, {"wal": wal, "notes": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
