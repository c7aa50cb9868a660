"""The SPADE edge: every module that imports spade.

- :class:`MemoryMixin` gives any SPADE agent class a memory; :class:`LLMAgent` is
  an agent whose LLM talks over XMPP and calls the memory tools;
- behaviours: :class:`ConversationBehaviour` (the LLM's conversation loop) and
  :class:`MaintenanceBehaviour` (scheduled upkeep);
- :mod:`spade_memory.spade.sharing`: memory queries and shares between agents over XMPP.
"""

from __future__ import annotations

from .conversation import (
    DEFAULT_SYSTEM_PROMPT,
    IN_REPLY_TO,
    REPLY_WITH,
    AgentTool,
    ConversationBehaviour,
)
from .llm_agent import LLMAgent
from .maintenance_behaviour import MaintenanceBehaviour
from .mixin import MemoryMixin

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "IN_REPLY_TO",
    "REPLY_WITH",
    "AgentTool",
    "ConversationBehaviour",
    "LLMAgent",
    "MaintenanceBehaviour",
    "MemoryMixin",
]
