"""Batching: items submitted together are flushed together, by one of their callers.

Each caller submits one item and waits. The first caller through the *gate* is
the leader: it takes every item queued so far (its own among them) and runs the
flush for all of them, while later callers queue for the next flush. The flush
settles each item with its own result or error (:meth:`Pending.resolve`,
:meth:`Pending.fail`); a flush that raises fails every item it left unsettled:
the leader gets the exception itself, every other caller a copy of it (same type
and message, chained to it), so no two callers raise one exception object.

Two ways to wait, one discipline: :class:`Batcher` for coroutines of one event
loop, :class:`ThreadBatcher` for threads.

Cancellation (:class:`Batcher`):

- a caller cancelled while its item is still queued takes it out of the queue:
  nothing of it is flushed;
- a caller cancelled once its item was taken into a flush is told nothing more:
  its item is *abandoned* (:attr:`Pending.wanted` is false), so a flush that
  retries items may skip it;
- a leader cancelled during its flush leaves the others' items to be settled,
  in one of two ways chosen when the batcher is made. Without a ``settle``
  function the flush cannot be interrupted: it runs in a task of its own, shielded
  from its leader, takes the items queued when that task starts (so the callers of
  one turn of the event loop share it), holds the gate until it ends and settles
  every item it took (the leader's own included, if its leader was cancelled only
  once the task had begun). With one, the flush starts at once and is interrupted
  with its leader, and ``settle`` is given the others' items, in the background,
  to find out what the interrupted flush did and to settle them from that.
  :meth:`Batcher.wait_background` waits for both.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from ..errors import StorageError

__all__ = ["Batcher", "Pending", "ThreadBatcher"]

T = TypeVar("T")
R = TypeVar("R")

_UNSET = object()


class Pending(Generic[T, R]):
    """One caller's item in a batch, and what became of it."""

    __slots__ = ("_error", "_result", "_waiter", "abandoned", "item", "settled", "taken")

    def __init__(self, item: T) -> None:
        self.item = item
        self.taken = False  # out of the queue, into a flush
        self.abandoned = False  # its caller gave up waiting
        self.settled = False  # a result or an error was given
        self._result: object = _UNSET
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    @property
    def wanted(self) -> bool:
        """Not settled yet, and its caller still waits for it."""
        return not self.abandoned and not self.settled

    def resolve(self, result: R) -> None:
        """Settle the item with its result (once: later calls do nothing)."""
        if not self.settled:
            self._result = result
            self.settled = True
            if self._waiter is not None:
                self._wake()

    def fail(self, error: BaseException) -> None:
        """Settle the item with an error its caller raises (once)."""
        if not self.settled:
            self._error = error
            self.settled = True
            if self._waiter is not None:
                self._wake()

    def outcome(self) -> R:
        """The result, or raise the error, of a settled item."""
        if self._error is not None:
            raise self._error
        if not self.settled:
            raise RuntimeError("the item is not settled yet")
        return self._result  # type: ignore[return-value]

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _settled_future(self) -> asyncio.Future[None]:
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
            if self.settled:
                self._waiter.set_result(None)
        return self._waiter


def copy_for_another_caller(error: BaseException) -> BaseException:
    """An exception like ``error`` (type, message, attributes) raised from it."""
    try:
        other = copy.copy(error)
    except Exception:
        other = StorageError(str(error))
    if other is error or type(other) is not type(error):
        other = StorageError(str(error))
    other.__traceback__ = None
    other.__cause__ = error
    return other


def _fail_all(batch: list[Pending[T, R]], error: BaseException, own: Pending[T, R] | None) -> None:
    """Fail every unsettled item of ``batch``: ``own`` with ``error``, the others with copies."""
    for pending in batch:
        if not pending.settled:
            pending.fail(error if pending is own else copy_for_another_caller(error))


def _check_settled(batch: list[Pending[T, R]]) -> None:
    for pending in batch:
        if not pending.settled:
            pending.fail(StorageError("the batch was flushed without an outcome for this item"))


Flush = Callable[[list[Pending[T, R]]], Awaitable[None]]
"""Flush a batch and settle its items; raising fails every item left unsettled."""

Settle = Callable[[list[Pending[T, R]]], Awaitable[None]]
"""Settle the items of a flush interrupted with its leader."""


