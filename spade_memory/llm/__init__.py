"""LLM clients: the protocol, an OpenAI-compatible HTTP client and an offline scripted one."""

from __future__ import annotations

from .messages import ChatMessage, LLMClient, LLMResponse, ToolCall
from .openai import OpenAICompatibleLLM
from .scripted import ScriptedLLM

__all__ = [
    "ChatMessage",
    "LLMClient",
    "LLMResponse",
    "OpenAICompatibleLLM",
    "ScriptedLLM",
    "ToolCall",
]
