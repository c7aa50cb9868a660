"""The texts an embedder refuses: told apart from the rest of their batch, tried again later.

An embedder that fails on a batch (raises, or answers something unusable:
:func:`~spade_memory.embedding.calls.checked_documents`) is asked again for each
half of it, down to single texts (:meth:`Refusals.embed`): the texts it refuses
are left out, the others are embedded at once. A refused text is tried again
after ``first`` seconds, doubling up to ``longest``, at most ``attempts`` times;
after that, only once what it was read from changes (:meth:`Refusals.due`).

Each item is what was read to be embedded, compared whole: a memory's
:class:`~spade_memory.storage.embeddings.PendingVector`, a graph entry's
:class:`~spade_memory.storage.graph_store.PendingEntry`. Read again differently
(another text, or the same text written again), it is due at once.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from ..embedding.calls import embed_documents, embedder_name
from ..errors import EmbeddingError, EmbeddingUnavailable
from ..models import Embedder

__all__ = ["Embeddable", "Refusal", "Refusals"]

logger = logging.getLogger(__name__)


class Embeddable(Protocol):
    """What is read to be embedded: the memory it belongs to and the text."""

    @property
    def memory_id(self) -> int: ...

    @property
    def text(self) -> str: ...


_Item = TypeVar("_Item", bound=Embeddable)


@dataclass(frozen=True)
class _Refused(Generic[_Item]):
    """An item whose text the embedder refused, how often, and when it is tried next
    (loop time; infinite: not until it changes)."""

    item: _Item
    attempts: int
    retry_at: float


@dataclass(frozen=True)
class Refusal:
    """Refusals first met, of one reason: the reason as logged, the error, the memories."""

    reason: str
    error: BaseException
    memory_ids: list[int]


class Refusals(Generic[_Item]):
    """The items of one kind whose text an embedder refused, by memory id.

    Args:
        agent: the memory's agent, in log lines.
        what: what an item is, in log lines ("memory", "graph entry of memory").
        first: the wait before a refused text is tried again, in seconds.
        longest: the longest wait between two tries.
        attempts: how many times a text is tried before it waits for a change.
    """

    def __init__(
        self, agent: str, what: str, *, first: float, longest: float, attempts: int
    ) -> None:
        self._agent = agent
        self._what = what
        self._first = first
        self._longest = longest
        self._attempts = attempts
        self._refused: dict[int, _Refused[_Item]] = {}
        # the reasons of the refusals first met since take_new, with their memories
        self._new: dict[str, Refusal] = {}

    @property
    def first(self) -> float:
        """The wait before a refused text is tried again, in seconds."""
        return self._first

    @property
    def attempts(self) -> int:
        """How many times a text is tried before it waits for a change."""
        return self._attempts

    def due(self, item: _Item, now: float) -> bool:
        """Whether ``item`` is to be embedded at loop time ``now``: not refused, refused
        as it was before a change (read differently now), or refused and due again."""
        refused = self._refused.get(item.memory_id)
        if refused is None:
            return True
        if refused.item != item:
            del self._refused[item.memory_id]
            return True
        return refused.retry_at <= now

    def next_due(self) -> float:
        """The loop time the first refused item is due again (infinite: none is)."""
        return min((refused.retry_at for refused in self._refused.values()), default=math.inf)

    def keep_only(self, memory_ids: Collection[int]) -> None:
        """Forget the refusals of the memories not in ``memory_ids`` (no longer waiting)."""
        self._refused = {i: r for i, r in self._refused.items() if i in memory_ids}

    def discard(self, memory_ids: Iterable[int]) -> None:
        """Forget the refusals of these memories."""
        for memory_id in memory_ids:
            self._refused.pop(memory_id, None)

    def clear(self) -> None:
        """Forget every refusal (another embedder is used from now on)."""
        self._refused.clear()

    def take_new(self) -> list[Refusal]:
        """The refusals first met since the last call, one per reason."""
        new, self._new = self._new, {}
        return list(new.values())

    async def embed(
        self, embedder: Embedder, batch: list[_Item]
    ) -> tuple[list[_Item], NDArray[np.float32]]:
        """The items of ``batch`` that ``embedder`` embedded, and their vectors.

        When it fails on the batch, each half is embedded alone, down to single
        texts: the texts it refuses are left out and recorded, the others are
        embedded now (and their earlier refusals forgotten).

        Raises:
            EmbeddingUnavailable: the embedder did not answer; try again later.
        """
        if not batch:
            return [], np.zeros((0, embedder.dim), dtype=np.float32)
        try:
            vectors = await embed_documents(embedder, [item.text for item in batch])
        except EmbeddingUnavailable:
            raise
        except Exception as exc:
            if len(batch) == 1:
                self._refuse(embedder, batch[0], exc)
                return [], np.zeros((0, embedder.dim), dtype=np.float32)
            logger.debug(
                "%s: the embedder failed on %d texts (%s); embedding them in halves",
                self._agent,
                len(batch),
                exc,
            )
            half = len(batch) // 2
            first, first_vectors = await self.embed(embedder, batch[:half])
            second, second_vectors = await self.embed(embedder, batch[half:])
            return first + second, np.concatenate([first_vectors, second_vectors])
        self.discard(item.memory_id for item in batch)
        return batch, vectors

    def _refuse(self, embedder: Embedder, item: _Item, exc: Exception) -> None:
        """Record that the embedder refused an item's text: it is tried again later,
        at once when the item changes."""
        before = self._refused.get(item.memory_id)
        attempts = 1 if before is None or before.item != item else before.attempts + 1
        if attempts >= self._attempts:
            retry_at = math.inf  # when it changes, or on the next open
        else:
            delay = min(self._first * 2.0 ** (attempts - 1), self._longest)
            retry_at = asyncio.get_running_loop().time() + delay
        self._refused[item.memory_id] = _Refused(item, attempts, retry_at)
        if attempts > 1:
            logger.debug(
                "%s: %s %d refused again by the embedder (%d times): %s",
                self._agent,
                self._what,
                item.memory_id,
                attempts,
                exc,
            )
            return
        reason = (
            str(exc)
            if isinstance(exc, EmbeddingError)
            else f"the embedder {embedder_name(embedder)} raised {type(exc).__name__}: {exc}"
        )
        self._new.setdefault(reason, Refusal(reason, exc, [])).memory_ids.append(item.memory_id)
