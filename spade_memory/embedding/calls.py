"""Calling any embedder from async code: on the event loop when it can, else in a thread.

A blocking embedder's calls run in two thread pools of their own, one for queries and
one for stored texts, not in the event loop's default pool: a search's query never
queues behind the document batches of every agent in the process, nor do those
batches take the default pool's threads from the rest of the work (SQLite reads,
extraction). The document threads run at a lower scheduling priority (where the
system has one): a query embedded beside a batch gets the cores first, and the batch
keeps them all while no query runs.

Queries also go first in time: a blocking embedder's document batch is embedded in
sub-batches of :data:`DOCUMENT_SUB_BATCH` texts, and before each one it waits while any
query embedding is queued or running in the process (at most :data:`DOCUMENT_HOLD`
seconds per sub-batch, so documents are never held back for good while searches
follow each other). A query thus shares the cores with at most the one sub-batch
already in the engine, not with the rest of the batch. A batch whose caller stopped
waiting (a memory closing) stops before its next sub-batch.

Every answer to a document batch is checked before it is returned
(:func:`embed_documents`): one row per text, each of the embedder's ``dim`` and
finite. An answer that is not is refused with
:class:`~spade_memory.errors.EmbeddingError` naming the embedder and what was wrong,
so that no caller stores, indexes or compares a vector the embedder got wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from ..errors import EmbeddingError
from ..in_flight import InFlight
from ..models import AsyncEmbedder, Embedder

__all__ = [
    "DOCUMENT_HOLD",
    "DOCUMENT_NICENESS",
    "DOCUMENT_SUB_BATCH",
    "checked_documents",
    "embed_documents",
    "embed_query",
    "embedder_name",
    "is_async_embedder",
    "prepare",
    "query_gate",
]

_ASYNC_METHODS = ("prepare", "aembed_documents", "aembed_query")
#: Threads for query embeddings: a few searches at once, each one short; no more than
#: the cores, since a local engine's call already spreads over them all, and more
#: calls at once only take turns on the cores (five searchers on two cores: p95
#: 364-403 ms with one or two threads, 481-623 ms with four; BENCHMARKS.md).
_QUERY_THREADS = max(1, min(4, os.cpu_count() or 1))
#: Threads for document batches: each batch is long, and a local engine runs one at a time.
_DOCUMENT_THREADS = 2

#: How much nicer than the rest of the process the document threads run (Unix).
DOCUMENT_NICENESS = 10
#: Texts per engine call of a document batch: a query waits for at most one of them.
DOCUMENT_SUB_BATCH = 8
#: The longest a document sub-batch waits for the queries in flight, in seconds.
DOCUMENT_HOLD = 1.0

_T = TypeVar("_T")
_POOLS_LOCK = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}


_GATE = InFlight()


def query_gate() -> InFlight:
    """The query embeddings of blocking embedders queued or running in the process;
    document work waits while any is."""
    return _GATE


class _Abandoned(Exception):
    """The caller of a document batch stopped waiting for it."""


def _yield_to_queries() -> None:
    """Lower the calling thread's priority, and that of the threads it starts (an
    engine's own worker threads included); nothing where threads have no niceness."""
    setpriority = getattr(os, "setpriority", None)
    if setpriority is None:
        return
    thread = threading.get_native_id()
    with contextlib.suppress(OSError):  # not allowed: the batches keep the usual priority
        niceness = os.getpriority(os.PRIO_PROCESS, thread) + DOCUMENT_NICENESS
        setpriority(os.PRIO_PROCESS, thread, niceness)


def _forget_pools() -> None:
    """In a forked child: the parent's pools have no threads here; make new ones."""
    global _POOLS_LOCK
    _POOLS_LOCK = threading.Lock()
    _pools.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def _pool(kind: str, threads: int, *, nicer: bool = False) -> ThreadPoolExecutor:
    """The process-wide pool of ``kind`` (created on first use)."""
    with _POOLS_LOCK:
        pool = _pools.get(kind)
        if pool is None:
            pool = ThreadPoolExecutor(
                threads,
                thread_name_prefix=f"spade-memory-{kind}",
                initializer=_yield_to_queries if nicer else None,
            )
            _pools[kind] = pool
        return pool


async def _in_pool(pool: ThreadPoolExecutor, call: Callable[[], _T]) -> _T:
    return await asyncio.get_running_loop().run_in_executor(pool, call)


def is_async_embedder(embedder: object) -> bool:
    """Whether ``embedder`` has the methods of an
    :class:`~spade_memory.models.AsyncEmbedder`, looked up without reading its
    properties (its ``dim`` may not be known before :func:`prepare`)."""
    missing = object()
    return all(callable(inspect.getattr_static(embedder, name, missing)) for name in _ASYNC_METHODS)


