"""Reading a search's candidates: memories, hidden state and conversation neighbours.

The retriever reads its best candidates once, with their indexed tokens (the
reranker's input, MMR's word sets), their neighbours in the same conversation
(the turns linked to each as its previous and next, see ``previous_id`` in the
schema) and which of them are hidden; :func:`add_neighbours` then gives the neighbours of the
top hits a share of their score. What has been read is kept in :class:`Loaded`,
so no memory is read twice in one search.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..models import Memory, Viewer
from ..storage.base import BaseMemoryStore
from .rerank import asks_question, indexed_tokens

__all__ = ["HiddenFilter", "Loaded", "add_neighbours", "load", "read_head"]

HiddenFilter = Callable[[Sequence[int], float], Awaitable[set[int]]]
"""Given memory ids and the time, the ones to leave out (all their atoms expired)."""


@dataclass(slots=True)
class Loaded:
    """What one search has read of its candidates so far."""

    now: float
    memories: dict[int, Memory] = field(default_factory=dict)
    read: set[int] = field(default_factory=set)  # ids looked up (found or not)
    asked: set[int] = field(default_factory=set)  # ids whose hidden state was asked
    hidden: set[int] = field(default_factory=set)
    near: set[int] = field(default_factory=set)  # ids whose neighbours were read
    previous: dict[int, int] = field(default_factory=dict)  # id -> its previous turn
    following: dict[int, int] = field(default_factory=dict)  # id -> its next turn

    def keep(self, found: Mapping[int, tuple[Memory, str | None, int | None]]) -> None:
        """Keep memories read with their previous turns (and so their next turns)."""
        for key, (memory, _, previous) in found.items():
            self.memories[key] = memory
            if previous is not None:
                self.previous[key] = previous
                self.following[previous] = key


async def read_head(
    base: BaseMemoryStore,
    hidden_filter: HiddenFilter | None,
    head: Sequence[int],
    neighbours: bool,
    state: Loaded,
) -> dict[int, tuple[list[str], bool]]:
    """Read the best candidates, with their indexed tokens (the reranker's input,
    MMR's word sets) and, for the neighbour shares, their neighbours in the same
    conversation; then which of them are hidden. Returns the tokens (and whether
    the text asks) of those with indexed text."""
    loaded = await base.get_many_indexed(head, neighbours=neighbours)
    state.read.update(head)
    if neighbours:
        state.near.update(head)
    state.keep(loaded)
    if hidden_filter is not None:
        asked = list(dict.fromkeys([*head, *loaded])) if neighbours else list(head)
        if asked:
            state.hidden.update(await hidden_filter(asked, state.now))
            state.asked.update(asked)
    return {
        key: indexed_tokens(memory.content, tokens)
        for key, (memory, tokens, _) in loaded.items()
        if tokens is not None
    }


async def load(
    base: BaseMemoryStore,
    hidden_filter: HiddenFilter | None,
    ids: Sequence[int],
    state: Loaded,
) -> None:
    """Load those of ``ids`` not loaded yet and ask which of them are hidden,
    side by side (one wait for both reads)."""
    missing = [key for key in ids if key not in state.memories and key not in state.read]
    unasked: list[int] = []
    if hidden_filter is not None:
        unasked = [key for key in dict.fromkeys(ids) if key not in state.asked]
    loading = base.get_many(missing) if missing else None
    asking = hidden_filter(unasked, state.now) if unasked and hidden_filter else None
    if loading is not None and asking is not None:
        found, hidden = await asyncio.gather(loading, asking)
    else:
        found = await loading if loading is not None else {}
        hidden = await asking if asking is not None else set()
    state.memories.update(found)
    state.read.update(missing)
    state.asked.update(unasked)
    state.hidden.update(hidden)


async def add_neighbours(
    base: BaseMemoryStore,
    hidden_filter: HiddenFilter | None,
    scores: dict[int, float],
    limit: int,
    weight: float,
    reply_weight: float,
    state: Loaded,
    viewer: Viewer | None = None,
) -> dict[int, int]:
    """Give the memories stored just before and after a top hit, in the same
    conversation, a share of its score: a question's answer is often the
    next turn, and the turn before gives the context. When the top hit itself
    asks a question, the memory right after it gets ``reply_weight`` instead.

    The neighbours of a parent are the turns linked to it as its previous and
    next in the conversation; those of a parent in ``state.near`` were read with
    it, those of another are read here. A neighbour ``viewer`` does not see gets
    nothing: it never enters the scores.

    Returns:
        Each neighbour whose score was raised, with the parent it took it from.
    """
    parents = sorted(scores, key=lambda key: -scores[key])[:limit]
    unread = [parent for parent in parents if parent not in state.near]
    if unread:
        found = await base.get_many_indexed(unread, neighbours=True)
        state.read.update(unread)
        state.keep(found)
        await load(base, hidden_filter, list(dict.fromkeys([*unread, *found])), state)
        state.near.update(unread)
    loaded = state.memories
    raised: dict[int, int] = {}
    for parent in parents:
        origin = loaded.get(parent)
        if origin is None or origin.source_conversation is None:
            continue
        asks = asks_question(origin.content)
        turns = ((state.previous.get(parent), False), (state.following.get(parent), True))
        for neighbour_id, after in turns:
            if neighbour_id is None:
                continue
            neighbour = loaded.get(neighbour_id)
            if neighbour is None or neighbour.source_conversation != origin.source_conversation:
                continue
            if viewer is not None and not viewer.sees(neighbour):
                continue
            share = (reply_weight if asks and after else weight) * scores[parent]
            if share > scores.get(neighbour_id, 0.0):
                scores[neighbour_id] = share
                raised[neighbour_id] = parent
    return raised
