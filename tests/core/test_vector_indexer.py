"""The FAISS cache follows SQLite: snapshots, catch-up, rebuilds, re-embedding."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
import pytest
from factories import hashing_config
from numpy.typing import NDArray

from spade_memory import MemoryManager
from spade_memory.config import MaintenanceConfig
from spade_memory.embedding.hashing import HashingEmbedder
from spade_memory.engine import indexer as indexer_module
from spade_memory.errors import EmbeddingUnavailable
from spade_memory.storage.base import BaseMemoryStore


async def index_ids(memory: MemoryManager) -> set[int]:
    assert memory.indexer is not None
    return set(memory.indexer.index.ids().tolist())


async def stored_ids(memory: MemoryManager) -> set[int]:
    assert memory.indexer is not None
    fingerprint = memory.indexer.embedder.fingerprint
    return set((await memory.base_store.embedding_ids(fingerprint)).tolist())


def snapshot_of(root: Path) -> Path:
    (snapshot,) = root.glob("*_base_memory.faiss")
    return snapshot


async def test_snapshot_written_on_close_and_loaded_on_open(tmp_path: Path) -> None:
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        stored = await memory.store_many([{"content": f"memory {i}"} for i in range(20)])
        await memory.flush()
    snapshot = snapshot_of(tmp_path)
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        assert await index_ids(memory) == {m.id for m in stored}
    assert snapshot.exists()


async def test_stale_snapshot_is_caught_up_from_sqlite(tmp_path: Path) -> None:
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        kept = await memory.store_many([{"content": f"kept {i}"} for i in range(10)])
        await memory.flush()
    old_snapshot = snapshot_of(tmp_path).read_bytes()
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        await memory.forget(kept[0].id)
        await memory.update(kept[1].id, content="changed text")
        added = await memory.store("a newer memory")
        await memory.flush()
        expected = await stored_ids(memory)
        vector_after = dict(
            await memory.base_store.vectors_for(
                memory.indexer.embedder.fingerprint, 256, [kept[1].id]
            )
        )  # type: ignore[union-attr]
    # Put the old snapshot back, as if the last one had never been written.
    snapshot_of(tmp_path).write_bytes(old_snapshot)
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        assert await index_ids(memory) == expected
        assert kept[0].id not in expected and added.id in expected
        ids, scores = memory.indexer.index.search(vector_after[kept[1].id], 1)  # type: ignore[union-attr]
        assert ids.tolist() == [kept[1].id] and scores[0] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "flip"])
async def test_damaged_snapshot_is_rebuilt_from_sqlite(tmp_path: Path, damage: str) -> None:
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        stored = await memory.store_many([{"content": f"fact {i}"} for i in range(30)])
        await memory.flush()
    snapshot = snapshot_of(tmp_path)
    data = snapshot.read_bytes()
    if damage == "truncate":
        snapshot.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        snapshot.write_bytes(b"\x00garbage" * 100)
    elif damage == "empty":
        snapshot.write_bytes(b"")
    else:
        flipped = bytearray(data)
        flipped[len(flipped) // 2] ^= 0xFF
        snapshot.write_bytes(bytes(flipped))
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        assert await index_ids(memory) == {m.id for m in stored}
        assert (await memory.search("fact 7"))[0].memory.content.startswith("fact")
    assert list(tmp_path.glob("*.faiss.corrupt-*")), "the damaged snapshot is kept aside"


async def test_memories_not_yet_embedded_are_embedded_on_next_open(tmp_path: Path) -> None:
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        stored = await memory.store("written just before a crash")
    # Simulate a crash before the background embedder ran: drop the vector.
    db = next(tmp_path.glob("*_base_memory.db"))
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM embeddings")
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        assert (await memory.search("written crash"))[0].memory.id == stored.id  # keywords at once
        await memory.flush()
        assert await index_ids(memory) == {stored.id}


async def test_embedder_change_triggers_reembedding(tmp_path: Path) -> None:
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        stored = await memory.store_many([{"content": f"fact {i}"} for i in range(5)])
        await memory.flush()
    other = dataclasses.replace(hashing_config(tmp_path), embedder=HashingEmbedder(dim=128))
    async with await MemoryManager.open("v@x", other) as memory:
        # the old vectors serve while the new generation is built, then it is switched in
        await memory.maintenance.wait()
        await memory.flush()
        assert memory.indexer is not None and memory.indexer.index.dim == 128
        assert await index_ids(memory) == {m.id for m in stored}
        stats = await memory.stats()
        assert stats.embedded == 5 and stats.pending_embeddings == 0


async def test_snapshot_is_not_rewritten_per_insert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spade_memory.storage.vectors import VectorIndex

    writes: list[int] = []
    original = VectorIndex.save_snapshot

    def counting(self: VectorIndex, path: Path, **kwargs: object) -> None:
        writes.append(self.ntotal)
        original(self, path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(VectorIndex, "save_snapshot", counting)
    cfg = hashing_config(tmp_path, snapshot_min_changes=50, snapshot_debounce_seconds=0)
    async with await MemoryManager.open("v@x", cfg) as memory:
        for i in range(200):
            await memory.store(f"memory number {i}")
            if i % 20 == 0:
                await memory.flush()
        await memory.flush()
    assert 1 <= len(writes) <= 6, writes  # batched, plus one on close; never 200


async def test_flush_waits_for_every_pending_vector(tmp_path: Path) -> None:
    config = hashing_config(tmp_path, embed_batch_size=7)
    async with await MemoryManager.open("v@x", config) as memory:
        await memory.store_many([{"content": f"fact {i}"} for i in range(100)])
        await memory.flush()
        stats = await memory.stats()
        assert stats.embedded == 100 and stats.pending_embeddings == 0
        query = memory.indexer.embedder.embed_query("fact 42")  # type: ignore[union-attr]
        assert np.isfinite(query).all()


class FailsOnce(HashingEmbedder):
    """Raises on its first batch of documents, then embeds as usual."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        if not self.failed:
            self.failed = True
            raise RuntimeError("embedder down")
        return super().embed_documents(texts)


