"""Checks of stored vectors and of the FAISS cache that read every vector (deep checks)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..storage.checks import ConsistencyQueries

if TYPE_CHECKING:
    from ..engine.indexer import VectorIndexer
    from ..storage.base import BaseMemoryStore

__all__ = ["non_finite", "sound", "stale_index"]

_BATCH = 500
_TOLERANCE = 1e-3


def sound(blob: Any, dim: Any) -> bool:
    """Whether a stored vector has its declared length and only finite values."""
    if not isinstance(blob, bytes) or not isinstance(dim, int) or dim < 1:
        return False
    if len(blob) != dim * 4:
        return False
    return bool(np.isfinite(np.frombuffer(blob, dtype=np.float32, count=dim)).all())


async def non_finite(base: BaseMemoryStore) -> list[int]:
    """Ids of stored vectors of the right length holding a NaN or an infinity."""
    queries = ConsistencyQueries(base)
    bad: list[int] = []
    last = 0
    while True:
        rows = await queries.well_formed_vectors_after(last, _BATCH)
        if not rows:
            return bad
        for memory_id, vector in rows:
            if not np.isfinite(vector).all():
                bad.append(memory_id)
        last = rows[-1][0]


async def stale_index(
    base: BaseMemoryStore, indexer: VectorIndexer, ids: Sequence[int]
) -> list[int]:
    """Ids whose FAISS vector differs from the stored one."""
    fingerprint, dim, index = indexer.embedder.fingerprint, indexer.embedder.dim, indexer.index
    stale: list[int] = []
    for start in range(0, len(ids), _BATCH):
        vectors = await base.vectors_for(fingerprint, dim, ids[start : start + _BATCH])

        def compare(batch: dict[int, np.ndarray] = vectors) -> list[int]:
            wrong: list[int] = []
            for memory_id, vector in batch.items():
                if not np.isfinite(vector).all():
                    continue
                found, scores = index.search(
                    vector, 1, allowed_ids=np.asarray([memory_id], dtype=np.int64)
                )
                expected = float(np.dot(vector, vector))
                if not len(found) or not math.isclose(
                    float(scores[0]), expected, abs_tol=_TOLERANCE
                ):
                    wrong.append(memory_id)
            return wrong

        stale.extend(await asyncio.to_thread(compare))
    return stale
