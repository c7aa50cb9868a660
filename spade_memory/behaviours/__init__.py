"""SPADE behaviours of memory agents: the LLM conversation behaviour."""

from __future__ import annotations

from .conversation import (
    DEFAULT_SYSTEM_PROMPT,
    IN_REPLY_TO,
    REPLY_WITH,
    AgentTool,
    ConversationBehaviour,
)

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "IN_REPLY_TO",
    "REPLY_WITH",
    "AgentTool",
    "ConversationBehaviour",
]
