"""HTTP sessions of the clients of OpenAI-compatible endpoints, one per event loop.

An ``aiohttp.ClientSession`` belongs to the event loop it was first used on: used
from another loop (the next ``asyncio.run``, another thread's loop) it fails with
"Event loop is closed" or worse. :class:`LoopSessions` gives each loop its own
session, shared by that loop's calls, so a connection is kept alive from one
request to the next (no new TCP and TLS handshake for each call of a tool loop).

A session is closed when:

- no call has used it for ``idle_seconds`` (30 by default);
- its loop ends: the session is held by an asynchronous generator of that loop,
  which ``asyncio.run``, SPADE's ``spade.run`` and ``asyncio.Runner`` close as they
  end the loop (``loop.shutdown_asyncgens()``), so no session or socket outlives
  the loop (a program that closes a loop of its own without
  ``shutdown_asyncgens()`` gets aiohttp's "Unclosed client session" warning);
- :meth:`LoopSessions.aclose` is called (the client was closed) and its calls
  under way have ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp

__all__ = ["IDLE_SECONDS", "LoopSessions"]

#: A session no call used for this long is closed (its next call opens another).
IDLE_SECONDS = 30.0


async def _holding(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    """Holds ``session`` until it is closed: by :meth:`LoopSessions._drop`, or by
    the loop's ``shutdown_asyncgens()`` as the loop ends."""
    try:
        yield
    finally:
        await session.close()


class _Shared:
    """One HTTP session of an event loop, how many calls use it, and what holds it."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.users = 0
        self.holder = _holding(session)
        self.idle: asyncio.TimerHandle | None = None
        self.dropped = False


class LoopSessions:
    """The HTTP session of each event loop, shared by its calls and kept between
    them for ``idle_seconds`` (see the module docstring).

    Args:
        make: makes a new session (with the client's default headers).
        idle_seconds: how long an unused session is kept open; 0 closes it as soon
            as no call uses it.
    """

    def __init__(
        self, make: Callable[[], aiohttp.ClientSession], *, idle_seconds: float = IDLE_SECONDS
    ) -> None:
        if not idle_seconds >= 0:
            raise ValueError(f"idle_seconds must be >= 0, got {idle_seconds!r}")
        self._make = make
        self._idle_seconds = float(idle_seconds)
        self._closed = False
        self._shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Shared] = (
            weakref.WeakKeyDictionary()
        )
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        """How many loops hold an open session now (in use, or kept for the next call)."""
        return sum(
            1 for shared in self._shared.values() if not (shared.dropped or shared.session.closed)
        )

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[aiohttp.ClientSession]:
        """The session of the running loop, for one call."""
        loop = asyncio.get_running_loop()
        shared = self._shared.get(loop)
        if shared is None or shared.dropped or shared.session.closed:
            shared = _Shared(self._make())
            # first step on this loop: the loop now closes it as it ends
            await shared.holder.asend(None)
            self._shared[loop] = shared
        if shared.idle is not None:
            shared.idle.cancel()
            shared.idle = None
        shared.users += 1
        try:
            yield shared.session
        finally:
            shared.users -= 1
            if shared.users == 0:
                if self._closed or self._idle_seconds == 0:
                    await self._drop(loop, shared)
                elif not shared.dropped:
                    shared.idle = loop.call_later(self._idle_seconds, self._idle, loop, shared)

    async def aclose(self) -> None:
        """Close the running loop's session once no call uses it; later calls of any
        loop close theirs as they end (a client closed keeps nothing open)."""
        self._closed = True
        loop = asyncio.get_running_loop()
        shared = self._shared.get(loop)
        if shared is not None and shared.users == 0:
            await self._drop(loop, shared)

    def _idle(self, loop: asyncio.AbstractEventLoop, shared: _Shared) -> None:
        shared.idle = None
        if shared.users == 0 and not shared.dropped:
            # let go of it now, not in the task: a call starting before the task runs
            # takes a new session instead of this one, closing under it
            self._forget(loop, shared)
            task = loop.create_task(shared.holder.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _drop(self, loop: asyncio.AbstractEventLoop, shared: _Shared) -> None:
        if shared.dropped:
            return
        self._forget(loop, shared)
        await shared.holder.aclose()

    def _forget(self, loop: asyncio.AbstractEventLoop, shared: _Shared) -> None:
        """No call takes ``shared`` any more (it is being closed)."""
        shared.dropped = True
        if shared.idle is not None:
            shared.idle.cancel()
            shared.idle = None
        if self._shared.get(loop) is shared:
            del self._shared[loop]
