"""Changing a memory's embedder: the old vectors serve searches until the new
generation, built in the background from the configured embedder, is switched in."""

from __future__ import annotations

import asyncio
from pathlib import Path

from spade_memory.config import MaintenanceConfig, MemoryConfig
from spade_memory.embedding import HashingEmbedder, OpenAICompatibleEmbedder
from spade_memory.manager import MemoryManager
from spade_memory.testing.embedding_server import EmbeddingServer

FACTS = [f"Fact number {n}: the {word} office opens at {n % 12 + 1}" for n, word in
         enumerate(["Porto", "Lisbon", "Madrid", "Paris", "Berlin", "Rome"] * 10)]  # fmt: skip


def config(root: Path, embedder: object) -> MemoryConfig:
    return MemoryConfig(
        root=root,
        embedder=embedder,  # type: ignore[arg-type]
        maintenance=MaintenanceConfig(check_on_open=False, behaviour=False),
    )


async def test_old_vectors_serve_until_the_new_generation_is_switched_in(
    memory_root: Path,
) -> None:
    async with (
        EmbeddingServer(model="old", dim=32) as old,
        EmbeddingServer(model="new", dim=16, latency=0.02) as new,
    ):
        before = OpenAICompatibleEmbedder(old.base_url, old.model)
        async with await MemoryManager.open(
            "alice@localhost", config(memory_root, before)
        ) as memory:
            await memory.store_many([{"content": fact} for fact in FACTS])
            await memory.flush()
        after = OpenAICompatibleEmbedder(new.base_url, new.model, batch_size=2)
        async with await MemoryManager.open(
            "alice@localhost", config(memory_root, after)
        ) as memory:
            indexer = memory.engine.indexer
            assert indexer is not None
            assert indexer.target is after and indexer.embedder.fingerprint == before.fingerprint
            queries = old.requests
            hits = await memory.search("Lisbon office", explain=True)
            assert "Lisbon" in hits[0].memory.content
            assert hits[0].explanation is not None and hits[0].explanation.vector_score
            assert old.requests == queries + 1  # the query embedded by the old model
            late = await memory.store("The Oslo office opens at 10")  # during the switch
            status = await memory.maintenance.wait()
            assert status.state == "done" and status.job == "rebuild vectors", status
            assert indexer.target is None and indexer.embedder is after
            assert indexer.index.dim == 16
            await memory.flush()
            assert await memory.base_store.vector_counts() == {after.fingerprint: len(FACTS) + 1}
            assert any(late.content in batch for batch in new.inputs)
            hits = await memory.search("Oslo office", explain=True)
            assert hits[0].memory.id == late.id
            assert hits[0].explanation is not None and hits[0].explanation.vector_score
        # reopened: the new vectors load, nothing to switch
        again = OpenAICompatibleEmbedder(new.base_url, new.model)
        async with await MemoryManager.open(
            "alice@localhost", config(memory_root, again)
        ) as memory:
            assert memory.engine.indexer is not None and memory.engine.indexer.target is None
            assert (await memory.stats()).pending_embeddings == 0


async def test_an_old_embedder_that_cannot_be_made_again_is_replaced_in_place(
    memory_root: Path,
) -> None:
    class Custom(HashingEmbedder):
        @property
        def fingerprint(self) -> str:
            return "custom-embedder-v1"

    async with await MemoryManager.open(
        "alice@localhost", config(memory_root, Custom(dim=64))
    ) as memory:
        await memory.store_many([{"content": fact} for fact in FACTS[:6]])
        await memory.flush()
    async with await MemoryManager.open(
        "alice@localhost", config(memory_root, "hashing")
    ) as memory:
        indexer = memory.engine.indexer
        assert indexer is not None and indexer.target is None
        await memory.flush()
        assert (await memory.stats()).pending_embeddings == 0
        assert set(await memory.base_store.vector_counts()) == {indexer.embedder.fingerprint}


async def test_the_switch_waits_for_a_new_endpoint_that_is_down(memory_root: Path) -> None:
    async with EmbeddingServer(model="old", dim=32) as old:
        before = OpenAICompatibleEmbedder(old.base_url, old.model)
        async with await MemoryManager.open(
            "alice@localhost", config(memory_root, before)
        ) as memory:
            await memory.store_many([{"content": fact} for fact in FACTS[:10]])
            await memory.flush()
        new = EmbeddingServer(model="new", dim=16)
        await new.start()
        port = new.port
        await new.aclose()  # down when the memory opens: its length must be given
        after = OpenAICompatibleEmbedder(
            new.base_url, "new", dimensions=16, send_dimensions=False, max_retries=0
        )
        async with await MemoryManager.open(
            "alice@localhost", config(memory_root, after)
        ) as memory:
            indexer = memory.engine.indexer
            assert indexer is not None and indexer.target is after
            hits = await memory.search("Madrid office", explain=True)
            assert hits[0].explanation is not None and hits[0].explanation.vector_score
            await asyncio.sleep(0.5)
            assert indexer.target is after  # still the old vectors
            revived = EmbeddingServer(model="new", dim=16)
            await revived.start(port)
            try:
                async with asyncio.timeout(20):
                    while indexer.target is not None:
                        await asyncio.sleep(0.1)
                assert indexer.embedder is after and revived.requests > 0
            finally:
                await revived.aclose()
