"""Fixtures for the spade_llm bridge: spade_llm is imported through it, network-free.

The tests use the shared ``fresh_memory`` fixture (an in-memory ``alice@localhost``).
"""

from __future__ import annotations

# Imported first, so LiteLLM (under spade_llm) loads its bundled price list quietly.
from spade_memory.integrations import spade_llm as bridge  # noqa: F401
