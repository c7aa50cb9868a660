"""Embedding through an OpenAI-compatible endpoint: how soon stored memories are
vector-searchable, what a rate-limited endpoint costs, and searches while the
embedder changes.

    python -m benchmarks.perf_embed_endpoint                # 2,000 memories, 20 ms/request
    python -m benchmarks.perf_embed_endpoint --quick        # 500 memories
    python -m benchmarks.perf_embed_endpoint --switch 10000 # also: change embedder at 10k
    python -m benchmarks.perf_embed_endpoint --concurrency 1  # one request in flight

A local OpenAI-format server (``python -m spade_memory.testing.embedding_server``,
in a process of its own on 127.0.0.1, as a real server would be) adds ``--latency``
seconds to every request. The memory uses ``OpenAICompatibleEmbedder`` with its
defaults (batches of 8, two requests in flight), or ``--concurrency`` requests in flight.

- *searchable*: ``store_many`` of ``--count`` memories (in calls of ``--store-batch``),
  timed from the first call until every memory has its vector in SQLite and FAISS
  (polled every 50 ms), then until the graph entries (whose texts differ from the
  memories') have theirs too.
  The floor is ``count / batch × latency`` (the requests alone, one at a time,
  whatever ``--concurrency``); the target is 1.2 × that floor.
- *rate limited*: the same, while the server answers HTTP 429 (``Retry-After: 1``)
  for the first ``--limited`` seconds; every memory must end up embedded.
- *backlog*: ``--count`` memories stored without an embedder, then opened with the
  endpoint: the time until the indexer has embedded them all, no store competing
  (the endpoint path alone, against the same floor).
- *switch* (with ``--switch N``): a memory of N memories embedded by one model is
  opened with another (another fingerprint and length); searches run every 100 ms
  while it re-embeds, counting those with results and with vector scores (the old
  vectors), and the time until the new generation is switched in.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from spade_memory.config import MaintenanceConfig, MemoryConfig
from spade_memory.embedding import OpenAICompatibleEmbedder
from spade_memory.manager import MemoryManager

from .perf_common import JID, TextGenerator, scratch_dir, write_json

DIM = 384


@dataclass
class Server:
    """A server process: its API root, its model and how to talk to it."""

    base_url: str
    model: str

    @property
    def root(self) -> str:
        return self.base_url.removesuffix("/v1")

    async def control(self, **order: Any) -> None:
        async with aiohttp.ClientSession() as session:
            await session.post(f"{self.root}/control", json=order)

    async def stats(self) -> dict[str, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.root}/stats") as response,
        ):
            data: dict[str, Any] = await response.json()
            return data


@contextlib.asynccontextmanager
async def server_process(*, dim: int, latency: float, model: str) -> AsyncIterator[Server]:
    """``python -m spade_memory.testing.embedding_server`` in a child process."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "spade_memory.testing.embedding_server",
        "--dim",
        str(dim),
        "--latency",
        str(latency),
        "--model",
        model,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        yield Server(line.decode().strip(), model)
    finally:
        process.terminate()
        await process.wait()


def _config(root: Path, embedder: OpenAICompatibleEmbedder) -> MemoryConfig:
    return MemoryConfig(
        root=root,
        embedder=embedder,
        maintenance=MaintenanceConfig(check_on_open=False, behaviour=False),
    )


async def _until_embedded(memory: MemoryManager, count: int) -> None:
    """Wait until ``count`` memories have their document vectors (SQLite and FAISS):
    they are vector-searchable. Polled every 50 ms."""
    while True:
        stats = await memory.stats()
        if stats.embedded >= count and stats.pending_embeddings == 0:
            return
        await asyncio.sleep(0.05)


async def _until_graph_embedded(memory: MemoryManager, count: int) -> None:
    """Wait until the graph entries are embedded too (``flush()`` returns early while
    the endpoint is unavailable: then flush again)."""
    while True:
        await memory.flush()
        stats = await memory.stats()
        if stats.embedded >= count and stats.pending_embeddings == 0:
            return
        await asyncio.sleep(0.2)


def _embedder(server: Server, concurrency: int | None) -> OpenAICompatibleEmbedder:
    if concurrency is None:
        return OpenAICompatibleEmbedder(server.base_url, server.model, dimensions=DIM)
    return OpenAICompatibleEmbedder(
        server.base_url, server.model, dimensions=DIM, concurrency=concurrency
    )


async def searchable(
    root: Path,
    count: int,
    store_batch: int,
    latency: float,
    limited: float,
    concurrency: int | None = None,
) -> dict[str, Any]:
    texts = TextGenerator(seed=11).texts(count)
    async with server_process(dim=DIM, latency=latency, model="local-embed") as server:
        embedder = _embedder(server, concurrency)
        async with await MemoryManager.open(JID, _config(root, embedder)) as memory:
            if limited:
                await server.control(rate_limit=limited, retry_after="1")
            started = time.perf_counter()
            for start in range(0, count, store_batch):
                await memory.store_many(
                    [{"content": text} for text in texts[start : start + store_batch]]
                )
            stored = time.perf_counter() - started
            await _until_embedded(memory, count)
            elapsed = time.perf_counter() - started
            drained = elapsed - stored
            await _until_graph_embedded(memory, count)
            with_graph = time.perf_counter() - started
            stats = await memory.stats()
        answered = await server.stats()
        floor = count / embedder.batch_size * latency
        return {
            "count": count,
            "concurrency": embedder.concurrency,
            "latency_ms": latency * 1000,
            "rate_limited_s": limited,
            "store_many_s": round(stored, 3),
            "searchable_s": round(elapsed, 3),
            "after_last_store_s": round(drained, 3),
            "with_graph_entries_s": round(with_graph, 3),
            "floor_s": round(floor, 3),
            "ratio": round(elapsed / floor, 3) if floor else None,
            "embedded": stats.embedded,
            "requests": answered["requests"],
            "answered_429": answered["statuses"].count(429),
        }


