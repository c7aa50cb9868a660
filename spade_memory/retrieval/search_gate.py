"""Searches first: background work of the process steps aside while a search runs.

Every search (:meth:`spade_memory.retrieval.retriever.Retriever.search_with_timings`)
is counted here for as long as it runs. The derivation pipeline
(:mod:`spade_memory.engine.derivation`) waits before extracting each memory while any
search of the process is in flight, at most :data:`DERIVATION_HOLD` seconds per memory:
the steps of a search then queue on the event loop behind no extraction, and the
pipeline still advances while searches follow one another without a pause (and catches
up at full speed once they stop). Document embedding has its own gate, for query
embeddings (:class:`spade_memory.embedding.calls.QueryGate`).

Counting is thread-safe: memories may run on event loops in several threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Iterator

__all__ = ["DERIVATION_HOLD", "SearchGate", "search_gate"]

#: The longest the derivation pipeline waits for the searches in flight, per memory.
DERIVATION_HOLD = 0.05
#: How often a held step looks again whether the searches are done, in seconds.
_POLL = 0.005


class SearchGate:
    """Counts the searches running in the process; background steps wait while any is."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Searches running now."""
        with self._lock:
            return self._in_flight

    @contextlib.contextmanager
    def searching(self) -> Iterator[None]:
        """Count one search for the duration of the block."""
        with self._lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    async def wait_clear(self, timeout: float) -> bool:
        """Wait until no search is in flight, for at most ``timeout`` seconds; whether none is.

        Returns at once when none is (the common case costs no sleep).
        """
        if not self.in_flight:
            return True
        deadline = time.monotonic() + timeout
        while self.in_flight:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(left, _POLL))
        return True


_GATE = SearchGate()


def search_gate() -> SearchGate:
    """The process-wide :class:`SearchGate`."""
    return _GATE


def _forget_searches() -> None:
    """In a forked child: the parent's searches are not the child's."""
    global _GATE
    _GATE = SearchGate()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_searches)
