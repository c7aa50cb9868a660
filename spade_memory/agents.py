"""Deprecated: ``spade_memory.agents`` moved.

It is now :mod:`spade_memory.spade`; import from there, or from ``spade_memory``.
This alias warns, and goes away in a later version.
"""

from __future__ import annotations

import warnings

from spade_memory.spade import (
    LLMAgent,
    MemoryMixin,
)

__all__ = [
    "LLMAgent",
    "MemoryMixin",
]

warnings.warn(
    f"{__name__} moved to spade_memory.spade; import it from there",
    DeprecationWarning,
    stacklevel=2,
)
