"""Calling any embedder from async code: on the event loop when it can, else in a thread."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Collection, Sequence
from typing import cast

import numpy as np
from numpy.typing import NDArray

from ..models import AsyncEmbedder, Embedder

__all__ = ["embed_documents", "embed_query", "is_async_embedder", "prepare"]

_ASYNC_METHODS = ("prepare", "aembed_documents", "aembed_query")


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
    return await asyncio.to_thread(embedder.embed_documents, texts)


async def embed_query(embedder: Embedder, text: str) -> NDArray[np.float32]:
    """``embedder``'s vector of a query, without blocking the event loop."""
    if is_async_embedder(embedder):
        return await cast(AsyncEmbedder, embedder).aembed_query(text)
    return await asyncio.to_thread(embedder.embed_query, text)
