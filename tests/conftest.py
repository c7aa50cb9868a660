"""Shared fixtures: a fresh memory root per test, managers that close themselves, and
an embedded XMPP server with a starter that stops every agent it started.

Plain builders (configurations, filled memories, agent doubles, child processes) are in
``factories.py``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from spade.container import Container

from spade_memory.config import MemoryConfig
from spade_memory.manager import MemoryManager
from spade_memory.testing.xmpp_server import EmbeddedXMPPServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on the one Prosody server run on one worker (``-n``): the examples log
    in with fixed names (alice@, bob@), and two logins of one name take each other's
    messages."""
    for item in items:
        if item.get_closest_marker("prosody") is not None:
            item.add_marker(pytest.mark.xdist_group("prosody"))


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


@pytest.fixture
async def fresh_memory(memory_config: MemoryConfig) -> AsyncIterator[MemoryManager]:
    """An empty in-memory memory of ``alice@localhost`` (nothing on disk), closed after."""
    async with await MemoryManager.open("alice@localhost", memory_config) as opened:
        yield opened


@pytest.fixture
async def xmpp(tmp_path: Path) -> AsyncIterator[EmbeddedXMPPServer]:
    """An embedded XMPP server for one test, in a fresh SPADE container."""
    Container().reset()
    async with EmbeddedXMPPServer(folder=tmp_path / "xmpp") as server:
        yield server


@pytest.fixture
async def start(xmpp: EmbeddedXMPPServer) -> AsyncIterator[Callable[[Any], Awaitable[Any]]]:
    """Start an agent on ``xmpp`` (registering it); every one is stopped afterwards."""
    started: list[Any] = []

    async def starter(agent: Any) -> Any:
        started.append(agent)
        await asyncio.wait_for(agent.start(auto_register=True), 20)
        return agent

    yield starter
    for agent in started:
        with contextlib.suppress(Exception):
            await agent.stop()
