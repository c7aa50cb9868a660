"""LLM clients: the protocol and an OpenAI-compatible HTTP client.

The offline scripted client is :class:`spade_memory.testing.ScriptedLLM`.

:class:`OpenAICompatibleLLM` is imported when first used (PEP 562): an embedder
that only shares this package's retry rules does not load the HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import on_first_use
from .messages import (
    ChatMessage,
    LLMClient,
    LLMResponse,
    ToolCall,
)

if TYPE_CHECKING:
    from .openai import OpenAICompatibleLLM

__all__ = [
    "ChatMessage",
    "LLMClient",
    "LLMResponse",
    "OpenAICompatibleLLM",
    "ToolCall",
]

__getattr__, __dir__ = on_first_use(globals(), {"OpenAICompatibleLLM": "openai"})
