"""LLM clients: the protocol and an OpenAI-compatible HTTP client.

The offline scripted client is :class:`spade_memory.testing.ScriptedLLM`.
"""

from __future__ import annotations

from .messages import (
    ChatMessage,
    LLMClient,
    LLMResponse,
    ToolCall,
)
from .openai import OpenAICompatibleLLM

__all__ = [
    "ChatMessage",
    "LLMClient",
    "LLMResponse",
    "OpenAICompatibleLLM",
    "ToolCall",
]
