"""An embedder that needs no model: signed feature hashing of terms and trigrams.

Deterministic and fast; texts that share words are similar, but it knows no
synonyms. The embedder for tests, and for a memory that must start at once.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from ..text.tokenizer import get_tokenizer
from .fingerprints import HASHING_DIM, HASHING_TRIGRAM_WEIGHT, hashing_fingerprint
from .vectors import normalise_rows

__all__ = ["HashingEmbedder", "shared_hashing"]


_WORD_WEIGHT = 1.0
_TRIGRAM_WEIGHT = HASHING_TRIGRAM_WEIGHT
_EMPTY_FEATURE = "\x00empty"


@lru_cache(maxsize=1 << 17)
def _feature_hash(feature: str) -> int:
    """A stable 64-bit hash of a feature (never Python's salted ``hash``)."""
    digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class HashingEmbedder:
    """Signed feature hashing of terms and character trigrams; no model needed.

    Each term of the shared tokenizer and each character trigram of a term
    (padded, ``"<na"``, ``"nam"``, ``"am>"``) adds ``+w`` or ``-w`` to one of ``dim``
    slots chosen by a BLAKE2b hash. Queries and documents embed alike.

    Args:
        dim: vector length; more slots, fewer collisions.

    Raises:
        ConfigError: ``dim`` is not an integer in [8, 65536].
    """

    def __init__(self, dim: int = HASHING_DIM) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool) or not 8 <= dim <= 65536:
            raise ConfigError(f"HashingEmbedder dim must be an integer in [8, 65536], got {dim!r}")
        self._dim = dim
        self._tokenizer = get_tokenizer()

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def fingerprint(self) -> str:
        return hashing_fingerprint(self._dim)

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            self._accumulate(text, out[row])
        return normalise_rows(out)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.embed_documents([text]).reshape(-1)

    def _accumulate(self, text: str, row: NDArray[np.float32]) -> None:
        dim = self._dim
        weights: dict[int, float] = {}

        def add(feature: str, weight: float) -> None:
            h = _feature_hash(feature)
            slot = h % dim
            signed = weight if (h >> 63) & 1 else -weight
            weights[slot] = weights.get(slot, 0.0) + signed

        for term in self._tokenizer.tokenize(text):
            add("w:" + term, _WORD_WEIGHT)
            padded = f"<{term}>"
            for i in range(len(padded) - 2):
                add("c:" + padded[i : i + 3], _TRIGRAM_WEIGHT)
        if not weights or not any(weights.values()):
            add(_EMPTY_FEATURE, 1.0)
        for slot, weight in weights.items():
            row[slot] = weight


_HASHING_LOCK = threading.Lock()
_hashing: HashingEmbedder | None = None


def shared_hashing() -> HashingEmbedder:
    """The process-wide ``HashingEmbedder()`` (256 dimensions)."""
    global _hashing
    with _HASHING_LOCK:
        if _hashing is None:
            _hashing = HashingEmbedder()
        return _hashing
