"""MemoryMixin on real SPADE agents connected to the embedded XMPP server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from factories import unique_name
from spade.agent import Agent

from spade_memory.config import MemoryConfig
from spade_memory.errors import StoreClosedError
from spade_memory.spade.mixin import MemoryMixin
from spade_memory.testing.xmpp_server import EmbeddedXMPPServer

Starter = Callable[[Any], Awaitable[Any]]


def jid(xmpp: EmbeddedXMPPServer, name: str) -> str:
    return xmpp.jid(unique_name(name))


class Planner(MemoryMixin, Agent):
    """The README's few-line memory agent."""

    async def setup(self) -> None:
        self.stored = await self.memory.store("Planning starts on Mondays", category="pattern")


class Recorder:
    """Another plugin mixin overriding the same hooks and stop()."""

    events: list[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.events = []
        super().__init__(*args, **kwargs)

    async def _hook_plugin_before_connection(self, *args: Any, **kwargs: Any) -> None:
        self.events.append("recorder:before")
        following = getattr(super(), "_hook_plugin_before_connection", None)
        if following is not None:
            await following(*args, **kwargs)

    async def _hook_plugin_after_connection(self, *args: Any, **kwargs: Any) -> None:
        self.events.append("recorder:after")
        following = getattr(super(), "_hook_plugin_after_connection", None)
        if following is not None:
            await following(*args, **kwargs)

    async def stop(self) -> None:
        self.events.append("recorder:stop")
        await super().stop()  # type: ignore[misc]


class MemoryFirst(MemoryMixin, Recorder, Agent):
    async def setup(self) -> None:
        self.events.append(f"setup:memory-open={not self.memory.closed}")


class RecorderFirst(Recorder, MemoryMixin, Agent):
    async def setup(self) -> None:
        self.events.append(f"setup:memory-open={not self.memory.closed}")


def file_config(tmp_path: Path) -> MemoryConfig:
    return MemoryConfig(root=tmp_path / "memory", embedder="hashing")


async def test_memory_before_start_is_a_clear_error(
    xmpp: EmbeddedXMPPServer, tmp_path: Path
) -> None:
    agent = Planner(jid(xmpp, "planner"), "pw", port=xmpp.port, memory=file_config(tmp_path))
    with pytest.raises(StoreClosedError, match=r"opens when the agent starts"):
        _ = agent.memory
    with pytest.raises(StoreClosedError):
        _ = agent.memory_tools
    assert not (tmp_path / "memory").exists()


async def test_memory_opens_on_start_closes_on_stop_and_persists(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    config = file_config(tmp_path)
    agent = Planner(jid(xmpp, "planner"), "pw", port=xmpp.port, memory=config)
    await start(agent)
    manager = agent.memory
    assert manager.jid == str(agent.jid.bare)
    assert [m.content for m in await manager.list()] == ["Planning starts on Mondays"]
    assert {tool.name for tool in agent.memory_tools} >= {"store_memory", "search_memories"}
    await agent.stop()
    assert manager.closed
    with pytest.raises(StoreClosedError):
        _ = agent.memory

    await start(agent)
    memories = await agent.memory.list()
    # stored again by setup() at the second start: the same memory, reinforced
    assert [(m.content, m.access_count) for m in memories] == [("Planning starts on Mondays", 1)]
    assert agent.memory is not manager


async def test_in_memory_mode_forgets_on_stop_and_writes_nothing(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    config = MemoryConfig(in_memory=True, root=tmp_path / "never", embedder="hashing")
    agent = Planner(jid(xmpp, "ephemeral"), "pw", port=xmpp.port, memory=config)
    await start(agent)
    assert len(await agent.memory.list()) == 1
    await agent.stop()
    await start(agent)
    assert len(await agent.memory.list()) == 1
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("cls", [MemoryFirst, RecorderFirst])
async def test_cooperates_with_another_plugin_mixin(
    cls: type[Any], xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    agent = cls(jid(xmpp, "mro"), "pw", port=xmpp.port, memory=file_config(tmp_path))
    await start(agent)
    assert agent.events == ["recorder:before", "recorder:after", "setup:memory-open=True"]
    manager = agent.memory
    await agent.stop()
    assert agent.events[-1] == "recorder:stop"
    assert manager.closed
    assert not agent.is_alive()


class StopFails(Agent):
    async def stop(self) -> None:
        await super().stop()
        raise RuntimeError("agent stop failed")


class MemoryOverFailingStop(MemoryMixin, StopFails):
    pass


async def test_memory_closes_even_when_the_agent_stop_fails(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    agent = MemoryOverFailingStop(
        jid(xmpp, "fails"), "pw", port=xmpp.port, memory=file_config(tmp_path)
    )
    await start(agent)
    manager = agent.memory
    with pytest.raises(RuntimeError, match="agent stop failed"):
        await agent.stop()
    assert manager.closed


class SetupFails(MemoryMixin, Agent):
    async def setup(self) -> None:
        self.opened = self.memory
        raise RuntimeError("setup failed")


async def test_memory_closes_when_start_fails(xmpp: EmbeddedXMPPServer, tmp_path: Path) -> None:
    agent = SetupFails(jid(xmpp, "broken"), "pw", port=xmpp.port, memory=file_config(tmp_path))
    try:
        with pytest.raises(RuntimeError, match="setup failed"):
            await asyncio.wait_for(agent.start(auto_register=True), 20)
        assert agent.opened.closed
        with pytest.raises(StoreClosedError):
            _ = agent.memory
    finally:
        if agent.client is not None:
            await agent.client.disconnect()


def test_memory_argument_must_be_a_config() -> None:
    with pytest.raises(TypeError, match="MemoryConfig"):
        Planner("a@localhost", "pw", memory={"root": "x"})  # type: ignore[arg-type]
