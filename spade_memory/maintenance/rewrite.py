"""Rewriting what is derived from memories: their graphs, and the FAISS cache of vectors.

Both the rebuilds and the consistency repairs use these: the graph of each
memory extracted again, and the FAISS cache made to hold exactly the stored
vectors (the statements they go with live in :mod:`spade_memory.storage`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..models import Memory
from ..text.graph import MemoryGraph

if TYPE_CHECKING:
    from ..storage.vectors import VectorIndex

__all__ = ["extract_all", "reset_vector_index"]


def extract_all(
    extract: Callable[[Memory], MemoryGraph], memories: Sequence[Memory]
) -> list[MemoryGraph]:
    """The graph of each memory (blocking: run it in a thread for many)."""
    return [extract(memory) for memory in memories]


def reset_vector_index(index: VectorIndex, ids: np.ndarray, matrix: np.ndarray) -> None:
    """Make ``index`` hold exactly these vectors (blocking; run it in a thread)."""
    extra = np.setdiff1d(index.ids(), ids)
    if len(extra):
        index.remove(extra)
    if len(ids):
        index.add(ids, matrix)
