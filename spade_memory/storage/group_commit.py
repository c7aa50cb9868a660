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
again when it did not, so none is lost and none is written twice. The queue, the
gate and the cancellation rules are :class:`spade_memory.storage.batching.Batcher`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import StorageError
from ..models import Memory
from ..text.graph import MemoryGraph
from .batching import Batcher, Pending
from .derivation import Deferred
from .memory_rows import IndexedText, NewMemory

__all__ = ["GroupCommit", "InsertMany"]

logger = logging.getLogger(__name__)


class InsertMany(Protocol):
    """The store's ``insert_many``: memories inserted in one transaction."""

    def __call__(
        self,
        items: Sequence[tuple[NewMemory, IndexedText]],
        *,
        graphs: Sequence[MemoryGraph | Deferred | None] | None = None,
    ) -> Awaitable[list[Memory]]: ...


FindByUid = Callable[[str], Awaitable[Memory | None]]
"""The store's ``get_by_uid``: a memory as committed, read after the writes before it."""


@dataclass(frozen=True, slots=True)
class _Insert:
    new: NewMemory
    text: IndexedText
    graph: MemoryGraph | Deferred | None


_Queued = Pending[_Insert, Memory]


class GroupCommit:
    """Single inserts waiting for the next transaction, committed together."""

    def __init__(self, insert_many: InsertMany, find: FindByUid) -> None:
        self._insert_many = insert_many
        self._find = find
        self._batcher: Batcher[_Insert, Memory] = Batcher(
            self._commit, settle=self._settle, name="spade_memory group commit"
        )

    @property
    def queue(self) -> list[_Queued]:
        """The inserts waiting for the next transaction."""
        return self._batcher.queue

    @property
    def gate(self) -> asyncio.Lock:
        """Held while a group's transaction runs."""
        return self._batcher.gate

    async def insert(
        self, new: NewMemory, text: IndexedText, graph: MemoryGraph | Deferred | None
    ) -> Memory:
        """Queue one insert; returns once the transaction holding it committed."""
        return await self._batcher.submit(_Insert(new, text, graph))

    async def wait_settled(self) -> None:
        """Wait until inserts of cancelled callers' groups are settled (for closing)."""
        await self._batcher.wait_background()

    async def _commit(self, batch: Sequence[_Queued]) -> None:
        """Commit ``batch`` in one transaction and settle its items.

        A failed shared transaction is retried one insert at a time, skipping the
        inserts whose callers gave up meanwhile.
        """
        live = [queued for queued in batch if queued.wanted]
        if not live:
            return
        try:
            memories = await self._insert_many(
                [(queued.item.new, queued.item.text) for queued in live],
                graphs=[queued.item.graph for queued in live],
            )
        except Exception as exc:
            if len(live) == 1:
                live[0].fail(exc)
                return
        else:
            for queued, memory in zip(live, memories, strict=True):
                queued.resolve(memory)
            return
        for queued in live:  # the shared transaction failed
            if not queued.wanted:
                continue
            try:
                alone = await self._insert_many(
                    [(queued.item.new, queued.item.text)], graphs=[queued.item.graph]
                )
            except Exception as exc:
                queued.fail(exc)
            else:
                queued.resolve(alone[0])

    async def _settle(self, items: list[_Queued]) -> None:
        """Settle inserts whose transaction's outcome its cancelled caller never saw.

        Reads go to the connection's thread after the writes queued before them,
        so what each read finds is what that transaction left.
        """
        try:
            for queued in items:
                found = await self._find(queued.item.new.uid)
                if found is not None and _same(found, queued.item.new):
                    queued.resolve(found)
            await self._commit(items)
        except BaseException as exc:
            for queued in items:
                queued.fail(exc if isinstance(exc, Exception) else _gone())
            if not isinstance(exc, Exception):
                raise
            logger.exception("inserts of a cancelled group could not be settled")


def _same(found: Memory, new: NewMemory) -> bool:
    """Whether ``found`` is the memory ``new`` inserted (not another of the same uid)."""
    return found.content == new.content and found.created_at == new.created_at


def _gone() -> Exception:
    return StorageError("the insert was interrupted before it could be confirmed; store it again")
