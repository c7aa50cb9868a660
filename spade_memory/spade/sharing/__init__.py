"""Memory sharing over XMPP: ask another agent's memory, share a memory with it.

Turn it on with ``MemoryConfig(sharing=SharingConfig(...))``; a
:class:`~spade_memory.spade.MemoryMixin` agent then answers the protocol
(:class:`SharingResponder`), offers its LLM the tools ``ask_agent_memory`` and
``share_memory``, and exposes :class:`MemorySharing` as ``agent.sharing``.
The message format is described in :mod:`spade_memory.spade.sharing.protocol`.
"""

from __future__ import annotations

from .client import MemorySharing, PendingAnswers
from .policy import RateLimiter, SharingPolicy
from .protocol import (
    PROTOCOL,
    QUERY_PROTOCOL,
    SHARE_PROTOCOL,
    MemoryQuery,
    QueryAnswer,
    SharedMemory,
    SharedResult,
    is_protocol_message,
    protocol_template,
)
from .responder import SharingResponder

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
