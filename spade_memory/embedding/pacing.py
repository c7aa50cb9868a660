"""The pace of requests to a rate-limited endpoint: a delay that adapts to HTTP 429s and
to the tokens-per-minute budget a server reports.

Every request first asks :meth:`RequestPacer.reserve` when it may start. A 429 holds
every start until its ``Retry-After`` has passed; starts are then spaced by
:attr:`RequestPacer.delay`, which doubles on each 429 (from 50 ms, up to 2 s) and
halves on each success, so a client that was told to slow down keeps a steady pace while the
server is at its limit, and is back to full speed a few answers after it copes. A
server that reports ``x-ratelimit-remaining-tokens`` below what the next request needs
holds every start until its ``x-ratelimit-reset-tokens`` has passed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping

from ..llm.retry_after import MAX_RETRY_AFTER_SECONDS

__all__ = ["RequestPacer", "parse_duration"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_MIN_SLOWDOWN = 0.05
_SPEEDUP = 0.5


def parse_duration(value: str | None) -> float | None:
    """Seconds of a rate-limit duration such as ``"20ms"``, ``"1.5s"``, ``"6m0s"`` or
    ``"12"`` (plain seconds); ``None`` when it is none of those."""
    if not value:
        return None
    text = value.strip().lower()
    try:
        return max(float(text), 0.0)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


class RequestPacer:
    """Spaces the starts of requests to one endpoint (shared by every caller of it).

    Args:
        max_delay: the longest spacing between two starts, in seconds.
        clock: a monotonic clock, in seconds.
    """

    def __init__(
        self, *, max_delay: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_delay = max_delay
        self.delay = 0.0
        self._clock = clock
        self._next_start = 0.0
        self._hold_until = 0.0

    def reserve(self) -> float:
        """Take the next start; returns how many seconds to wait for it."""
        now = self._clock()
        start = max(now, self._next_start, self._hold_until)
        self._next_start = start + self.delay
        return start - now

    def held_for(self) -> float:
        """Seconds until any request may start (0 when one may start now)."""
        return max(self._hold_until - self._clock(), 0.0)

    @property
    def slowed_down(self) -> bool:
        """Whether the server asked to slow down and the pace has not recovered yet (a
        spacing between starts, or every start held)."""
        return self.delay > 0 or self._hold_until > self._clock()

    def slowed(self, retry_after: float | None) -> None:
        """The server answered 429: hold every start for its ``Retry-After`` (at most
        :data:`MAX_RETRY_AFTER_SECONDS`), and space requests further apart from then on."""
        self.delay = min(max(self.delay * 2.0, _MIN_SLOWDOWN), self.max_delay)
        if retry_after is not None:
            hold = min(max(retry_after, 0.0), MAX_RETRY_AFTER_SECONDS)
            self._hold_until = max(self._hold_until, self._clock() + hold)

    def succeeded(self, headers: Mapping[str, str], next_tokens: int) -> None:
        """A request succeeded: speed up, unless the token budget left is too small."""
        self.delay *= _SPEEDUP
        if self.delay < 0.001:
            self.delay = 0.0
        remaining = headers.get("x-ratelimit-remaining-tokens")
        if remaining is None:
            return
        try:
            left = int(float(remaining))
        except ValueError:
            return
        if left >= next_tokens:
            return
        reset = parse_duration(headers.get("x-ratelimit-reset-tokens"))
        wait = reset if reset is not None else 1.0
        self._hold_until = max(self._hold_until, self._clock() + min(wait, 60.0))
