"""Helpers for tests, examples and demos: a deterministic scripted LLM and an
embedded XMPP server.

Nothing here needs the network: :class:`ScriptedLLM` understands simple requests
("remember that ...", "what do you know about ...") and emits real tool calls;
:class:`EmbeddedXMPPServer` runs SPADE's pyjabber server on loopback.
"""

from __future__ import annotations

from ..embedding.hashing import HashingEmbedder
from .scripted_llm import ScriptedLLM
from .xmpp_server import EmbeddedXMPPServer

__all__ = ["EmbeddedXMPPServer", "HashingEmbedder", "ScriptedLLM"]
