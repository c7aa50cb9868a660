"""Calling any embedder from async code: on the event loop when it can, else in a thread.

A blocking embedder's calls run in two thread pools of their own, one for queries and
one for stored texts, not in the event loop's default pool: a search's query never
queues behind the document batches of every agent in the process, nor do those
batches take the default pool's threads from the rest of the work (SQLite reads,
extraction). The document threads run at a lower scheduling priority (where the
system has one): a query embedded beside a batch gets the cores first, and the batch
keeps them all while no query runs.
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

from ..models import AsyncEmbedder, Embedder

__all__ = ["embed_documents", "embed_query", "is_async_embedder", "prepare"]

_ASYNC_METHODS = ("prepare", "aembed_documents", "aembed_query")
#: Threads for query embeddings: a few searches at once, each one short.
_QUERY_THREADS = 4
#: Threads for document batches: each batch is long, and a local engine runs one at a time.
_DOCUMENT_THREADS = 2

#: How much nicer than the rest of the process the document threads run (Unix).
_DOCUMENT_NICENESS = 10

_T = TypeVar("_T")
_POOLS_LOCK = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}


def _yield_to_queries() -> None:
    """Lower the calling thread's priority, and that of the threads it starts (an
    engine's own worker threads included); nothing where threads have no niceness."""
    setpriority = getattr(os, "setpriority", None)
    if setpriority is None:
        return
    thread = threading.get_native_id()
    with contextlib.suppress(OSError):  # not allowed: the batches keep the usual priority
        niceness = os.getpriority(os.PRIO_PROCESS, thread) + _DOCUMENT_NICENESS
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


async def embed_documents(embedder: Embedder, texts: Sequence[str]) -> NDArray[np.float32]:
    """``embedder``'s vectors of stored ``texts``, without blocking the event loop."""
    if is_async_embedder(embedder):
        return await cast(AsyncEmbedder, embedder).aembed_documents(texts)
    pool = _pool("embed", _DOCUMENT_THREADS, nicer=True)
    return await _in_pool(pool, lambda: embedder.embed_documents(texts))


async def embed_query(embedder: Embedder, text: str) -> NDArray[np.float32]:
    """``embedder``'s vector of a query, without blocking the event loop."""
    if is_async_embedder(embedder):
        return await cast(AsyncEmbedder, embedder).aembed_query(text)
    return await _in_pool(_pool("query", _QUERY_THREADS), lambda: embedder.embed_query(text))
