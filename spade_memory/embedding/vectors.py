"""Small helpers every embedder shares."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["normalise_rows"]


def normalise_rows(matrix: NDArray[np.float32]) -> NDArray[np.float32]:
    """Rows scaled to unit length (in place); NaN and inf become 0 first."""
    np.nan_to_num(matrix, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix
