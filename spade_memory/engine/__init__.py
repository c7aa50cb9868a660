"""The engine of a memory: its wired parts, how they open, and the work beside them.

- :class:`Engine`: stores, vector indexer, retriever, extraction, clock and change
  notification, taken by every service of the memory;
- :func:`open_engine`: opens one agent's files (or its in-memory stores);
- the indexer that embeds in the background, the coalesced access statistics and
  the checks of what callers give, each in its own module.
"""

from __future__ import annotations

from .engine import Engine
from .opening import (
    GRAPH_VERSION_KEY,
    graph_outdated,
    index_text_outdated,
    mark_index_text_current,
    open_engine,
)

__all__ = [
    "GRAPH_VERSION_KEY",
    "Engine",
    "graph_outdated",
    "index_text_outdated",
    "mark_index_text_current",
    "open_engine",
]
