"""The keyword (BM25) stage alone: the FTS5 query planner on a filled memory.

    python -m benchmarks.perf_keyword                   # 100k memories (cached fill)
    python -m benchmarks.perf_keyword --sizes 10000,100000
    python -m benchmarks.perf_keyword --db path/to/x_base_memory.db   # any memory file
    python -m benchmarks.perf_keyword --search      # also whole keyword-only searches

What ``storage/keyword_plan.py`` costs per query, measured without the rest of a
search (tokenising, fusion, loading the hits), so that two versions of the planner
can be compared on the same file: the file is opened read-only (``immutable=1``)
and queried on this thread. Queries are the distinct generated questions and the
one-word queries (a name or a place) of ``perf_search``, tokenised by the
project's tokenizer; ``limit`` is what a search for 5 results asks of the keyword
route (20). Wall and CPU time are per query (medians); the CPU column is this
process's, unaffected by other jobs waiting for a core.

``--search`` also times whole searches with no embedder and the graph route off
(``MemoryManager.search(text, limit=5)``: tokenising, the keyword stage, loading
and blending the hits), on a copy of the memory in a scratch folder, and counts
the SQL reads each makes (the ``reads`` column: statements on the memory's
connection, median per search; the keyword stage alone asks its own file).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .perf_common import (
    JID,
    TextGenerator,
    add_common_arguments,
    copy_memory,
    markdown_table,
    memory_config,
    percentile,
    prefilled,
    scratch_dir,
    sizes_from,
    write_json,
)

SIZES = (100_000,)
QUICK_SIZES = (10_000,)
LIMIT = 20  # what a search for 5 results asks of the keyword route


async def measure(path: Path, *, queries: int) -> dict[str, Any]:
    """Wall and CPU time per planned keyword query on the memory file ``path``."""
    from spade_memory.storage.keyword_plan import KeywordPlanner
    from spade_memory.text.tokenizer import get_tokenizer

    db = sqlite3.connect(f"file:{path}?immutable=1", uri=True)

    async def fetch(sql: str, params: Any = ()) -> list[Any]:
        return db.execute(sql, list(params)).fetchall()

    tokenizer = get_tokenizer()
    batches = {
        "questions": TextGenerator(seed=23).queries(queries + 10)[10:],
        "one word": TextGenerator(seed=23).keywords(queries),
    }
    planner = KeywordPlanner(fetch, bm25_weights="1.0, 0.3")
    for question in TextGenerator(seed=23).queries(10):  # warm-up (not measured)
        await planner.search(
            tokenizer.query_terms(question), where="m.status IN (?)", params=["active"], limit=LIMIT
        )
    result: dict[str, Any] = {"memories": db.execute("SELECT count(*) FROM memories").fetchone()[0]}
    try:
        for name, texts in batches.items():
            wall: list[float] = []
            cpu: list[float] = []
            for text in texts:
                terms = tokenizer.query_terms(text)
                started, started_cpu = time.perf_counter(), time.process_time()
                await planner.search(terms, where="m.status IN (?)", params=["active"], limit=LIMIT)
                wall.append((time.perf_counter() - started) * 1000)
                cpu.append((time.process_time() - started_cpu) * 1000)
            result[name] = {
                "wall_p50_ms": statistics.median(wall),
                "wall_p99_ms": percentile(wall, 99),
                "cpu_p50_ms": statistics.median(cpu),
            }
    finally:
        db.close()
    return result


async def measure_search(root: Path, *, queries: int) -> dict[str, Any]:
    """Wall and CPU time per keyword-only ``MemoryManager.search`` on the memory ``root``."""
    from spade_memory import MemoryManager

    batches = {
        "questions": TextGenerator(seed=23).queries(queries + 10)[10:],
        "one word": TextGenerator(seed=23).keywords(queries),
    }
    config = memory_config(root, embedder=None, retrieval={"graph_route": False})
    result: dict[str, Any] = {}
    with _counting_reads() as reads:
        async with await MemoryManager.open(JID, config) as manager:
            for question in TextGenerator(seed=23).queries(10):  # warm-up (not measured)
                await manager.search(question + " warm", limit=5)
            for name, texts in batches.items():
                wall: list[float] = []
                cpu: list[float] = []
                counted: list[float] = []
                for text in texts:
                    before = reads[0]
                    started, started_cpu = time.perf_counter(), time.process_time()
                    await manager.search(text, limit=5)
                    wall.append((time.perf_counter() - started) * 1000)
                    cpu.append((time.process_time() - started_cpu) * 1000)
                    counted.append(reads[0] - before)
                result[name] = {
                    "wall_p50_ms": statistics.median(wall),
                    "wall_p99_ms": percentile(wall, 99),
                    "cpu_p50_ms": statistics.median(cpu),
                    "reads_p50": statistics.median(counted),
                }
    return result


@contextlib.contextmanager
def _counting_reads() -> Iterator[list[int]]:
    """Count the read statements of every base memory while inside (``[count]``).

    Background work of the manager between searches may add a read now and then;
    the median per search is what the table shows.
    """
    from spade_memory.storage.base import BaseMemoryStore

    count = [0]
    original = BaseMemoryStore._fetchall

    async def counting(self: BaseMemoryStore, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        count[0] += 1
        return await original(self, sql, params)

    BaseMemoryStore._fetchall = counting  # type: ignore[method-assign]
    try:
        yield count
    finally:
        BaseMemoryStore._fetchall = original  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.perf_keyword",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common_arguments(parser, sizes=SIZES, quick=QUICK_SIZES)
    parser.add_argument("--queries", type=int, default=200, help="queries per kind (200)")
    parser.add_argument("--db", type=Path, help="measure this memory file instead of a fill")
    parser.add_argument(
        "--search", action="store_true", help="also whole keyword-only searches (a copy)"
    )
    args = parser.parse_args(argv)
    queries = 40 if args.quick else args.queries
    files: list[Path] = []
    if args.db is not None:
        files.append(args.db)
    else:
        for size in sizes_from(args):
            root, _ = asyncio.run(prefilled(size))
            files.extend(sorted(root.glob("*_base_memory.db")))
    rows = []
    results = []
    for path in files:
        result = asyncio.run(measure(path, queries=queries))
        results.append(result)
        if args.search:
            with scratch_dir(args.dir, "perf-keyword") as folder:
                copy_memory(path.parent, folder)
                result["search"] = asyncio.run(measure_search(folder, queries=queries))
        for stage, figures_of in (("keyword stage", result), ("search", result.get("search"))):
            if figures_of is None:
                continue
            for name in ("questions", "one word"):
                figures = figures_of[name]
                rows.append(
                    (
                        result["memories"],
                        stage,
                        name,
                        figures["wall_p50_ms"],
                        figures["wall_p99_ms"],
                        figures["cpu_p50_ms"],
                        figures.get("reads_p50", ""),
                    )
                )
    headers = ("memories", "what", "queries", "wall p50 ms", "wall p99 ms", "CPU p50 ms", "reads")
    sys.stdout.write(markdown_table(headers, rows) + "\n")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
