"""The FAISS index of one agent's memory vectors, and its snapshot file.

SQLite holds every vector; this index is a cache of them for fast similarity
search, keyed by the memories' SQLite rowids inside FAISS (``IndexIDMap2``), so no
position map lives beside it. The snapshot on disk is only a shortcut for the next
start: written atomically, stamped with a generation, the change sequence it
covers and the embedder's fingerprint, and checked with CRC32 on load. A snapshot
that fails any check is moved aside and ``None`` is returned, so the caller
rebuilds from SQLite.

Two kinds of index:

- ``"flat"`` (default): exact inner-product search over every vector.
- ``"hnsw"``: approximate (HNSW graph, ``M=32``), faster on large memories. HNSW
  cannot delete in place: removed ids are hidden from searches and the graph is
  rebuilt once they exceed a fifth of it; replacing a vector rebuilds it at once.

Every method is thread-safe: searches may run in worker threads while vectors
are added from the event loop.
"""

from __future__ import annotations

import logging
import struct
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ConfigError, StorageError
from .files import atomic_write_bytes, quarantine, remove_stale_temps

__all__ = ["TIE_DECIMALS", "IndexKind", "SnapshotInfo", "VectorIndex"]

logger = logging.getLogger(__name__)


class _OnFirstUse:
    """faiss, imported when an index is first made or read: a program that opens a
    memory only to read its rows (``spade-memory show``) does not load it."""

    def __getattr__(self, name: str) -> Any:
        import faiss as module

        return getattr(module, name)


# faiss's bundled type hints miss most of its Python API (keyword constructors of
# the search parameters, HNSW attributes, downcasting), so it is used untyped.
faiss: Any = _OnFirstUse()

IndexKind = Literal["flat", "hnsw"]

_MAGIC = b"SMVECIDX"
_FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sII")  # magic, header length, header CRC32
_HEADER = struct.Struct("<HBxqqIQQIH")  # version, kind, generation, seq, dim, count,
# payload length, payload CRC32, fingerprint length; the fingerprint follows
_KINDS: dict[int, IndexKind] = {0: "flat", 1: "hnsw"}
_KIND_CODES = {name: code for code, name in _KINDS.items()}
_MAX_HEADER = 1 << 16

_HNSW_M = 32
_REBUILD_FRACTION = 0.2
_EXACT_LIMIT = 2048


#: Scores equal to this many decimals are one score (in this index's order and in
#: the retriever's fusion): the last bits of float32 arithmetic differ between builds
#: of FAISS and BLAS (a 0 is 1.7e-10 in another), and so would the order of ties.
TIE_DECIMALS = 6


def _in_order(
    ids: NDArray[np.int64], scores: NDArray[np.float32]
) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """``ids`` and their ``scores``, best first; scores equal to :data:`TIE_DECIMALS`
    decimals in id order, so that every build ranks them alike."""
    order = np.lexsort((ids, -np.round(scores.astype(np.float64), TIE_DECIMALS)))
    return ids[order], scores[order]


def _nothing() -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)


@dataclass(frozen=True)
class SnapshotInfo:
    """What a snapshot file says about itself."""

    generation: int
    seq: int
    fingerprint: str
    dim: int
    count: int


class _Damaged(Exception):
    """A snapshot failed a check; the message says which."""


