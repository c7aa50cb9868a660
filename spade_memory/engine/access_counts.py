"""Coalesced recording of memory accesses (``access_count`` / ``last_accessed``)
and of searches (the agent's ``searches`` / ``last_search_at``).

Every search reports itself and the memories it returned; writing each at once
would turn every read into a write transaction. :class:`AccessRecorder` keeps
them and writes them together after a short interval, in one transaction.
When another process holds the database's write lock past ``busy_timeout_ms``,
the accesses are kept (up to a bound) and tried again after the next interval;
closing the memory writes whatever is still pending.

Only the write is coalesced, not the count: :meth:`AccessRecorder.merged` adds the
accesses not yet written to a memory read from the store, so a read right after a
search sees them (``MemoryManager.get``, ``list`` and ``search`` do this). All of a
batch is written with the time of its latest access, the time reads show meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Iterable

from ..errors import StorageError, StoreClosedError
from ..models import Memory
from ..storage.base import BaseMemoryStore
from ..storage.writer import WriteOutcome

__all__ = ["AccessRecorder"]

logger = logging.getLogger(__name__)

_TOUCH_INTERVAL = 3.0
_MAX_PENDING_TOUCHES = 10_000  # accesses kept for a retry while another process holds the lock


class AccessRecorder:
    """Collects accessed memory ids and writes them to the base memory in batches.

    Args:
        base: the store whose access statistics are updated.
        jid: the agent's JID, for log messages.
        clock: the memory's time source (Unix seconds).
        closed: whether the owning memory is closed (no retry is scheduled then).
    """

    def __init__(
        self,
        base: BaseMemoryStore,
        *,
        jid: str,
        clock: Callable[[], float],
        closed: Callable[[], bool],
    ) -> None:
        self._base = base
        self._jid = jid
        self._clock = clock
        self._closed = closed
        self._touches: list[int] = []
        self._writing: list[int] = []  # the accesses of the write under way
        self._accessed_at: float | None = None  # the time of the latest access noted
        self._searches = 0
        self._last_search_at: float | None = None
        self.task: asyncio.Task[None] | None = None
        """The pending write (the coalescing timer or a retry), if any."""

    def note(self, memory_ids: Iterable[int], *, search: bool = False) -> None:
        """Record that these memories were accessed (by one search, with ``search``);
        the write follows shortly."""
        before = len(self._touches)
        self._touches.extend(memory_ids)
        if len(self._touches) > before:
            self._accessed_at = self._clock()
        if search:
            self._searches += 1
            self._last_search_at = self._clock()
        if (self._touches or self._searches) and (self.task is None or self.task.done()):
            self.task = asyncio.create_task(self._later())

    def pending(self) -> Counter[int]:
        """How many accesses of each memory are noted but not yet written."""
        return Counter(self._writing) + Counter(self._touches)

    @property
    def accessed_at(self) -> float | None:
        """The time of the latest access noted; pending accesses are written with it."""
        return self._accessed_at

    def merged(self, memory: Memory) -> Memory:
        """``memory`` as read from the store, with its accesses not yet written."""
        return self.merged_all([memory])[0]

    def merged_all(self, memories: Iterable[Memory]) -> list[Memory]:
        """:meth:`merged` of each memory (one count of the pending accesses for all)."""
        memories = list(memories)
        if not (self._touches or self._writing):
            return memories
        pending = self.pending()
        return [self._with(memory, pending[memory.id]) for memory in memories]

    def _with(self, memory: Memory, count: int) -> Memory:
        if not count:
            return memory
        when = self._accessed_at
        if when is None or (memory.last_accessed is not None and memory.last_accessed > when):
            when = memory.last_accessed
        return dataclasses.replace(
            memory, access_count=memory.access_count + count, last_accessed=when
        )

    async def _later(self) -> None:
        await asyncio.sleep(_TOUCH_INTERVAL)
        await self.write()

    async def write(self) -> None:
        """Write the pending accesses now (what the coalescing timer runs).

        A store already closed drops them; a busy database keeps them for a
        retry; any other failure is logged, never raised to the reader.
        """
        if not (self._touches or self._searches) or self._base.closed:
            return
        pending, self._touches = self._touches, []
        self._writing = pending
        searches, self._searches = self._searches, 0
        last_search_at = self._last_search_at
        when = self._accessed_at if self._accessed_at is not None else self._clock()
        outcome = WriteOutcome()
        try:
            await self._base.touch(
                pending, when, searches=searches, last_search_at=last_search_at, outcome=outcome
            )
        except StoreClosedError:
            return
        except asyncio.CancelledError:
            # Cancelled while it was written (a close, the end of the event loop): kept
            # for the next write (aclose) unless its COMMIT had begun.
            if not outcome.committed:
                self._keep(pending, searches)
            raise
        except StorageError as exc:
            # Busy past busy_timeout_ms (other processes writing the same agent): the
            # accesses are kept and tried again after the next interval.
            self._keep(pending, searches)
            logger.warning("could not record memory accesses for %s yet: %s", self._jid, exc)
            if not self._closed():
                self.task = asyncio.create_task(self._later())
        except Exception:
            logger.warning("could not record memory accesses for %s", self._jid, exc_info=True)
        finally:
            self._writing = []

    def _keep(self, pending: list[int], searches: int) -> None:
        self._touches = [*pending, *self._touches][-_MAX_PENDING_TOUCHES:]
        self._searches += searches

    async def aclose(self) -> None:
        """Stop the timer and write what is still pending."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.write()
