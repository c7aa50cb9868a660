"""The loop of a memory's background workers: woken by changes, waited for by flushes.

The vector indexer (:mod:`.indexer`) and the derivation pipeline
(:mod:`.derivation`) each run one task that sleeps until :meth:`notify` says work
waits, then makes a pass over everything waiting. :meth:`flush` waits until a pass
begun after it was called is done. A pass that fails on storage (a lock held too
long, a full disk) is tried again a second later; a memory closed, or whose
database was found damaged, stops the worker quietly. Any other error stops it
too: it is logged, and every flush waiting or to come raises
:class:`~spade_memory.errors.StorageError` saying so, instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import ClassVar

from ..errors import StorageCorrupted, StorageError, StoreClosedError
from ..storage.base import BaseMemoryStore

__all__ = ["STORAGE_RETRY_SECONDS", "BackgroundWorker"]

logger = logging.getLogger(__name__)

#: The wait before a pass that failed on storage is tried again.
STORAGE_RETRY_SECONDS = 1.0


class BackgroundWorker:
    """One background task making passes over the work a memory has waiting.

    Subclasses say what a pass does (:meth:`_pass`) and may hook into the loop
    (:meth:`_before_pass`, :meth:`_after_pass`, :meth:`_hurry`, :meth:`_settled`).

    Args:
        base: the memory's base store.
    """

    #: What the worker does, in its log lines and errors ("embedding").
    work: ClassVar[str] = "work"

    def __init__(self, base: BaseMemoryStore) -> None:
        self._base = base
        self._requested = 0
        self._completed = 0
        self._progress = asyncio.Condition()
        self._wake = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._stopped_by: BaseException | None = None
        self._finishing = False  # closing: a failed pass is not tried again
        self._gave_up = False
        # closed under it, or its database found damaged: the worker ended quietly
        self._ended_by: StoreClosedError | StorageCorrupted | None = None

    def _start(self, name: str) -> None:
        self._task = asyncio.create_task(self._run(), name=f"{name}:{self._base.agent}")

    def notify(self) -> None:
        """Tell the worker that work waits."""
        self._requested += 1
        self._wake.set()

    @property
    def maybe_pending(self) -> bool:
        """Whether work may wait (the worker was told of some it has not done yet)."""
        return self._requested > self._completed

    @property
    def stopped_by(self) -> BaseException | None:
        """The unexpected error that stopped the worker, or ``None`` while it runs."""
        return self._stopped_by

    async def flush(self) -> None:
        """Wait until a pass begun after this call is done.

        Raises:
            StoreClosedError: the worker is closed, or its store was closed under it.
            StorageCorrupted: the worker ended because its database was found damaged.
            StorageError: the worker stopped on an unexpected error (logged).
        """
        if self._closed:
            raise StoreClosedError(f"the background {self.work} is closed")
        self._hurry()
        self.notify()
        target = self._requested
        async with self._progress:
            await self._progress.wait_for(
                lambda: (
                    self._completed >= target
                    or self._stopped_by is not None
                    or self._ended_by is not None
                    or self._closed
                    or self._settled()
                )
            )
        if self._ended_by is not None and self._completed < target:
            raise self._ended_by
        if self._stopped_by is not None:
            raise StorageError(
                f"the background {self.work} of {self._base.agent} stopped on an unexpected "
                f"error ({type(self._stopped_by).__name__}: {self._stopped_by}); what it "
                "left is done on the next open"
            ) from self._stopped_by

    async def finish(self, within: float) -> bool:
        """Before closing: do the work waiting, for at most ``within`` seconds; a pass
        that fails is not tried again. Whether it was all done (what is left is done
        on the next open)."""
        if self._closed or self._task is None or self._task.done():
            return False
        self._finishing = True
        self._hurry()
        self.notify()
        target = self._requested
        try:
            async with asyncio.timeout(within), self._progress:
                await self._progress.wait_for(
                    lambda: (
                        self._completed >= target
                        or self._gave_up
                        or self._stopped_by is not None
                        or self._ended_by is not None
                        or self._settled()
                    )
                )
        except TimeoutError:
            return False
        return self._completed >= target

    async def aclose(self) -> None:
        """Stop the worker (work under way is dropped and done on the next open)."""
        await self.stop()

    async def stop(self) -> None:
        """Stop the worker at once, finishing nothing (what subclasses' :meth:`aclose`
        finish first is done on the next open); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        async with self._progress:
            self._progress.notify_all()

    # -- the loop ----------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._loop()
        except Exception as exc:  # a bug, or a failure nobody foresaw: say so, stop
            self._stopped_by = exc
            logger.exception(
                "%s: the background %s stopped on an unexpected error; flush() raises "
                "until the memory is opened again",
                self._base.agent,
                self.work,
            )
            async with self._progress:
                self._progress.notify_all()

    async def _loop(self) -> None:
        while not self._closed:
            await self._wake.wait()
            await self._before_pass()
            target = self._requested
            try:
                done = await self._pass()
            except (StoreClosedError, StorageCorrupted) as exc:
                # closed, or its database was found damaged and moved aside: the flushes
                # waiting (and any later one) are told, not left waiting until close
                self._ended_by = exc
                async with self._progress:
                    self._progress.notify_all()
                return
            except StorageError as exc:
                if self._finishing:  # closing: not tried again here
                    logger.info(
                        "%s: a %s pass failed while closing (%s); what it left is done "
                        "on the next open",
                        self._base.agent,
                        self.work,
                        exc,
                    )
                    self._gave_up = True
                    async with self._progress:
                        self._progress.notify_all()
                    return
                logger.warning(
                    "%s: a %s pass failed, will retry: %s", self._base.agent, self.work, exc
                )
                await asyncio.sleep(STORAGE_RETRY_SECONDS)
                self._wake.set()
                continue
            if not done:
                continue
            async with self._progress:
                self._completed = max(self._completed, target)
                self._progress.notify_all()
            await self._after_pass()

    async def _before_pass(self) -> None:
        """Called once woken, before the pass counts the requests it answers."""
        self._wake.clear()

    async def _pass(self) -> bool:
        """Do the work waiting; whether it is done (``False``: it was put off, and the
        flushes waiting for it are answered by :meth:`_settled`)."""
        raise NotImplementedError

    async def _after_pass(self) -> None:
        """Called after a pass was done and its flushes answered."""

    def _hurry(self) -> None:
        """A flush waits: stop gathering work and start the pass now."""

    def _settled(self) -> bool:
        """Whether flushes may return before their pass is done (the work is put off)."""
        return False
