"""Searches first: background work of the process steps aside while a search runs.

Every search (:meth:`spade_memory.retrieval.retriever.Retriever.search_with_timings`)
is counted in :func:`search_gate` for as long as it runs. The derivation pipeline
(:mod:`spade_memory.engine.derivation`) waits before extracting each memory while any
search of the process is in flight, at most :data:`DERIVATION_HOLD` seconds per memory:
the steps of a search then queue on the event loop behind no extraction, and the
pipeline still advances while searches follow one another without a pause (and catches
up at full speed once they stop). Document embedding waits for query embeddings the
same way (:func:`spade_memory.embedding.calls.query_gate`).
"""

from __future__ import annotations

from ..in_flight import InFlight

__all__ = ["DERIVATION_HOLD", "search_gate"]

#: The longest the derivation pipeline waits for the searches in flight, per memory.
DERIVATION_HOLD = 0.05

_SEARCHES = InFlight()


def search_gate() -> InFlight:
    """The searches running in the process."""
    return _SEARCHES
