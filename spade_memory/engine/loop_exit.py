"""Closing a memory its owner left open when its event loop ends.

A program that leaves ``asyncio.run`` without closing its memory (it returned,
raised, or called ``sys.exit``) would leave work of the memory queued on its
connections' threads while the loop closes under it. :class:`LoopExitClose`
closes the memory before that happens, through public asyncio behaviour: before
it closes the loop, ``asyncio.run`` (and ``asyncio.Runner``) closes every
asynchronous generator still suspended on it (``loop.shutdown_asyncgens()``),
and the memory keeps one suspended, whose ``finally`` closes it.

Its tasks have been cancelled by then, as ``asyncio.run`` does before that step;
what was acknowledged is committed already, and closing flushes the rest
(embeddings, access counts) and checkpoints the write-ahead log.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["LoopExitClose"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class LoopExitClose(Generic[T]):
    """Closes ``owner`` with ``close(owner)`` when the running event loop shuts down.

    ``owner`` and its guard refer to each other, and the loop records the waiting
    generator only weakly: an owner its program dropped unclosed is found by the
    garbage collector, which finalizes the generator, and asyncio then closes it
    on the loop (it has warned of its deletion by then).

    Args:
        owner: what to close (a memory).
        close: its close method, called with ``owner``.
        label: how warnings and logs name it.
    """

    def __init__(self, owner: T, close: Callable[[T], Awaitable[None]], label: str) -> None:
        self._owner: T | None = owner
        self._close = close
        self._label = label
        self._watch: AsyncGenerator[None, None] | None = None
        self._closing = False

    async def arm(self) -> None:
        """Start waiting for the running loop to shut down (call inside that loop)."""
        if self._watch is not None:
            return
        watch = self._wait()
        await watch.asend(None)  # first iteration: the running loop records the generator
        self._watch = watch

    async def disarm(self) -> None:
        """Stop waiting: the owner was closed by its own hand. Idempotent."""
        watch, self._watch = self._watch, None
        self._owner = None
        if watch is not None and not self._closing:
            await watch.aclose()

    async def _wait(self) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            owner = self._owner
            if self._watch is not None and owner is not None:  # not disarmed: the loop ends
                self._closing = True
                await self._close_left_open(owner)

    async def _close_left_open(self, owner: T) -> None:
        logger.info("%s was left open when its event loop ended; closing it", self._label)
        # Warnings turned into errors: it is closed all the same.
        with contextlib.suppress(ResourceWarning):
            warnings.warn(
                f"{self._label} was left open when its event loop ended and was closed "
                "then; close it with 'async with' or 'await aclose()'",
                ResourceWarning,
                stacklevel=2,
            )
        try:
            await self._close(owner)
        except Exception:
            logger.exception("closing %s at the end of its event loop failed", self._label)
