"""The FAISS cache follows SQLite: snapshots, catch-up, rebuilds, re-embedding."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
import threading
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


async def test_a_batch_the_embedder_failed_on_once_is_embedded_in_the_same_session(
    tmp_path: Path,
) -> None:
    embedder = FailsOnce()
    settings = dataclasses.replace(
        hashing_config(tmp_path, embed_batch_size=8), embedder=embedder, root=tmp_path
    )
    async with await MemoryManager.open("v@x", settings) as memory:
        first = await memory.store_many([{"content": f"early fact {i}"} for i in range(8)])
        await memory.flush()
        assert embedder.failed
        # the failed batch was embedded again in halves, in the same pass
        assert {m.id for m in first} <= await stored_ids(memory) == await index_ids(memory)
        later = await memory.store_many([{"content": f"later fact {i}"} for i in range(5)])
        await memory.flush()
        assert {m.id for m in [*first, *later]} == await stored_ids(memory)


class Refusing(HashingEmbedder):
    """Raises on any batch holding a text with ``refused`` in it; records its calls."""

    def __init__(self, refused: str = "POISON") -> None:
        super().__init__()
        self.refused = refused
        self.calls: list[list[str]] = []

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        self.calls.append(list(texts))
        if any(self.refused in text for text in texts):
            raise RuntimeError("cannot embed this text")
        return super().embed_documents(texts)

    def alone(self) -> int:
        """How many calls asked for the refused text alone."""
        return sum(1 for call in self.calls if len(call) == 1 and self.refused in call[0])


async def test_a_text_the_embedder_refuses_leaves_the_rest_of_its_batch_embedded(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(indexer_module, "RETRY_FIRST_SECONDS", 60.0)  # not tried again here
    embedder = Refusing()
    settings = dataclasses.replace(hashing_config(embed_batch_size=32), embedder=embedder)
    async with await MemoryManager.open("v@x", settings) as memory:
        *good, poison = await memory.store_many(
            [{"content": f"good fact number {i}"} for i in range(9)]
            + [{"content": "POISON text the embedder refuses"}]
        )
        await memory.flush()
        assert await stored_ids(memory) == {m.id for m in good} == await index_ids(memory)
        stats = await memory.stats()
        assert (stats.embedded, stats.pending_embeddings) == (9, 1)
        assert len(embedder.calls) <= 2 * 10 - 1  # halves down to the refused text
    refusals = [r for r in caplog.records if "not embedded" in r.getMessage()]
    assert len(refusals) == 1 and f"(id {poison.id})" in refusals[0].getMessage()
    assert "RuntimeError: cannot embed this text" in refusals[0].getMessage()


async def test_a_refused_text_is_tried_again_with_backoff_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(indexer_module, "RETRY_FIRST_SECONDS", 0.01)
    monkeypatch.setattr(indexer_module, "RETRY_MAX_SECONDS", 0.02)
    monkeypatch.setattr(indexer_module, "REFUSED_ATTEMPTS", 4)
    embedder = Refusing()
    settings = dataclasses.replace(hashing_config(), embedder=embedder)
    async with await MemoryManager.open("v@x", settings) as memory:
        await memory.store("POISON text the embedder refuses")
        await memory.flush()
        for _ in range(1000):
            if embedder.alone() >= 4:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # long past the next attempt, were there one
        assert embedder.alone() == 4
        assert (await memory.stats()).pending_embeddings == 1
    assert len([r for r in caplog.records if "not embedded" in r.getMessage()]) == 1


async def test_a_memory_refused_once_is_embedded_later_in_the_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(indexer_module, "RETRY_FIRST_SECONDS", 0.05)
    embedder = FailsOnce()
    settings = dataclasses.replace(hashing_config(), embedder=embedder)  # in memory
    async with await MemoryManager.open("v@x", settings) as memory:
        stored = await memory.store("The Porto office opens at nine")
        await memory.flush()
        assert embedder.failed
        for _ in range(500):
            if await index_ids(memory):
                break
            await asyncio.sleep(0.01)
        assert await stored_ids(memory) == {stored.id} == await index_ids(memory)


async def test_a_refused_memory_is_embedded_at_once_when_it_changes() -> None:
    embedder = Refusing()
    settings = dataclasses.replace(hashing_config(), embedder=embedder)
    async with await MemoryManager.open("v@x", settings) as memory:
        stored = await memory.store("POISON text the embedder refuses")
        await memory.flush()
        assert await stored_ids(memory) == set()
        await memory.update(stored.id, content="The Lisbon office opens at ten")
        await memory.flush()  # not waiting for the retry: the memory is another text now
        assert await stored_ids(memory) == {stored.id} == await index_ids(memory)


# Carol's graph entry reads "Carol lives in Paris. Carol; Paris": the embedder
# refuses it, while every memory's own text (and every other entry) is embedded.
CAROL = "Carol moved to Paris."
ENTRY_REFUSED = "Carol; "
OTHERS = [f"{name} lives in Oslo." for name in ("Alice", "Bob", "Dave", "Erin", "Frank")]


async def graph_vector_ids(memory: MemoryManager) -> set[int]:
    rows = await memory.base_store.fetchall("SELECT memory_id FROM graph_embeddings")
    return {int(row[0]) for row in rows}


async def test_a_graph_entry_the_embedder_refuses_leaves_the_rest_of_its_batch_embedded(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(indexer_module, "RETRY_FIRST_SECONDS", 60.0)  # not tried again here
    embedder = Refusing(ENTRY_REFUSED)
    settings = dataclasses.replace(hashing_config(embed_batch_size=32), embedder=embedder)
    async with await MemoryManager.open("v@x", settings) as memory:
        *good, carol = await memory.store_many([{"content": text} for text in [*OTHERS, CAROL]])
        await memory.flush()
        assert await stored_ids(memory) == {m.id for m in [*good, carol]}
        assert await graph_vector_ids(memory) == {m.id for m in good}
        assert memory.indexer is not None
        for item in good:  # each entry's vector is in the graph index, under its memory
            (summary,) = await memory.base_store.fetchall(
                "SELECT summary FROM graph_entries WHERE memory_id = ?", (item.id,)
            )
            ids, _ = await memory.indexer.search_graph(embedder.embed_query(summary[0]), 1)
            assert ids.tolist() == [item.id]
        later = await memory.store("Grace lives in Oslo.")  # another pass: no new report
        await memory.flush()
        assert await graph_vector_ids(memory) == {m.id for m in [*good, later]}
    refusals = [r for r in caplog.records if "graph entr" in r.getMessage()]
    assert len(refusals) == 1, [r.getMessage() for r in refusals]
    assert f"(memory id {carol.id})" in refusals[0].getMessage()
    assert "RuntimeError: cannot embed this text" in refusals[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_refused_graph_entry_is_tried_again_with_backoff_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(indexer_module, "RETRY_FIRST_SECONDS", 0.01)
    monkeypatch.setattr(indexer_module, "RETRY_MAX_SECONDS", 0.02)
    monkeypatch.setattr(indexer_module, "REFUSED_ATTEMPTS", 4)
    embedder = Refusing(ENTRY_REFUSED)
    settings = dataclasses.replace(hashing_config(), embedder=embedder)
    async with await MemoryManager.open("v@x", settings) as memory:
        await memory.store(CAROL)
        await memory.flush()
        for _ in range(1000):
            if embedder.alone() >= 4:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # long past the next attempt, were there one
        assert embedder.alone() == 4
        assert await graph_vector_ids(memory) == set()


async def test_a_graph_entry_refused_once_is_embedded_later_in_the_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(indexer_module, "RETRY_FIRST_SECONDS", 0.05)
    embedder = Refusing(ENTRY_REFUSED)
    settings = dataclasses.replace(hashing_config(), embedder=embedder)
    async with await MemoryManager.open("v@x", settings) as memory:
        carol = await memory.store(CAROL)
        await memory.flush()
        assert embedder.alone() >= 1 and await graph_vector_ids(memory) == set()
        embedder.refused = "no text holds this"  # the embedder takes it now
        for _ in range(500):
            if await graph_vector_ids(memory):
                break
            await asyncio.sleep(0.01)
        assert await graph_vector_ids(memory) == {carol.id}


class Misanswering(HashingEmbedder):
    """Answers wrongly while ``fault`` is set: ``"nan"`` for the texts holding
    ``marker``, ``"rows"`` one vector short, ``"dim"`` vectors twice as long."""

    def __init__(self, fault: str | None = None, marker: str = "BADVEC") -> None:
        super().__init__()
        self.fault = fault
        self.marker = marker

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        vectors = super().embed_documents(texts)
        if self.fault == "nan":
            vectors[[self.marker in text for text in texts]] = np.nan
        elif self.fault == "rows":
            return vectors[:-1]
        elif self.fault == "dim":
            return np.hstack([vectors, vectors]) / np.sqrt(2)
        return vectors


async def test_a_vector_with_nan_is_refused_and_flush_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    embedder = Misanswering("nan")
    settings = dataclasses.replace(hashing_config(), embedder=embedder)
    async with await MemoryManager.open("v@x", settings) as memory:
        bad = await memory.store("BADVEC a memory whose vector comes back NaN")
        good = await memory.store("a perfectly normal memory about the Porto office")
        await asyncio.wait_for(memory.flush(), 10)
        assert await stored_ids(memory) == {good.id} == await index_ids(memory)
        assert memory.indexer is not None and memory.indexer.stopped_by is None
    (refusal,) = [r for r in caplog.records if "not embedded" in r.getMessage()]
    message = refusal.getMessage()
    assert f"(id {bad.id})" in message and "NaN or infinite values" in message
    assert f"the embedder Misanswering ({embedder.fingerprint})" in message


async def test_an_answer_missing_a_vector_does_not_stop_the_embedding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(indexer_module, "RETRY_FIRST_SECONDS", 0.05)
    embedder = Misanswering("rows")
    settings = dataclasses.replace(hashing_config(), embedder=embedder)
    async with await MemoryManager.open("v@x", settings) as memory:
        first = await memory.store("first memory")
        await asyncio.wait_for(memory.flush(), 10)
        assert await stored_ids(memory) == set()
        embedder.fault = None
        second = await memory.store("second memory, the embedder is fine now")
        await asyncio.wait_for(memory.flush(), 10)
        assert memory.indexer is not None and memory.indexer.stopped_by is None
        assert second.id in await stored_ids(memory)
        for _ in range(500):  # the refused one is tried again, and answered right now
            if first.id in await index_ids(memory):
                break
            await asyncio.sleep(0.01)
        assert await stored_ids(memory) == {first.id, second.id} == await index_ids(memory)


async def test_vectors_of_another_length_are_never_stored(tmp_path: Path) -> None:
    settings = dataclasses.replace(
        hashing_config(tmp_path), embedder=Misanswering("dim"), root=tmp_path
    )
    async with await MemoryManager.open("v@x", settings) as memory:
        stored = await memory.store("The Porto office opens at nine")
        await asyncio.wait_for(memory.flush(), 10)
        assert await memory.base_store.vector_counts() == {}
        assert memory.indexer is not None and memory.indexer.stopped_by is None
    healthy = dataclasses.replace(settings, embedder=Misanswering())  # same fingerprint
    async with await MemoryManager.open("v@x", healthy) as memory:
        await memory.flush()
        assert await stored_ids(memory) == {stored.id} == await index_ids(memory)
        assert (await memory.search("Porto office"))[0].memory.id == stored.id


class Gated(HashingEmbedder):
    """Holds each batch of documents with a text holding ``holding`` (every batch by
    default) until ``gate`` is set; ``started`` once one waits."""

    def __init__(self, holding: str = "") -> None:
        super().__init__()
        self.holding = holding
        self.gate = threading.Event()
        self.started = threading.Event()

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        if any(self.holding in text for text in texts):
            self.started.set()
            assert self.gate.wait(30)
        return super().embed_documents(texts)


async def test_an_update_at_the_same_clock_reading_during_embedding_keeps_the_new_vector() -> None:
    embedder = Gated()
    settings = dataclasses.replace(hashing_config(), embedder=embedder)
    clock = lambda: 1_700_000_000.0  # noqa: E731  (a coarse clock: one reading for both)
    async with await MemoryManager.open("v@x", settings, clock=clock) as memory:
        stored = await memory.store("zebras giraffes savanna safari")
        assert await asyncio.to_thread(embedder.started.wait, 10)  # the old text is embedding
        updated = await memory.update(stored.id, content="quantum chromodynamics lecture notes")
        assert updated.updated_at == stored.updated_at
        embedder.gate.set()
        await memory.flush()
        new = embedder.embed_query("quantum chromodynamics lecture notes")
        vectors = await memory.base_store.vectors_for(
            embedder.fingerprint, embedder.dim, [stored.id]
        )
        assert float(vectors[stored.id] @ new) == pytest.approx(1.0, abs=1e-5)
        assert memory.indexer is not None
        ids, scores = await memory.indexer.search(new, 1)
        assert ids.tolist() == [stored.id] and scores[0] == pytest.approx(1.0, abs=1e-5)


async def test_a_graph_entry_rewritten_at_the_same_clock_reading_keeps_the_new_vector() -> None:
    embedder = Gated(holding="Erin; Oslo")  # only the first graph entry's summary waits
    settings = dataclasses.replace(hashing_config(derive_in_background=False), embedder=embedder)
    clock = lambda: 1_700_000_000.0  # noqa: E731  (a coarse clock: one reading for both)
    async with await MemoryManager.open("v@x", settings, clock=clock) as memory:
        stored = await memory.store("Erin lives in Oslo.")
        assert await asyncio.to_thread(embedder.started.wait, 10)  # the old entry is embedding
        await memory.update(stored.id, content="Frank lives in Rome.")
        ((summary, updated_at),) = await memory.base_store.fetchall(
            "SELECT summary, updated_at FROM graph_entries WHERE memory_id = ?", (stored.id,)
        )
        assert "Frank; Rome" in summary and updated_at == stored.updated_at
        embedder.gate.set()
        await memory.flush()
        new = embedder.embed_query(summary)
        ((blob,),) = await memory.base_store.fetchall(
            "SELECT vector FROM graph_embeddings WHERE memory_id = ?", (stored.id,)
        )
        vector = np.frombuffer(blob, dtype=np.float32)
        assert float(vector @ new) == pytest.approx(1.0, abs=1e-5)
        assert memory.indexer is not None
        ids, scores = await memory.indexer.search_graph(new, 1)
        assert ids.tolist() == [stored.id] and scores[0] == pytest.approx(1.0, abs=1e-5)


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
