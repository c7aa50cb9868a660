"""A token bucket per sender: how often one partner may make the agent work.

The memory-sharing responder, the conversation behaviour and the ``not-understood``
answers each keep one :class:`RateLimiter`, keyed by the bare JID the XMPP server
gave as the sender.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MAX_TRACKED_SENDERS", "RateLimiter"]

MAX_TRACKED_SENDERS = 4_096


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """A token bucket per sender, for at most ``max_senders`` senders (least recent dropped).

    Args:
        rate_per_minute: tokens added per minute.
        burst: the bucket's size; a new sender starts with a full bucket.
        clock: seconds, monotonic.
    """

    def __init__(
        self,
        *,
        rate_per_minute: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        max_senders: int = MAX_TRACKED_SENDERS,
    ) -> None:
        if rate_per_minute <= 0 or burst < 1 or max_senders < 1:
            raise ValueError("rate_per_minute must be > 0, burst and max_senders >= 1")
        self._rate = rate_per_minute / 60.0
        self._burst = float(burst)
        self._clock = clock
        self._max = max_senders
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def take(self, sender: str) -> float:
        """Take a token for ``sender``.

        Returns:
            0.0 if a token was taken, else the seconds until one is available.
        """
        now = self._clock()
        bucket = self._buckets.pop(sender, None)
        if bucket is None:
            bucket = _Bucket(tokens=self._burst, stamp=now)
        else:
            elapsed = max(now - bucket.stamp, 0.0)
            bucket.tokens = min(self._burst, bucket.tokens + elapsed * self._rate)
            bucket.stamp = now
        self._buckets[sender] = bucket
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self._rate
