"""Bridges from spade_memory to other agent frameworks, one module per framework.

Nothing here is imported by ``import spade_memory``: import the bridge you use, e.g.
``spade_memory.integrations.spade_llm`` (needs ``pip install "spade-memory[spade-llm]"``).
"""

from __future__ import annotations

__all__: list[str] = []
