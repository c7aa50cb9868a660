"""Fixtures for the spade_llm bridge: spade_llm is imported through it, network-free."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from spade_memory.config import MemoryConfig

# Imported first, so LiteLLM (under spade_llm) loads its bundled price list quietly.
from spade_memory.integrations import spade_llm as bridge  # noqa: F401
from spade_memory.manager import MemoryManager

AGENT = "alice@localhost"


@pytest.fixture
async def in_memory_manager() -> AsyncIterator[MemoryManager]:
    config = MemoryConfig(in_memory=True, embedder="hashing")
    async with await MemoryManager.open(AGENT, config) as opened:
        yield opened