async def prepare(embedder: Embedder, stored_fingerprints: Collection[str]) -> None:
    """Let an :class:`~spade_memory.models.AsyncEmbedder` learn its dimension (others
    need nothing)."""
    if is_async_embedder(embedder):
        await cast(AsyncEmbedder, embedder).prepare(stored_fingerprints)


async def embed_documents(
    embedder: Embedder, texts: Sequence[str], *, behind_queries: bool = True
) -> NDArray[np.float32]:
    """``embedder``'s vectors of stored ``texts``, without blocking the event loop.

    With ``behind_queries`` (stored texts, embedded in the background) each
    sub-batch waits for the query embeddings in flight; without (texts a search
    itself waits for) they are embedded at once, in the query threads.

    Returns:
        A C-contiguous ``float32`` array of ``len(texts)`` rows of ``embedder.dim``
        finite values (:func:`checked_documents`).

    Raises:
        EmbeddingError: the embedder's answer is not that (the message says how).
        EmbeddingUnavailable: raised by the embedder (it did not answer).
    """
    texts = list(texts)
    if is_async_embedder(embedder):
        answer = await cast(AsyncEmbedder, embedder).aembed_documents(texts)
    elif not behind_queries:
        with _GATE.counting():  # as a query: document batches wait for these too
            answer = await _in_pool(
                _pool("query", _QUERY_THREADS), lambda: embedder.embed_documents(texts)
            )
    else:
        pool = _pool("embed", _DOCUMENT_THREADS, nicer=True)
        gate = _GATE
        abandoned = threading.Event()
        try:
            answer = await _in_pool(pool, lambda: _behind_queries(embedder, texts, gate, abandoned))
        finally:
            abandoned.set()  # cancelled: the thread stops before its next sub-batch
    return checked_documents(embedder, len(texts), answer)


def embedder_name(embedder: Embedder) -> str:
    """The embedder as an error names it: its class and fingerprint."""
    try:
        fingerprint = str(embedder.fingerprint)
    except Exception:  # a broken property: the class alone
        return type(embedder).__name__
    return f"{type(embedder).__name__} ({fingerprint})"


def checked_documents(embedder: Embedder, count: int, answer: object) -> NDArray[np.float32]:
    """``embedder``'s answer to ``count`` texts, as a contiguous ``float32`` array,
    once it is found to hold one row of ``embedder.dim`` finite values per text.

    Raises:
        EmbeddingError: it does not (not numbers, another number of rows, another
            length, a NaN or an infinity), naming the embedder and the fault.
    """
    name = embedder_name(embedder)
    try:
        matrix = np.ascontiguousarray(answer, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(
            f"the embedder {name} answered {type(answer).__name__}, not a matrix of numbers ({exc})"
        ) from None
    dim = int(embedder.dim)
    if count == 0 and matrix.size == 0:
        return np.zeros((0, dim), dtype=np.float32)
    if matrix.ndim != 2:
        raise EmbeddingError(
            f"the embedder {name} answered an array of shape {matrix.shape} for {count} "
            f"texts; expected ({count}, {dim})"
        )
    if matrix.shape[0] != count:
        raise EmbeddingError(
            f"the embedder {name} answered {matrix.shape[0]} vectors for {count} texts"
        )
    if matrix.shape[1] != dim:
        raise EmbeddingError(
            f"the embedder {name} answered vectors of length {matrix.shape[1]}; it "
            f"declares dim {dim}"
        )
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise EmbeddingError(
            f"the embedder {name} answered NaN or infinite values for {len(bad)} of "
            f"{count} texts (row {int(bad[0])} first)"
        )
    return matrix


def _behind_queries(
    embedder: Embedder, texts: list[str], gate: InFlight, abandoned: threading.Event
) -> NDArray[np.float32]:
    """``embedder.embed_documents(texts)`` in sub-batches, each one started when no
    query is in flight (or after waiting :data:`DOCUMENT_HOLD` seconds for them)."""
    parts = []
    for start in range(0, max(len(texts), 1), DOCUMENT_SUB_BATCH):
        gate.wait_clear(DOCUMENT_HOLD, abandoned)
        if abandoned.is_set():
            raise _Abandoned
        part = texts[start : start + DOCUMENT_SUB_BATCH]
        parts.append(checked_documents(embedder, len(part), embedder.embed_documents(part)))
    if len(parts) == 1:
        return parts[0]  # the embedder's own array, as when called directly
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


async def embed_query(embedder: Embedder, text: str) -> NDArray[np.float32]:
    """``embedder``'s vector of a query, without blocking the event loop; document
    batches hold back their next sub-batch until it is embedded."""
    if is_async_embedder(embedder):
        return await cast(AsyncEmbedder, embedder).aembed_query(text)
    with _GATE.counting():
        return await _in_pool(_pool("query", _QUERY_THREADS), lambda: embedder.embed_query(text))
