"""Who may ask what of this agent's memory, whose memories it stores, and how often.

Every decision is about the *bare JID the XMPP server gave as the sender* of a
message, normalised with :func:`~spade_memory.identity.normalize_jid`; nothing a
message says about itself in its body or metadata counts.

- A sender may query the categories whose allow-list names it (or ``"*"``),
  never a private category; with no such category it may ask nothing. Within
  them it gets only what its viewer sees (:mod:`spade_memory.disclosure`): never
  what another partner told the agent privately.
- A sender's shared memories are stored only if ``accept_from`` names it (or ``"*"``).
- Every protocol message a sender sends takes a token from its bucket
  (``rate_per_minute``, up to ``burst`` at once); an empty bucket means a refusal.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...config import SharingConfig
from ...disclosure import ANYONE, visible_categories
from ..rate_limit import RateLimiter

__all__ = ["RateLimiter", "SharingPolicy"]


class SharingPolicy:
    """The owner's decisions for one memory, from its :class:`SharingConfig`.

    Args:
        config: the allow-lists, private categories and limits.
        categories: the categories the memory has.
        clock: seconds, monotonic (for the rate limit).
    """

    def __init__(
        self,
        config: SharingConfig,
        categories: tuple[str, ...],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.categories = categories
        self._limiter = RateLimiter(
            rate_per_minute=config.rate_per_minute, burst=config.burst, clock=clock
        )

    def visible_categories(self, sender: str) -> tuple[str, ...]:
        """The categories ``sender`` (a normalised bare JID) may query, in memory order.

        The same categories it sees in chat (:func:`spade_memory.disclosure.visible_categories`).
        """
        return visible_categories(self.config, self.categories, sender)

    def may_query(self, sender: str) -> bool:
        """Whether ``sender`` may query any category at all."""
        return bool(self.visible_categories(sender))

    def may_see(self, sender: str, category: str) -> bool:
        """Whether ``sender`` may see memories of ``category``."""
        return category in self.visible_categories(sender)

    def accepts_from(self, sender: str) -> bool:
        """Whether memories shared by ``sender`` are stored."""
        accepted = self.config.accept_from
        return sender in accepted or ANYONE in accepted

    def throttle(self, sender: str) -> float:
        """Charge one message to ``sender``: 0.0 if allowed, else seconds to wait."""
        return self._limiter.take(sender)