async def backlog(
    root: Path, count: int, latency: float, concurrency: int | None = None
) -> dict[str, Any]:
    """Memories stored without an embedder, then opened with the endpoint: the time the
    indexer takes to embed them all, with no store competing."""
    texts = TextGenerator(seed=14).texts(count)
    plain = MemoryConfig(
        root=root,
        embedder=None,
        maintenance=MaintenanceConfig(check_on_open=False, behaviour=False),
    )
    async with await MemoryManager.open(JID, plain) as memory:
        for start in range(0, count, 1_000):
            await memory.store_many([{"content": t} for t in texts[start : start + 1_000]])
    async with server_process(dim=DIM, latency=latency, model="local-embed") as server:
        embedder = _embedder(server, concurrency)
        started = time.perf_counter()
        async with await MemoryManager.open(JID, _config(root, embedder)) as memory:
            await _until_embedded(memory, count)
            elapsed = time.perf_counter() - started
            documents = (await server.stats())["requests"]
            await _until_graph_embedded(memory, count)
            with_graph = time.perf_counter() - started
        answered = await server.stats()
    floor = count / embedder.batch_size * latency
    return {
        "count": count,
        "concurrency": embedder.concurrency,
        "embedded_s": round(elapsed, 3),
        "floor_s": round(floor, 3),
        "ratio": round(elapsed / floor, 3) if floor else None,
        "with_graph_entries_s": round(with_graph, 3),
        "requests_documents": documents,
        "requests_with_graph": answered["requests"],
    }


async def switch(root: Path, count: int, latency: float) -> dict[str, Any]:
    """A memory embedded by one model, opened with another: searches while it switches."""
    texts = TextGenerator(seed=12).texts(count)
    questions = TextGenerator(seed=13).queries(50)
    async with (
        server_process(dim=DIM, latency=latency, model="old-model") as old,
        server_process(dim=DIM // 2, latency=latency, model="new-model") as new,
    ):
        before = OpenAICompatibleEmbedder(old.base_url, old.model, dimensions=DIM, batch_size=64)
        async with await MemoryManager.open(JID, _config(root, before)) as memory:
            for start in range(0, count, 2_000):
                await memory.store_many([{"content": t} for t in texts[start : start + 2_000]])
            await _until_embedded(memory, count)
        after = OpenAICompatibleEmbedder(new.base_url, new.model, dimensions=DIM // 2)
        started = time.perf_counter()
        searches = with_results = with_vectors = 0
        async with await MemoryManager.open(JID, _config(root, after)) as memory:
            opened = time.perf_counter() - started
            indexer = memory.engine.indexer
            assert indexer is not None and indexer.target is after
            while indexer.target is not None:
                status = memory.maintenance_status
                if status.state == "failed":
                    raise RuntimeError(f"the re-embedding failed: {status}")
                results = await memory.search(questions[searches % len(questions)], explain=True)
                searches += 1
                with_results += 1 if results else 0
                with_vectors += any(
                    r.explanation is not None and r.explanation.vector_score for r in results
                )
                await asyncio.sleep(0.1)
            switched = time.perf_counter() - started
            results = await memory.search(questions[0], explain=True)
        return {
            "count": count,
            "open_s": round(opened, 3),
            "switched_after_s": round(switched, 3),
            "searches_during_switch": searches,
            "with_results": with_results,
            "with_vector_scores": with_vectors,
            "vector_scores_after": any(
                r.explanation is not None and r.explanation.vector_score for r in results
            ),
            "new_endpoint_requests": (await new.stats())["requests"],
        }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with scratch_dir(None, "embed-endpoint") as folder:
        results["searchable"] = await searchable(
            folder / "plain", args.count, args.store_batch, args.latency, 0.0, args.concurrency
        )
        print(json.dumps(results["searchable"]))
        results["backlog"] = await backlog(
            folder / "backlog", args.count, args.latency, args.concurrency
        )
        print(json.dumps(results["backlog"]))
        results["rate_limited"] = await searchable(
            folder / "limited",
            args.count,
            args.store_batch,
            args.latency,
            args.limited,
            args.concurrency,
        )
        print(json.dumps(results["rate_limited"]))
        if args.switch:
            results["switch"] = await switch(folder / "switch", args.switch, args.latency)
            print(json.dumps(results["switch"]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2_000)
    parser.add_argument("--store-batch", type=int, default=250)
    parser.add_argument("--latency", type=float, default=0.020)
    parser.add_argument("--limited", type=float, default=10.0)
    parser.add_argument("--switch", type=int, default=0, metavar="N")
    parser.add_argument(
        "--concurrency", type=int, default=None, help="requests in flight (the embedder's default)"
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.count, args.limited = 500, 3.0
    logging.basicConfig(level=logging.ERROR)
    results = asyncio.run(main_async(args))
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
