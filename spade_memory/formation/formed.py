"""A memory formed from a conversation: what to store, and the messages it came from."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FORMED_KINDS", "FormedMemory"]

FORMED_KINDS: tuple[str, ...] = (
    "episode",
    "summary",
    "llm_fact",
    "identity",
    "relation",
    "preference",
    "plan",
    "habit",
    "ability",
    "fact",
)
"""``episode`` (one turn, verbatim), ``summary`` (an LLM's summary of a window),
``llm_fact`` (a fact an LLM took from a window) and the statement kinds of
:mod:`spade_memory.text.statements`."""


@dataclass(frozen=True, slots=True)
class FormedMemory:
    """One memory formed from a window of a conversation, ready to store.

    Attributes:
        content: the memory's text.
        category: its category (one of those the agent's memory allows).
        context: when it was said (``"1:56 pm on 8 May, 2023"``, see
            :mod:`spade_memory.formation.dates`), or ``None``.
        importance: from 0 to 1.
        confidence: from 0 to 1: 1 for a turn kept verbatim, less for what rules or
            a model read into it.
        sources: the ids of the messages it was formed from (``ConversationMessage.id``),
            sorted, never empty.
        kind: what it is, one of :data:`FORMED_KINDS`.
        entities: names to link it to in the graph, besides those found in its text.
    """

    content: str
    category: str
    context: str | None
    importance: float
    confidence: float
    sources: tuple[int, ...]
    kind: str
    entities: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("a formed memory names at least one source message")
        if list(self.sources) != sorted(set(self.sources)):
            raise ValueError("a formed memory's sources are sorted and distinct")
