"""HTTP sessions of the clients of OpenAI-compatible endpoints, one per event loop.

An ``aiohttp.ClientSession`` belongs to the event loop it was first used on: used
from another loop (the next ``asyncio.run``, another thread's loop) it fails with
"Event loop is closed" or worse. :class:`LoopSessions` gives each loop its own
session, shared by the calls of that loop that overlap (their connections kept
alive from one request to the next) and closed when the last of them ends, so no
session or socket is left behind when a loop ends, whatever the caller does.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp

__all__ = ["LoopSessions"]


class _Shared:
    """One HTTP session of an event loop, and how many calls use it."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.users = 0


class LoopSessions:
    """The HTTP session of each event loop, shared by the calls that overlap.

    Args:
        make: makes a new session (with the client's default headers).
    """

    def __init__(self, make: Callable[[], aiohttp.ClientSession]) -> None:
        self._make = make
        self._shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Shared] = (
            weakref.WeakKeyDictionary()
        )

    def __len__(self) -> int:
        """How many loops hold a session now (calls under way)."""
        return len(self._shared)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[aiohttp.ClientSession]:
        """The session of the running loop, for one call; closed once no call of
        that loop uses it."""
        loop = asyncio.get_running_loop()
        shared = self._shared.get(loop)
        if shared is None:
            shared = self._shared[loop] = _Shared(self._make())
        shared.users += 1
        try:
            yield shared.session
        finally:
            shared.users -= 1
            if shared.users == 0:
                if self._shared.get(loop) is shared:
                    del self._shared[loop]
                await shared.session.close()
