"""Deprecated: ``spade_memory.sharing.protocol`` moved.

It is now :mod:`spade_memory.spade.sharing.protocol`; import from there, or from ``spade_memory``.
This alias warns, and goes away in a later version.
"""

from __future__ import annotations

import warnings

from spade_memory.spade.sharing.protocol import (
    ANSWER_PERFORMATIVES,
    FAILURE,
    IN_REPLY_TO,
    INFORM,
    MAX_BODY_CHARS,
    MAX_QUERY_CHARS,
    PERFORMATIVE,
    PROTOCOL,
    QUERY_PROTOCOL,
    QUERY_REF,
    REFUSE,
    REQUEST,
    SHARE_PROTOCOL,
    MemoryQuery,
    QueryAnswer,
    SharedMemory,
    SharedResult,
    build_answer,
    is_protocol_message,
    make_answer,
    make_request,
    parse_answer,
    parse_query,
    parse_reason,
    parse_receipt,
    parse_shared_memory,
    protocol_template,
    reason_body,
    receipt_body,
)

__all__ = [
    "ANSWER_PERFORMATIVES",
    "FAILURE",
    "INFORM",
    "IN_REPLY_TO",
    "MAX_BODY_CHARS",
    "MAX_QUERY_CHARS",
    "PERFORMATIVE",
    "PROTOCOL",
    "QUERY_PROTOCOL",
    "QUERY_REF",
    "REFUSE",
    "REQUEST",
    "SHARE_PROTOCOL",
    "MemoryQuery",
    "QueryAnswer",
    "SharedMemory",
    "SharedResult",
    "build_answer",
    "is_protocol_message",
    "make_answer",
    "make_request",
    "parse_answer",
    "parse_query",
    "parse_reason",
    "parse_receipt",
    "parse_shared_memory",
    "protocol_template",
    "reason_body",
    "receipt_body",
]

warnings.warn(
    f"{__name__} moved to spade_memory.spade.sharing.protocol; import it from there",
    DeprecationWarning,
    stacklevel=2,
)
