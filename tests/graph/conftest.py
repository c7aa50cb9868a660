"""Fixtures of the graph tests: memories opened once their on-open check is done."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from spade_memory.config import MemoryConfig
from spade_memory.manager import MemoryManager

Opener = Callable[..., Awaitable[MemoryManager]]


@pytest.fixture
async def open_memory() -> AsyncIterator[Opener]:
    """Open memories that close at teardown.

    Each waits for the consistency check that runs when a memory opens, so that the
    writes a test makes next are not interleaved with it.
    """
    opened: list[MemoryManager] = []

    async def open_one(jid: str, config: MemoryConfig, **options: Any) -> MemoryManager:
        memory = await MemoryManager.open(jid, config, **options)
        opened.append(memory)
        await memory.maintenance.wait()
        return memory

    yield open_one
    for memory in reversed(opened):
        await memory.aclose()


_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:  # the repository's benchmarks package, however pytest started
    sys.path.insert(0, _ROOT)
