"""Work in flight: a count, safe across threads, that work of lower priority waits on.

What a caller waits for counts itself while it runs (the searches of the process, in
:mod:`spade_memory.retrieval.search_gate`; the query embeddings, in
:mod:`spade_memory.embedding.calls`), and background work waits while any is counted,
for a bounded while: a thread blocks in :meth:`InFlight.wait_clear`, a coroutine
sleeps in :meth:`InFlight.wait_clear_async`. In a forked child every count starts at
zero: the parent's work is not the child's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterator

__all__ = ["InFlight"]

#: How often a thread held by :meth:`InFlight.wait_clear` looks whether it was
#: abandoned, and a held coroutine whether the count fell to zero, in seconds.
_THREAD_STEP = 0.05
_ASYNC_STEP = 0.005

_ALL: weakref.WeakSet[InFlight] = weakref.WeakSet()


class InFlight:
    """How much work of one kind runs now; others wait while any does."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._count = 0
        _ALL.add(self)

    @property
    def count(self) -> int:
        """The work counted now."""
        with self._changed:
            return self._count

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Count one piece of work for the duration of the block."""
        with self._changed:
            self._count += 1
        try:
            yield
        finally:
            with self._changed:
                self._count -= 1
                if not self._count:
                    self._changed.notify_all()

    def wait_clear(self, timeout: float, abandoned: threading.Event | None = None) -> bool:
        """Block the calling thread until nothing is counted, for at most ``timeout``
        seconds (or until ``abandoned`` is set); whether nothing is."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._count:
                left = deadline - time.monotonic()
                if left <= 0 or (abandoned is not None and abandoned.is_set()):
                    return False
                self._changed.wait(min(left, _THREAD_STEP))
            return True

    async def wait_clear_async(self, timeout: float) -> bool:
        """Sleep until nothing is counted, for at most ``timeout`` seconds; whether
        nothing is. Returns at once, without sleeping, when nothing is counted."""
        if not self.count:
            return True
        deadline = time.monotonic() + timeout
        while self.count:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(left, _ASYNC_STEP))
        return True

    def _forget(self) -> None:
        self._changed = threading.Condition()
        self._count = 0


def _after_fork_in_child() -> None:
    for counted in list(_ALL):
        counted._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