async def test_a_failed_batch_does_not_stop_later_embedding(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = FailsOnce()
    settings = dataclasses.replace(
        hashing_config(tmp_path, embed_batch_size=8), embedder=embedder, root=tmp_path
    )
    async with await MemoryManager.open("v@x", settings) as memory:
        first = await memory.store_many([{"content": f"early fact {i}"} for i in range(8)])
        await memory.flush()
        later = await memory.store_many([{"content": f"later fact {i}"} for i in range(5)])
        await memory.flush()
        assert embedder.failed
        embedded = await stored_ids(memory)
        assert {m.id for m in later} <= embedded  # the failed batch holds up nothing
        assert not {m.id for m in first} & embedded  # skipped now, embedded on next open
    assert "embedder failed on a batch" in caplog.text
    async with await MemoryManager.open("v@x", settings) as memory:
        await memory.flush()
        assert {m.id for m in first} <= await stored_ids(memory)


class AsyncHashing(HashingEmbedder):
    """The hashing embedder behind the async methods of an endpoint: each call waits
    for its turn, recording which calls had started meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.second_started = asyncio.Event()
        self.overlapped = False
        self.unavailable_once: int | None = None

    async def prepare(self, stored_fingerprints: Collection[str]) -> None:
        return None

    async def aembed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.calls.append(list(texts))
        number = len(self.calls)
        if number == 2:
            self.second_started.set()
        if number == 1:
            # answered only once the indexer has handed over the next batch
            await asyncio.wait_for(self.second_started.wait(), 30)
            self.overlapped = True
        if number == self.unavailable_once:
            self.unavailable_once = None
            raise EmbeddingUnavailable("endpoint down for a moment")
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> NDArray[np.float32]:
        return self.embed_query(text)


async def test_an_async_embedder_gets_the_next_batch_before_answering(tmp_path: Path) -> None:
    embedder = AsyncHashing()
    settings = dataclasses.replace(
        hashing_config(tmp_path, embed_batch_size=4), embedder=embedder, root=tmp_path
    )
    async with await MemoryManager.open("v@x", settings) as memory:
        stored = await memory.store_many([{"content": f"fact number {i}"} for i in range(10)])
        await memory.flush()
        assert embedder.overlapped
        assert [len(call) for call in embedder.calls] == [4, 4, 2]
        assert await stored_ids(memory) == {m.id for m in stored}
        for item in stored:  # each vector went to its own memory
            ids, scores = memory.indexer.index.search(embedder.embed_query(item.content), 1)  # type: ignore[union-attr]
            assert ids.tolist() == [item.id] and scores[0] == pytest.approx(1.0, abs=1e-5)


async def test_a_batch_unavailable_with_the_next_in_flight_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(indexer_module, "RETRY_FIRST_SECONDS", 0.01)
    embedder = AsyncHashing()
    embedder.unavailable_once = 2
    settings = dataclasses.replace(
        hashing_config(tmp_path, embed_batch_size=4), embedder=embedder, root=tmp_path
    )
    async with await MemoryManager.open("v@x", settings) as memory:
        stored = await memory.store_many([{"content": f"fact number {i}"} for i in range(12)])
        await memory.flush()
        assert memory.indexer is not None
        while memory.indexer.unavailable is not None:  # the next attempt comes soon
            await asyncio.sleep(0.01)
            await memory.flush()
        assert await stored_ids(memory) == {m.id for m in stored}
        # the second batch was asked for again; the first was kept, not asked twice
        assert embedder.calls.count(embedder.calls[0]) == 1
        assert embedder.calls.count(embedder.calls[1]) == 2


async def test_a_turn_is_searched_with_the_turn_before_it_until_that_turn_is_forgotten(
    tmp_path: Path,
) -> None:
    embedder = HashingEmbedder()
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        question, answer = await memory.store_many(
            [
                {"content": "Where did you move from?", "source_conversation": "c1"},
                {"content": "Sweden, four years ago.", "source_conversation": "c1"},
            ]
        )
        await memory.flush()
        fingerprint, dim = embedder.fingerprint, embedder.dim
        stored = await memory.base_store.vectors_for(fingerprint, dim, [answer.id])
        wanted = embedder.embed_documents(["Where did you move from?\nSweden, four years ago."])
        np.testing.assert_allclose(stored[answer.id], wanted[0], atol=1e-6)
        await memory.forget(question.id)
        await memory.flush()
        stored = await memory.base_store.vectors_for(fingerprint, dim, [answer.id])
        alone = embedder.embed_documents(["Sweden, four years ago."])[0]
        np.testing.assert_allclose(stored[answer.id], alone, atol=1e-6)
        assert await index_ids(memory) == {answer.id}
        # the vector searched is the one made without the forgotten turn
        assert memory.indexer is not None
        ids, scores = await memory.indexer.search(alone, 1)
        assert ids.tolist() == [answer.id] and scores[0] > 0.999


class GoesDown(HashingEmbedder):
    """Embeds documents until ``down`` is set, then is unavailable."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        if self.down:
            raise EmbeddingUnavailable("endpoint down")
        return super().embed_documents(texts)


async def test_a_turn_leaves_the_index_when_its_turn_before_is_forgotten_even_unembedded(
    tmp_path: Path,
) -> None:
    embedder = GoesDown()
    settings = dataclasses.replace(hashing_config(tmp_path), embedder=embedder, root=tmp_path)
    async with await MemoryManager.open("v@x", settings) as memory:
        secret, reply = await memory.store_many(
            [
                {"content": "My locker code is 4711.", "source_conversation": "c1"},
                {"content": "Noted, thanks.", "source_conversation": "c1"},
            ]
        )
        await memory.flush()
        assert await index_ids(memory) == {secret.id, reply.id}
        embedder.down = True
        await memory.forget(secret.id)
        await memory.flush()  # returns once an attempt found the embedder down
        assert memory.indexer is not None and memory.indexer.unavailable is not None
        # the reply's vector held the forgotten turn: it is searched no more
        assert await index_ids(memory) == set()
        assert await stored_ids(memory) == set()
        embedder.down = False
    async with await MemoryManager.open("v@x", settings) as memory:
        await memory.flush()
        assert await index_ids(memory) == {reply.id}


# -- embedding on close ------------------------------------------------------------


class Slow(HashingEmbedder):
    """The hashing embedder, taking ``seconds`` over each batch of documents."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        time.sleep(self.seconds)
        return super().embed_documents(texts)


class Silent(AsyncHashing):
    """An endpoint that takes requests and never answers."""

    async def aembed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        await asyncio.Event().wait()
        raise AssertionError("never answered")


def embedded_rows(root: Path) -> int:
    with sqlite3.connect(next(root.glob("*_base_memory.db"))) as conn:
        return int(conn.execute("SELECT count(*) FROM embeddings").fetchone()[0])


async def test_close_embeds_what_was_stored_a_moment_ago(tmp_path: Path) -> None:
    settings = dataclasses.replace(hashing_config(tmp_path), embedder=Slow(0.8))
    async with await MemoryManager.open("v@x", settings) as memory:
        await memory.store_many([{"content": f"stored and closed {i}"} for i in range(3)])
    assert embedded_rows(tmp_path) == 3  # a short program leaves them searchable by meaning


async def test_close_gives_up_on_an_embedder_that_does_not_answer(tmp_path: Path) -> None:
    settings = dataclasses.replace(
        hashing_config(tmp_path, embed_on_close_seconds=0.3), embedder=Silent()
    )
    memory = await MemoryManager.open("v@x", settings)
    stored = await memory.store("stored while the endpoint hangs")
    started = time.monotonic()
    await memory.aclose()
    assert time.monotonic() - started < 2.0  # the bound, not the endpoint, ends it
    assert embedded_rows(tmp_path) == 0
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)) as memory:
        await memory.flush()  # embedded after the next open
        assert await stored_ids(memory) == {stored.id}


async def test_close_does_not_wait_for_an_unavailable_embedder(tmp_path: Path) -> None:
    embedder = GoesDown()
    embedder.down = True
    settings = dataclasses.replace(
        hashing_config(tmp_path, embed_on_close_seconds=60), embedder=embedder
    )
    memory = await MemoryManager.open("v@x", settings)
    await memory.store("stored while the endpoint is down")
    started = time.monotonic()
    await memory.aclose()
    assert time.monotonic() - started < 5.0
    assert embedded_rows(tmp_path) == 0


async def test_a_memory_opened_to_look_embeds_nothing_on_close(tmp_path: Path) -> None:
    quick = hashing_config(tmp_path, embed_on_close_seconds=0)
    async with await MemoryManager.open("v@x", quick) as memory:
        await memory.store("left without its vector")
    db = next(tmp_path.glob("*_base_memory.db"))
    with sqlite3.connect(db) as conn:  # as if the program had been killed before
        conn.execute("DELETE FROM embeddings")
    look = dataclasses.replace(
        hashing_config(tmp_path),
        maintenance=MaintenanceConfig(check_on_open=False, embed_on_open=False),
    )
    async with await MemoryManager.open("v@x", look) as memory:
        assert await memory.search("left vector", record_access=False)
    assert embedded_rows(tmp_path) == 0


async def test_a_memory_names_its_embedder_before_its_first_vector(tmp_path: Path) -> None:
    async with await MemoryManager.open("v@x", hashing_config(tmp_path)):
        pass  # nothing stored, so nothing embedded
    database = next(tmp_path.glob("*_base_memory.db"))
    assert BaseMemoryStore.fingerprint_in_file(database) == HashingEmbedder().fingerprint
