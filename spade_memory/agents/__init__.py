"""Memory agents for SPADE: the ``MemoryMixin`` for any agent class, and ``LLMAgent``."""

from __future__ import annotations

from .llm_agent import LLMAgent
from .mixin import MemoryMixin

__all__ = ["LLMAgent", "MemoryMixin"]
