"""Group commit: single inserts that arrive while a transaction runs share the next one.

The first insert through the gate commits at once; those arriving meanwhile queue
and are committed together by the next caller through the gate (one disk sync for
all of them). Should that shared transaction fail, each of its inserts is retried
alone, so one bad insert fails only its own call.

A caller cancelled while it waits in the queue is taken out of it: nothing of it
is written. A caller cancelled while its group's transaction is under way cannot
know whether that transaction committed: its COMMIT may have begun on the
connection's thread. The others' inserts are then settled from what the database
holds once that transaction has ended: read back when it committed, inserted
again when it did not, so none is lost and none is written twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import StorageError
from ..models import Memory
from ..text.graph import MemoryGraph
from .memory_rows import IndexedText, NewMemory

__all__ = ["GroupCommit", "InsertMany"]

logger = logging.getLogger(__name__)


class InsertMany(Protocol):
    """The store's ``insert_many``: memories inserted in one transaction."""

    def __call__(
        self,
        items: Sequence[tuple[NewMemory, IndexedText]],
        *,
        graphs: Sequence[MemoryGraph | None] | None = None,
    ) -> Awaitable[list[Memory]]: ...


FindByUid = Callable[[str], Awaitable[Memory | None]]
"""The store's ``get_by_uid``: a memory as committed, read after the writes before it."""


@dataclass(eq=False, slots=True)
class _Queued:
    new: NewMemory
    text: IndexedText
    graph: MemoryGraph | None
    done: asyncio.Future[Memory] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    taken: bool = False  # out of the queue, into a group's transaction


class GroupCommit:
    """Single inserts waiting for the next transaction, committed together."""

    def __init__(self, insert_many: InsertMany, find: FindByUid) -> None:
        self._insert_many = insert_many
        self._find = find
        self.queue: list[_Queued] = []
        self.gate = asyncio.Lock()
        self._settling: set[asyncio.Task[None]] = set()

    async def insert(self, new: NewMemory, text: IndexedText, graph: MemoryGraph | None) -> Memory:
        """Queue one insert; returns once the transaction holding it committed."""
        item = _Queued(new, text, graph)
        self.queue.append(item)
        try:
            async with self.gate:
                if not item.taken:
                    batch, self.queue = self.queue, []
                    for queued in batch:
                        queued.taken = True
                    await self._lead(batch, item)
            if not item.done.done():  # its group's leader was cancelled: being settled
                await asyncio.shield(item.done)
        except asyncio.CancelledError:
            if not item.taken:
                self.queue = [queued for queued in self.queue if queued is not item]
            if not item.done.done():
                item.done.cancel()  # given up: not inserted again if its group is retried
            raise
        return item.done.result()

    async def wait_settled(self) -> None:
        """Wait until inserts of cancelled callers' groups are settled (for closing)."""
        while self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)

    async def _lead(self, batch: list[_Queued], own: _Queued) -> None:
        try:
            await self._commit(batch, alone_raises=True)
        except BaseException:
            # Cancelled (or interrupted) with the group's transaction maybe under way:
            # the others are settled once it has ended, whatever it did.
            others = [queued for queued in batch if queued is not own and not queued.done.done()]
            if others:
                task = asyncio.ensure_future(self._settle(others))
                self._settling.add(task)
                task.add_done_callback(self._settling.discard)
            raise

    async def _commit(self, batch: Sequence[_Queued], *, alone_raises: bool = False) -> None:
        """Commit ``batch`` in one transaction and settle its futures.

        A failed shared transaction is retried one insert at a time. A batch of
        one that fails raises (``alone_raises``: its caller is the one waiting)
        or settles its future with the error.
        """
        live = [queued for queued in batch if not queued.done.done()]
        if not live:
            return
        try:
            memories = await self._insert_many(
                [(queued.new, queued.text) for queued in live],
                graphs=[queued.graph for queued in live],
            )
        except Exception as exc:
            if len(live) == 1:
                if alone_raises:
                    raise
                _settle_error(live[0], exc)
                return
        else:
            for queued, memory in zip(live, memories, strict=True):
                _settle_result(queued, memory)
            return
        for queued in live:  # the shared transaction failed
            if queued.done.done():
                continue
            try:
                alone = await self._insert_many([(queued.new, queued.text)], graphs=[queued.graph])
            except Exception as exc:
                _settle_error(queued, exc)
            else:
                _settle_result(queued, alone[0])

    async def _settle(self, items: Sequence[_Queued]) -> None:
        """Settle inserts whose transaction's outcome its cancelled caller never saw.

        Reads go to the connection's thread after the writes queued before them,
        so what each read finds is what that transaction left.
        """
        try:
            for queued in items:
                found = await self._find(queued.new.uid)
                if found is not None and _same(found, queued.new):
                    _settle_result(queued, found)
            await self._commit(items)
        except BaseException as exc:
            for queued in items:
                if not queued.done.done():
                    queued.done.set_exception(exc if isinstance(exc, Exception) else _gone())
            if not isinstance(exc, Exception):
                raise
            logger.exception("inserts of a cancelled group could not be settled")


def _same(found: Memory, new: NewMemory) -> bool:
    """Whether ``found`` is the memory ``new`` inserted (not another of the same uid)."""
    return found.content == new.content and found.created_at == new.created_at


def _settle_result(queued: _Queued, memory: Memory) -> None:
    if not queued.done.done():
        queued.done.set_result(memory)


def _settle_error(queued: _Queued, exc: Exception) -> None:
    if not queued.done.done():
        queued.done.set_exception(exc)


def _gone() -> Exception:
    return StorageError("the insert was interrupted before it could be confirmed; store it again")
