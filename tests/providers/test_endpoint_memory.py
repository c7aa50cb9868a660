"""A memory embedded through an OpenAI-format endpoint: stores never wait for it, never
get lost when it fails, and searches fall back to keywords while it is away."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from spade_memory.config import MaintenanceConfig, MemoryConfig
from spade_memory.embedding import OpenAICompatibleEmbedder
from spade_memory.engine import indexer as indexer_module
from spade_memory.manager import MemoryManager
from spade_memory.testing.embedding_server import EmbeddingServer

FACTS = [
    "The staging database password rotates every 30 days",
    "Bob prefers answers in Chinese",
    "The Porto office opens at 9 in the morning",
    "Deployments are frozen on Fridays",
]


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexer_module, "RETRY_FIRST_SECONDS", 0.2)
    monkeypatch.setattr(indexer_module, "RETRY_MAX_SECONDS", 0.4)


@pytest.fixture
async def server() -> AsyncIterator[EmbeddingServer]:
    async with EmbeddingServer(dim=48) as running:
        yield running


def config(root: Path, embedder: OpenAICompatibleEmbedder) -> MemoryConfig:
    return MemoryConfig(
        root=root,
        embedder=embedder,
        maintenance=MaintenanceConfig(check_on_open=False, behaviour=False),
    )


def endpoint(server: EmbeddingServer, **options: object) -> OpenAICompatibleEmbedder:
    options.setdefault("backoff", 0.0)
    options.setdefault("max_retries", 1)
    return OpenAICompatibleEmbedder(server.base_url, server.model, **options)  # type: ignore[arg-type]


async def wait_embedded(memory: MemoryManager, expected: int, seconds: float = 10.0) -> None:
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        stats = await memory.stats()
        if stats.embedded >= expected and stats.pending_embeddings == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not embedded in {seconds} s: {await memory.stats()}")


async def test_memories_become_vector_searchable(
    memory_root: Path, server: EmbeddingServer
) -> None:
    async with await MemoryManager.open(
        "alice@localhost", config(memory_root, endpoint(server))
    ) as memory:
        await memory.store_many([{"content": fact} for fact in FACTS])
        await memory.flush()
        stats = await memory.stats()
        assert (stats.embedded, stats.pending_embeddings) == (4, 0)
        hits = await memory.search("database password", explain=True)
        assert hits[0].memory.content == FACTS[0]
        assert hits[0].explanation is not None and hits[0].explanation.vector_score
    # reopened while the server is down: the dimension is read from the stored vectors
    await server.aclose()
    reopened = endpoint(server)
    async with await MemoryManager.open("alice@localhost", config(memory_root, reopened)) as memory:
        assert reopened.dim == 48
        assert (await memory.stats()).embedded == 4
        hits = await memory.search("Porto office")  # the query cannot be embedded: keywords
        assert hits[0].memory.content == FACTS[2]


async def test_a_store_never_waits_for_a_dead_endpoint_and_is_embedded_later(
    memory_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = EmbeddingServer(dim=48)
    await server.start()
    port = server.port
    embedder = endpoint(server, dimensions=48, send_dimensions=False, timeout=0.5)
    async with await MemoryManager.open("alice@localhost", config(memory_root, embedder)) as memory:
        await server.aclose()
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="spade_memory.engine.indexer"):
            await memory.store_many([{"content": fact} for fact in FACTS])
            assert time.monotonic() - started < 2.0
            await memory.flush()  # returns: the endpoint is unavailable
        assert (await memory.stats()).pending_embeddings == 4
        assert "embedding deferred" in caplog.text
        started = time.monotonic()
        hits = await memory.search("Fridays deployments")
        assert hits[0].memory.content == FACTS[3]
        assert time.monotonic() - started < 1.0  # no wait on the query embedding
        revived = EmbeddingServer(dim=48)
        await revived.start(port)
        try:
            await wait_embedded(memory, 4)
            assert revived.requests >= 1
            hits = await memory.search("Chinese answers", explain=True)
            assert hits[0].explanation is not None and hits[0].explanation.vector_score
        finally:
            await revived.aclose()


async def test_a_rate_limited_endpoint_loses_nothing(
    memory_root: Path, server: EmbeddingServer
) -> None:
    embedder = endpoint(server, dimensions=48, send_dimensions=False, max_retries=2)
    async with await MemoryManager.open("alice@localhost", config(memory_root, embedder)) as memory:
        server.rate_limit(1.5, retry_after="0.3")
        stored = await memory.store_many(
            [{"content": f"{fact} ({i})"} for i, fact in enumerate(FACTS * 10)]
        )
        assert len(stored) == 40
        await wait_embedded(memory, 40)
        assert 429 in server.statuses
        embedded = {text for batch in server.inputs for text in batch}
        assert {memory.content for memory in stored} <= embedded


async def test_a_query_that_cannot_be_embedded_falls_back_to_keywords(
    memory_root: Path, server: EmbeddingServer
) -> None:
    async with await MemoryManager.open(
        "alice@localhost", config(memory_root, endpoint(server))
    ) as memory:
        await memory.store_many([{"content": fact} for fact in FACTS])
        await memory.flush()
        server.fail_next(500)
        hits = await memory.search("Porto office hours", explain=True)
        assert hits[0].memory.content == FACTS[2]
        assert hits[0].explanation is not None and not hits[0].explanation.vector_score


async def test_a_changed_dimension_is_refused_not_mixed(
    memory_root: Path, server: EmbeddingServer, caplog: pytest.LogCaptureFixture
) -> None:
    async with await MemoryManager.open(
        "alice@localhost", config(memory_root, endpoint(server))
    ) as memory:
        await memory.store("The archive closes at 6 pm")
        await memory.flush()
        server.dim = 24  # another model behind the same name
        with caplog.at_level(logging.WARNING, logger="spade_memory.engine.indexer"):
            await memory.store("The library opens at 8 am")
            await memory.flush()
        assert "24-dimensional vectors, but this memory's vectors have 48" in caplog.text
        stats = await memory.stats()
        assert (stats.embedded, stats.pending_embeddings) == (1, 1)
        hits = await memory.search("library opens")
        assert hits[0].memory.content == "The library opens at 8 am"
