"""Deprecated: ``spade_memory.sharing`` moved.

It is now :mod:`spade_memory.spade.sharing`; import from there, or from ``spade_memory``.
This alias warns, and goes away in a later version.
"""

from __future__ import annotations

import warnings

from spade_memory.spade.sharing import (
    PROTOCOL,
    QUERY_PROTOCOL,
    SHARE_PROTOCOL,
    MemoryQuery,
    MemorySharing,
    PendingAnswers,
    QueryAnswer,
    RateLimiter,
    SharedMemory,
    SharedResult,
    SharingPolicy,
    SharingResponder,
    is_protocol_message,
    protocol_template,
)

__all__ = [
    "PROTOCOL",
    "QUERY_PROTOCOL",
    "SHARE_PROTOCOL",
    "MemoryQuery",
    "MemorySharing",
    "PendingAnswers",
    "QueryAnswer",
    "RateLimiter",
    "SharedMemory",
    "SharedResult",
    "SharingPolicy",
    "SharingResponder",
    "is_protocol_message",
    "protocol_template",
]

warnings.warn(
    f"{__name__} moved to spade_memory.spade.sharing; import it from there",
    DeprecationWarning,
    stacklevel=2,
)