class VectorIndex:
    """Inner-product search over vectors keyed by int64 ids.

    Args:
        dim: vector length.
        kind: ``"flat"`` (exact) or ``"hnsw"`` (approximate).
        ef_search: HNSW only: candidates examined per search (raised to ``k``).
        ef_construction: HNSW only: candidates examined per insertion.

    Raises:
        ConfigError: an argument is out of range.
    """

    def __init__(
        self,
        dim: int,
        *,
        kind: IndexKind = "flat",
        ef_search: int = 64,
        ef_construction: int = 80,
    ) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise ConfigError(f"vector dim must be a positive integer, got {dim!r}")
        if kind not in _KIND_CODES:
            raise ConfigError(f"vector index kind must be 'flat' or 'hnsw', got {kind!r}")
        for name, value in (("ef_search", ef_search), ("ef_construction", ef_construction)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        self._dim = dim
        self._kind: IndexKind = kind
        self._ef_search = ef_search
        self._ef_construction = ef_construction
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._deleted: set[int] = set()
        self._index: Any = self._new_index()
        # No id above this was ever added: an id above it is not stored, which
        # spares new memories' ids (SQLite rowids grow) a scan of every stored id.
        self._top = -1

    def _new_index(self) -> Any:
        if self._kind == "flat":
            inner = faiss.IndexFlatIP(self._dim)
        else:
            inner = faiss.IndexHNSWFlat(self._dim, _HNSW_M, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = self._ef_construction
            inner.hnsw.efSearch = self._ef_search
        return faiss.IndexIDMap2(inner)  # keeps a reference to ``inner``

    # -- inspection ------------------------------------------------------------

    @property
    def dim(self) -> int:
        """Vector length."""
        return self._dim

    @property
    def kind(self) -> IndexKind:
        """``"flat"`` or ``"hnsw"``."""
        return self._kind

    @property
    def ntotal(self) -> int:
        """How many ids the index holds."""
        with self._lock:
            return int(self._index.ntotal) - len(self._deleted)

    def ids(self) -> NDArray[np.int64]:
        """Every id present, in no particular order."""
        with self._lock:
            return self._live_ids()

    def _stored_ids(self) -> NDArray[np.int64]:
        return np.asarray(faiss.vector_to_array(self._index.id_map), dtype=np.int64)

    def _stored_among(self, keys: NDArray[np.int64]) -> NDArray[np.int64]:
        """The ``keys`` the index holds (deleted HNSW ids included); no scan of the
        stored ids when every key is above the highest ever added."""
        keys = keys[keys <= self._top]
        if not keys.size:
            return keys
        return keys[np.isin(keys, self._stored_ids())]

    def _deleted_array(self) -> NDArray[np.int64]:
        return np.fromiter(self._deleted, dtype=np.int64, count=len(self._deleted))

    def _live_ids(self) -> NDArray[np.int64]:
        stored = self._stored_ids()
        if self._deleted:
            stored = stored[~np.isin(stored, self._deleted_array())]
        return stored

    # -- changes -------------------------------------------------------------------

    def add(self, ids: ArrayLike, vectors: ArrayLike) -> None:
        """Add vectors, replacing any vector already stored under the same id.

        Args:
            ids: ``n`` non-negative int64 ids (SQLite rowids); if one repeats, its
                last vector wins.
            vectors: an ``(n, dim)`` array of finite numbers (stored as float32).

        Raises:
            ValueError: shapes do not match, an id is negative, or a value is not finite.
        """
        keys = np.asarray(ids)
        matrix = np.asarray(vectors, dtype=np.float32)
        if keys.ndim != 1 or (keys.size and not np.issubdtype(keys.dtype, np.integer)):
            raise ValueError("ids must be a one-dimensional array of integers")
        keys = keys.astype(np.int64, copy=False)
        if matrix.ndim != 2 or matrix.shape != (keys.size, self._dim):
            raise ValueError(
                f"vectors must have shape ({keys.size}, {self._dim}) to match the ids, "
                f"got {matrix.shape}"
            )
        if keys.size == 0:
            return
        if (keys < 0).any():
            raise ValueError("ids must be >= 0 (SQLite rowids)")
        if not np.isfinite(matrix).all():
            raise ValueError("vectors contain NaN or infinite values")
        _, last = np.unique(keys[::-1], return_index=True)
        if last.size != keys.size:  # keep the last vector of each repeated id
            keep = np.sort(keys.size - 1 - last)
            keys, matrix = keys[keep], matrix[keep]
        matrix = np.ascontiguousarray(matrix)
        keys = np.ascontiguousarray(keys)
        with self._lock:
            clash = self._stored_among(keys)
            if clash.size and self._kind == "hnsw":
                self._rebuild(drop=clash)
            elif clash.size:
                self._index.remove_ids(faiss.IDSelectorBatch(clash))
            self._index.add_with_ids(matrix, keys)
            self._top = max(self._top, int(keys.max()))

    def remove(self, ids: Iterable[int]) -> int:
        """Remove ids; unknown ones are ignored.

        Returns:
            How many ids were present and are now gone.
        """
        if isinstance(ids, np.ndarray):
            keys = np.unique(ids.astype(np.int64))
        else:
            keys = np.unique(np.fromiter((int(i) for i in ids), dtype=np.int64))
        if keys.size == 0:
            return 0
        with self._lock:
            present = self._stored_among(keys)
            if self._kind == "flat":
                if not present.size:
                    return 0
                return int(self._index.remove_ids(faiss.IDSelectorBatch(present)))
            fresh = [int(i) for i in present if int(i) not in self._deleted]
            self._deleted.update(fresh)
            if len(self._deleted) > _REBUILD_FRACTION * int(self._index.ntotal):
                self._rebuild()
            return len(fresh)

    def _rebuild(self, drop: NDArray[np.int64] | None = None) -> None:
        """A fresh index of the live vectors, minus ``drop``. Call with the lock held."""
        stored = self._stored_ids()
        hidden = self._deleted_array()
        if drop is not None:
            hidden = np.concatenate([hidden, drop])
        keep = ~np.isin(stored, hidden)
        vectors = faiss.downcast_index(self._index.index).reconstruct_n(0, stored.size)
        index = self._new_index()
        if keep.any():
            index.add_with_ids(np.ascontiguousarray(vectors[keep]), stored[keep])
        self._index = index
        self._deleted.clear()
        logger.debug("HNSW index rebuilt with %d vectors", int(index.ntotal))

    # -- search --------------------------------------------------------------------

    def search(
        self, query: ArrayLike, k: int, *, allowed_ids: ArrayLike | None = None
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """The ``k`` ids whose vectors have the largest inner product with ``query``.

        Args:
            query: a ``(dim,)`` (or ``(1, dim)``) vector.
            k: how many results at most.
            allowed_ids: when given, only these ids can be returned; the result
                then holds ``min(k, number of allowed ids present)`` entries.

        Returns:
            ``(ids, scores)``, best first, without padding.

        Raises:
            ValueError: ``query`` does not have ``dim`` values, or is not finite.
        """
        vector = np.asarray(query, dtype=np.float32).reshape(-1)
        if vector.size != self._dim:
            raise ValueError(f"query must have {self._dim} values, got {vector.size}")
        if not np.isfinite(vector).all():
            raise ValueError("query contains NaN or infinite values")
        vector = np.ascontiguousarray(vector.reshape(1, -1))
        allowed = None if allowed_ids is None else np.unique(np.asarray(allowed_ids, np.int64))
        if k <= 0 or (allowed is not None and allowed.size == 0):
            return _nothing()
        with self._lock:
            live = int(self._index.ntotal) - len(self._deleted)
            if live == 0:
                return _nothing()
            if self._kind == "flat":
                return self._search_flat(vector, k, allowed, live)
            return self._search_hnsw(vector, k, allowed, live)

    def _search_flat(
        self, vector: NDArray[np.float32], k: int, allowed: NDArray[np.int64] | None, live: int
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        if allowed is None:
            return self._faiss_search(vector, min(k, live), None)
        params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed))  # holds it
        return self._faiss_search(vector, min(k, live, allowed.size), params)

    def _search_hnsw(
        self, vector: NDArray[np.float32], k: int, allowed: NDArray[np.int64] | None, live: int
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        if allowed is not None:
            allowed = allowed[np.isin(allowed, self._live_ids())]
            if allowed.size == 0:
                return _nothing()
            if allowed.size <= max(_EXACT_LIMIT, 4 * k):
                return self._exact(vector, k, allowed)
            selector: Any = faiss.IDSelectorBatch(allowed)
            wanted = min(k, allowed.size)
        else:
            selector = None
            if self._deleted:
                hidden = faiss.IDSelectorBatch(self._deleted_array())
                selector = faiss.IDSelectorNot(hidden)  # holds a reference to ``hidden``
            wanted = min(k, live)
        options: dict[str, Any] = {"efSearch": max(self._ef_search, wanted)}
        if selector is not None:
            options["sel"] = selector
        params = faiss.SearchParametersHNSW(**options)
        ids, scores = self._faiss_search(vector, wanted, params)
        if ids.size < wanted:  # the graph walk missed some: answer exactly instead
            pool = allowed if allowed is not None else self._live_ids()
            return self._exact(vector, k, pool)
        return ids, scores

    def _faiss_search(
        self, vector: NDArray[np.float32], k: int, params: Any
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        # One query: OpenMP threads cost more than they give (on a busy machine a
        # 10k-vector search took 17 ms with two threads, 0.8 ms with one). The
        # setting is per calling thread; it is restored after the search.
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            if params is None:
                scores, ids = self._index.search(vector, k)
            else:
                scores, ids = self._index.search(vector, k, params=params)
        finally:
            faiss.omp_set_num_threads(threads)
        found = ids[0] >= 0
        return _in_order(
            np.asarray(ids[0][found], dtype=np.int64),
            np.asarray(scores[0][found], dtype=np.float32),
        )

    def _exact(
        self, vector: NDArray[np.float32], k: int, pool: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """Brute force over ``pool`` (ids known to be present)."""
        matrix = self._index.reconstruct_batch(np.ascontiguousarray(pool))
        scores = (matrix @ vector[0]).astype(np.float32)
        found, scores = _in_order(pool, scores)
        top = min(k, pool.size)
        return found[:top], scores[:top]

    # -- snapshot ------------------------------------------------------------------

    def save_snapshot(self, path: Path, *, generation: int, seq: int, fingerprint: str) -> None:
        """Write the index to ``path`` atomically, stamped for :meth:`load_snapshot`.

        Args:
            path: the snapshot file (replaced as a whole or not at all).
            generation: which snapshot this is (the caller counts).
            seq: the last change of the vectors in SQLite this index includes.
            fingerprint: the embedder's fingerprint.

        Raises:
            StorageError: the file could not be written; the previous one is intact.
        """
        encoded = fingerprint.encode("utf-8")
        if len(encoded) > 0xFFFF:
            raise ValueError("fingerprint is longer than 65535 bytes")
        with self._save_lock:
            with self._lock:
                if self._deleted:
                    self._rebuild()
                count = int(self._index.ntotal)
                try:
                    payload = faiss.serialize_index(self._index)
                except RuntimeError as exc:
                    raise StorageError(f"could not serialise the vector index: {exc}") from exc
            try:
                header = _HEADER.pack(
                    _FORMAT_VERSION,
                    _KIND_CODES[self._kind],
                    generation,
                    seq,
                    self._dim,
                    count,
                    payload.nbytes,
                    zlib.crc32(payload.data),
                    len(encoded),
                )
            except struct.error as exc:
                raise ValueError(f"generation and seq must be 64-bit integers: {exc}") from exc
            header += encoded
            prefix = _PREFIX.pack(_MAGIC, len(header), zlib.crc32(header))
            atomic_write_bytes(path, b"".join((prefix, header, payload.data)))
        logger.debug(
            "vector snapshot %s written: %d vectors, generation %d", path, count, generation
        )

    @classmethod
    def load_snapshot(
        cls,
        path: Path,
        *,
        dim: int,
        fingerprint: str,
        kind: IndexKind | None = None,
        ef_search: int = 64,
    ) -> tuple[VectorIndex, SnapshotInfo] | None:
        """Load a snapshot written by :meth:`save_snapshot`.

        Args:
            path: the snapshot file.
            dim: the vector length expected.
            fingerprint: the embedder fingerprint expected.
            kind: the index kind expected (``None``: whichever was saved).
            ef_search: HNSW only: see :class:`VectorIndex`.

        Returns:
            The index and what the file says about it, or ``None`` when the file is
            missing, unreadable, made for another embedder, dimension, kind or format,
            or damaged (then it is moved aside first: quarantined).
        """
        remove_stale_temps(path.parent, path.name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            logger.debug("no vector snapshot at %s", path)
            return None
        except OSError as exc:
            logger.warning("vector snapshot %s unreadable (%s); it will be rebuilt", path, exc)
            return None
        try:
            return cls._parse(data, path, dim, fingerprint, kind, ef_search)
        except _Damaged as exc:
            logger.warning("vector snapshot %s is damaged (%s); rebuilding from SQLite", path, exc)
            try:
                quarantine(path, f"damaged vector snapshot: {exc}")
            except OSError as move_error:
                logger.warning("could not move %s aside: %s", path, move_error)
            return None

    @classmethod
    def _parse(
        cls,
        data: bytes,
        path: Path,
        dim: int,
        fingerprint: str,
        kind: IndexKind | None,
        ef_search: int,
    ) -> tuple[VectorIndex, SnapshotInfo] | None:
        if len(data) < _PREFIX.size:
            raise _Damaged(f"{len(data)} bytes, shorter than the file header")
        magic, header_len, header_crc = _PREFIX.unpack_from(data)
        if magic != _MAGIC:
            raise _Damaged("not a vector snapshot (bad magic)")
        header_end = _PREFIX.size + header_len
        if header_len < 2 or header_len > _MAX_HEADER or header_end > len(data):
            raise _Damaged(f"header length {header_len} is impossible")
        header = data[_PREFIX.size : header_end]
        if zlib.crc32(header) != header_crc:
            raise _Damaged("header checksum mismatch")
        (version,) = struct.unpack_from("<H", header)
        if version != _FORMAT_VERSION:
            logger.info("vector snapshot %s has format %d, not %d", path, version, _FORMAT_VERSION)
            return None
        if header_len < _HEADER.size:
            raise _Damaged("header too short")
        fields = _HEADER.unpack_from(header)
        _, kind_code, generation, seq, saved_dim, count, payload_len, payload_crc, fp_len = fields
        if header_len != _HEADER.size + fp_len:
            raise _Damaged("header length does not match its fingerprint")
        try:
            saved_fingerprint = header[_HEADER.size :].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Damaged("fingerprint is not UTF-8") from exc
        saved_kind = _KINDS.get(kind_code)
        if saved_kind is None:
            raise _Damaged(f"unknown index kind {kind_code}")
        if saved_fingerprint != fingerprint or saved_dim != dim:
            found, wanted = f"{saved_fingerprint!r}/{saved_dim}", f"{fingerprint!r}/{dim}"
            logger.info("vector snapshot %s was made for %s, not %s", path, found, wanted)
            return None
        if kind is not None and saved_kind != kind:
            logger.info("vector snapshot %s holds a %s index, not %s", path, saved_kind, kind)
            return None
        payload = memoryview(data)[header_end:]
        if len(payload) != payload_len:
            raise _Damaged(f"payload is {len(payload)} bytes, expected {payload_len}")
        if zlib.crc32(payload) != payload_crc:
            raise _Damaged("payload checksum mismatch")
        try:
            index = faiss.deserialize_index(np.frombuffer(payload, dtype=np.uint8))
        except (RuntimeError, MemoryError, ValueError) as exc:
            raise _Damaged(f"FAISS could not read it: {exc}") from exc
        inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else None
        expected = faiss.IndexFlatIP if saved_kind == "flat" else faiss.IndexHNSWFlat
        if (
            not isinstance(inner, expected)
            or inner.metric_type != faiss.METRIC_INNER_PRODUCT
            or int(index.d) != dim
            or int(index.ntotal) != count
        ):
            raise _Damaged("FAISS index does not match its header")
        vector_index = cls(dim, kind=saved_kind, ef_search=ef_search)
        if saved_kind == "hnsw":
            inner.hnsw.efSearch = ef_search
        vector_index._index = index
        stored = vector_index._stored_ids()
        vector_index._top = int(stored.max()) if stored.size else -1
        info = SnapshotInfo(
            generation=generation, seq=seq, fingerprint=saved_fingerprint, dim=dim, count=count
        )
        return vector_index, info
