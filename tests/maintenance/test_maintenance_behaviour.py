"""The maintenance behaviour: runs due work on the agent's schedule, stops cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from maint_support import Opener
from spade.agent import Agent
from spade.container import Container

from spade_memory.config import MaintenanceConfig, MemoryConfig
from spade_memory.maintenance.service import Maintenance
from spade_memory.spade.maintenance_behaviour import MaintenanceBehaviour
from spade_memory.spade.mixin import MemoryMixin
from spade_memory.testing.xmpp_server import EmbeddedXMPPServer


class Keeper(MemoryMixin, Agent):  # type: ignore[misc]
    """An agent with a memory and nothing else."""


@pytest.fixture
async def xmpp(tmp_path: Path) -> AsyncIterator[EmbeddedXMPPServer]:
    Container().reset()
    async with EmbeddedXMPPServer(folder=tmp_path / "xmpp") as server:
        yield server


@pytest.fixture
async def keeper(xmpp: EmbeddedXMPPServer, root: Path) -> AsyncIterator[Any]:
    agents: list[Keeper] = []

    async def make(**maintenance: Any) -> Keeper:
        config = MemoryConfig(
            root=root,
            embedder="hashing",
            maintenance=MaintenanceConfig(check_on_open=False, **maintenance),
        )
        name = xmpp.jid(f"keeper-{uuid.uuid4().hex[:8]}")
        agent = Keeper(name, "secret", memory=config, port=xmpp.port)
        agents.append(agent)
        await asyncio.wait_for(agent.start(auto_register=True), 20)
        return agent

    yield make
    for agent in agents:
        with contextlib.suppress(Exception):
            await agent.stop()


def behaviours_of(agent: Agent) -> list[MaintenanceBehaviour]:
    return [b for b in agent.behaviours if isinstance(b, MaintenanceBehaviour)]


async def test_the_agent_runs_due_maintenance_on_its_schedule(
    keeper: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = asyncio.Event()
    original = Maintenance.run_due

    async def observed(self: Maintenance, **options: Any) -> dict[str, Any]:
        result = await original(self, **options)
        ran.set()
        return result

    monkeypatch.setattr(Maintenance, "run_due", observed)
    agent = await keeper(tick_seconds=0.05)
    [behaviour] = behaviours_of(agent)
    await agent.memory.store("Maintained by the behaviour")
    await asyncio.wait_for(ran.wait(), 20)
    last = await agent.memory.maintenance.last_runs()
    assert last["expiry"] is not None and last["decay"] is not None
    assert last["consolidation"] is not None and last["backup"] is None
    assert behaviour.failures == 0
    await agent.stop()
    assert behaviours_of(agent) == [] and not behaviour.is_running


async def test_stopping_the_agent_cancels_a_run_and_waits_for_it(
    keeper: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def endless(self: Maintenance, **options: Any) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {}

    monkeypatch.setattr(Maintenance, "run_due", endless)
    agent = await keeper(tick_seconds=0.05)
    [behaviour] = behaviours_of(agent)
    await asyncio.wait_for(started.wait(), 20)
    memory = agent.memory
    await asyncio.wait_for(agent.stop(), 20)
    assert cancelled.is_set() and memory.closed
    assert behaviour.is_killed() and behaviours_of(agent) == []


async def test_no_behaviour_when_the_config_says_so(keeper: Any) -> None:
    agent = await keeper(behaviour=False)
    assert behaviours_of(agent) == []


async def test_a_failing_run_is_counted_and_a_closed_memory_ends_the_behaviour(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await open_memory()
    behaviour = MaintenanceBehaviour(memory, period=60)
    await behaviour.run()
    assert behaviour.last_result is not None and "decay" in behaviour.last_result

    async def broken(**options: Any) -> dict[str, Any]:
        raise RuntimeError("transient trouble")

    monkeypatch.setattr(memory.maintenance, "run_due", broken)
    await behaviour.run()
    assert behaviour.failures == 1 and not behaviour.is_killed()
    monkeypatch.undo()
    await memory.aclose()
    await behaviour.run()
    assert behaviour.is_killed()
    with pytest.raises(ValueError, match="period"):
        MaintenanceBehaviour(memory, period=0)
