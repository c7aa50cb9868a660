"""Speakers: who said a memory, for chat lines stored as ``"Name: text"``.

A memory that starts with a name followed by a colon (``"Melanie: we went
camping"``, ``"张伟：我们去爬山了"``) was said by that name. Its graph gets one more
node, ``speaker:<key>`` of type ``"speaker"``, beside the name's own node: the
name's node stands for every memory that names the person (what they said, and
what others said to or about them), the speaker node for what they said only.

In a two-person chat each speaker is named by about every memory, so the name
alone selects nothing; a question about a person ("What does Melanie do to
destress?") is nearly always answered by what that person said. The graph route
(:mod:`spade_memory.retrieval.graph`) uses the speaker nodes a query names to
prefer, among the memories closest to the query, those the person said.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .graph import Entity
from .mentions import Mention

__all__ = ["SPEAKER_PREFIX", "SPEAKER_TYPE", "speaker_entity", "speaker_key", "speaker_keys"]

SPEAKER_TYPE = "speaker"
"""The node type of a speaker node."""

SPEAKER_PREFIX = "speaker:"
"""What a speaker node's key starts with; the rest is the name's own key."""

_SPEAKER_KINDS = frozenset({"name", "person", "mention", "jid"})
_AFTER_NAME = re.compile(r"[ \t]*[:\uff1a][ \t]*\S")


def speaker_key(key: str) -> str:
    """The key of the speaker node of the entity with key ``key``."""
    return SPEAKER_PREFIX + key


def speaker_entity(text: str, mentions: Sequence[Mention]) -> Entity | None:
    """The speaker node of ``text``, or ``None`` when it does not start with ``"Name: "``.

    The name must be the first mention of the text (a person, name, @-mention or
    JID), with nothing but spaces before it and a colon (ASCII or full-width)
    right after it, followed by some text: ``"Note: buy milk"`` has no speaker.
    """
    if not mentions:
        return None
    first = min(mentions, key=lambda mention: mention.start)
    if first.entity.type not in _SPEAKER_KINDS or text[: first.start].strip():
        return None
    if not _AFTER_NAME.match(text, first.end):
        return None
    return Entity(key=speaker_key(first.entity.key), type=SPEAKER_TYPE, value=first.entity.value)


def speaker_keys(keys: Iterable[str]) -> list[str]:
    """The speaker node keys a query may name: one per key it may name (speaker keys aside)."""
    return [speaker_key(key) for key in keys if key and not key.startswith(SPEAKER_PREFIX)]
