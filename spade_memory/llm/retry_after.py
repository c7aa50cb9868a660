"""The ``Retry-After`` header of an HTTP answer, in seconds (shared by every HTTP client)."""

from __future__ import annotations

import email.utils
import math
import time

__all__ = ["MAX_RETRY_AFTER_SECONDS", "parse_retry_after"]

#: The longest wait a ``Retry-After`` header can impose, in seconds.
MAX_RETRY_AFTER_SECONDS = 30.0


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date), or ``None``."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        seconds = None
    if seconds is not None:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
