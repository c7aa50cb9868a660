"""Fixtures of the maintenance tests: a simulated clock and memories that close themselves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from maint_support import Clock, Opener

from spade_memory.config import MaintenanceConfig, MemoryConfig
from spade_memory.manager import MemoryManager


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "memory"
    folder.mkdir()
    return folder


@pytest.fixture
async def open_memory(root: Path, clock: Clock) -> AsyncIterator[Opener]:
    """Open ``alice@localhost`` under ``root`` on the simulated clock (closed at the end)."""
    opened: list[MemoryManager] = []

    async def opener(jid: str = "alice@localhost", **options: Any) -> MemoryManager:
        maintenance = options.pop("maintenance", MaintenanceConfig(check_on_open=False))
        config = MemoryConfig(
            root=options.pop("root", root),
            embedder=options.pop("embedder", "hashing"),
            maintenance=maintenance,
            **options,
        )
        manager = await MemoryManager.open(jid, config, clock=clock)
        opened.append(manager)
        return manager

    yield opener
    for manager in opened:
        await manager.aclose()