class Batcher(Generic[T, R]):
    """Batching for coroutines of one event loop.

    Args:
        flush: flushes a batch and settles its items.
        settle: settles the others' items of a flush interrupted with its
            cancelled leader; ``None`` makes flushes uninterruptible instead (see
            the module's documentation).
        name: names the tasks made here.
    """

    def __init__(
        self,
        flush: Flush[T, R],
        *,
        settle: Settle[T, R] | None = None,
        name: str = "spade_memory batch",
    ) -> None:
        self._flush = flush
        self._settle = settle
        self._name = name
        self.queue: list[Pending[T, R]] = []
        self.gate = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()
        self._flushing: asyncio.Future[None] | None = None  # an uninterruptible flush

    async def submit(self, item: T) -> R:
        """Queue ``item`` and return its result once a flush settled it.

        Raises:
            Exception: the error the flush settled the item with.
        """
        pending: Pending[T, R] = Pending(item)
        self.queue.append(pending)
        try:
            await self.gate.acquire()
            if pending.taken:  # flushed by an earlier leader
                self.gate.release()
            else:
                await self._lead(pending)
            if not pending.settled:  # its flush's leader was cancelled: being settled
                await asyncio.shield(pending._settled_future())
        except asyncio.CancelledError:
            if not pending.taken:
                self.queue = [queued for queued in self.queue if queued is not pending]
            pending.abandoned = True
            raise
        return pending.outcome()

    async def wait_background(self) -> None:
        """Wait for the flushes and settlements left running by cancelled leaders."""
        while self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def drain(self) -> None:
        """Wait until nothing is queued, flushing or being settled (for closing)."""
        while True:
            await self.wait_background()
            if self._flushing is not None and not self._flushing.done():
                # After its callers have been told (they wait on it first).
                await asyncio.wait([self._flushing])
                continue
            if not self.queue and not self.gate.locked():
                return
            async with self.gate:
                pass

    def _take(self) -> list[Pending[T, R]]:
        batch, self.queue = self.queue, []
        for pending in batch:
            pending.taken = True
        return batch

    async def _lead(self, own: Pending[T, R]) -> None:
        """Flush everything queued; the caller holds the gate, released here."""
        if self._settle is None:
            run = self._flushing = asyncio.ensure_future(self._flush_holding_gate(own))
            try:
                await asyncio.shield(run)
            except asyncio.CancelledError:
                self._keep(run)
                raise
            return
        batch = self._take()
        try:
            await self._run(batch, own)
        except BaseException:
            # Interrupted with the flush maybe under way: the others are settled
            # from what it did, once it has ended.
            others = [pending for pending in batch if pending is not own and pending.wanted]
            if others:
                self._keep(asyncio.ensure_future(self._settle_others(others)))
            raise
        finally:
            self.gate.release()

    async def _flush_holding_gate(self, own: Pending[T, R]) -> None:
        # Taken when the task starts: the callers of the leader's turn of the event
        # loop share its flush.
        batch = self._take()
        try:
            if batch:  # empty if its leader was cancelled before it began
                await self._run(batch, own)
        except BaseException as exc:  # the task itself was cancelled (the loop is closing)
            _fail_all(batch, StorageError(f"{self._name} was interrupted: {exc!r}"), None)
            raise
        finally:
            self.gate.release()

    async def _run(self, batch: list[Pending[T, R]], own: Pending[T, R] | None) -> None:
        try:
            await self._flush(batch)
        except Exception as exc:
            _fail_all(batch, exc, own)
        else:
            _check_settled(batch)

    async def _settle_others(self, others: list[Pending[T, R]]) -> None:
        assert self._settle is not None
        try:
            await self._settle(others)
        except Exception as exc:
            _fail_all(others, exc, None)
        except BaseException as exc:
            _fail_all(others, StorageError(f"{self._name} was interrupted: {exc!r}"), None)
            raise
        else:
            _check_settled(others)

    def _keep(self, task: asyncio.Future[None]) -> None:
        assert isinstance(task, asyncio.Task)
        task.set_name(self._name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


ThreadFlush = Callable[[list[Pending[T, R]]], None]
"""Flush a batch (in the leader's thread) and settle its items."""


class ThreadBatcher(Generic[T, R]):
    """Batching for threads: :meth:`submit` blocks until the item's flush ended.

    Args:
        flush: flushes a batch and settles its items.
        what: what a flush does, for the error of callers whose leader was
            interrupted (e.g. ``"register agents"``).
    """

    def __init__(self, flush: ThreadFlush[T, R], *, what: str) -> None:
        self._flush = flush
        self._what = what
        self._queue_lock = threading.Lock()
        self.queue: list[Pending[T, R]] = []
        self.gate = threading.Lock()

    def submit(self, item: T) -> R:
        """Queue ``item``, block until a flush settled it, return its result.

        Raises:
            Exception: the error the flush settled the item with.
        """
        pending: Pending[T, R] = Pending(item)
        with self._queue_lock:
            self.queue.append(pending)
        with self.gate:
            if not pending.taken:
                with self._queue_lock:
                    batch, self.queue = self.queue, []
                for queued in batch:
                    queued.taken = True
                try:
                    self._flush(batch)
                except Exception as exc:
                    _fail_all(batch, exc, pending)
                except BaseException as exc:  # interrupted: the others learn of it
                    interrupted = StorageError(f"could not {self._what}: interrupted ({exc!r})")
                    interrupted.__cause__ = exc
                    _fail_all([p for p in batch if p is not pending], interrupted, None)
                    raise
                else:
                    _check_settled(batch)
        return pending.outcome()
