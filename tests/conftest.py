"""Shared fixtures: a fresh memory root per test, and managers that close themselves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from spade_memory.config import MemoryConfig
from spade_memory.manager import MemoryManager


@pytest.fixture
def memory_root(tmp_path: Path) -> Path:
    root = tmp_path / "memory"
    root.mkdir()
    return root


@pytest.fixture
def file_config(memory_root: Path) -> MemoryConfig:
    return MemoryConfig(root=memory_root, embedder="hashing")


@pytest.fixture
def memory_config() -> MemoryConfig:
    return MemoryConfig(in_memory=True, embedder="hashing")


@pytest.fixture
async def manager(file_config: MemoryConfig) -> AsyncIterator[MemoryManager]:
    async with await MemoryManager.open("alice@localhost", file_config) as opened:
        yield opened
