"""LLM agents store and recall memories through tool calls triggered by XMPP messages.

Every message here crosses a real XMPP socket: the agents are taken out of SPADE's
in-process container, which would otherwise hand messages over directly. The same
test runs on the embedded server and, when ``SPADE_MEMORY_TEST_XMPP_PORT`` names a
running Prosody (``bash .ci/prosody.sh start``), on Prosody.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from factories import unique_name
from spade.container import Container

from spade_memory.config import MemoryConfig
from spade_memory.context import is_memory_context
from spade_memory.identity import conversation_id_for, thread_conversation_id
from spade_memory.spade.llm_agent import LLMAgent
from spade_memory.testing.scripted_llm import ScriptedLLM
from spade_memory.testing.xmpp_server import EmbeddedXMPPServer

PORT_ENV = "SPADE_MEMORY_TEST_XMPP_PORT"
HOST_ENV = "SPADE_MEMORY_TEST_XMPP_HOST"


@dataclass(frozen=True)
class Endpoint:
    domain: str
    port: int

    def jid(self, name: str) -> str:
        return f"{unique_name(name)}@{self.domain}"


@pytest.fixture(
    params=[
        "embedded",
        pytest.param("prosody", marks=pytest.mark.prosody),
    ]
)
async def endpoint(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Endpoint]:
    Container().reset()
    if request.param == "prosody":
        port = os.environ.get(PORT_ENV)
        if not port:
            pytest.skip(f"no Prosody: set {PORT_ENV} (bash .ci/prosody.sh start prints it)")
        yield Endpoint(os.environ.get(HOST_ENV, "localhost"), int(port))
        return
    async with EmbeddedXMPPServer(folder=tmp_path / "xmpp") as server:
        yield Endpoint(server.host, server.port)


class Team:
    """Agents started for one test, on real sockets, stopped at the end."""

    def __init__(self) -> None:
        self.agents: list[LLMAgent] = []

    async def start(self, agent: LLMAgent) -> LLMAgent:
        if agent not in self.agents:
            self.agents.append(agent)
        await asyncio.wait_for(agent.start(auto_register=True), 30)
        Container().unregister(str(agent.jid))  # no in-process shortcut: use XMPP
        return agent

    async def stop_all(self) -> None:
        for agent in self.agents:
            with contextlib.suppress(Exception):
                await agent.stop()


@pytest.fixture
async def team(endpoint: Endpoint) -> AsyncIterator[Team]:
    started = Team()
    yield started
    await started.stop_all()


async def test_agents_store_and_recall_through_llm_tool_calls(
    endpoint: Endpoint, team: Team, tmp_path: Path
) -> None:
    config = MemoryConfig(root=tmp_path / "memory", embedder="hashing")
    coordinator_llm = ScriptedLLM()
    coordinator = LLMAgent(
        endpoint.jid("coordinator"), "pw", port=endpoint.port, memory=config, llm=coordinator_llm
    )
    researcher = LLMAgent(endpoint.jid("researcher"), "pw", port=endpoint.port, memory=config)
    await team.start(coordinator)
    await team.start(researcher)
    to = str(coordinator.jid)

    stored = await researcher.ask(to, "remember that the Lisbon office opens on 3 March")
    assert stored.get_metadata("performative") == "inform"
    assert "Lisbon office opens on 3 March" in stored.body
    noted = await researcher.ask(to, "note that the researcher prefers short answers")
    assert noted.get_metadata("performative") == "inform"

    answer = await researcher.ask(to, "what do you know about the Lisbon office?")
    assert "3 March" in answer.body
    assert [c.name for c in coordinator_llm.calls[-2].response.tool_calls] == ["search_memories"]
    request = coordinator_llm.calls[-2].messages
    (context,) = [m for m in request if is_memory_context(m)]
    assert request.index(context) == len(request) - 2
    assert '"the researcher prefers short answers"' in (context.content or "")

    memories = await coordinator.memory.list()
    assert [m.content for m in memories] == ["the Lisbon office opens on 3 March"]
    assert memories[0].source_sender == str(researcher.jid.bare)
    pair = conversation_id_for(coordinator.jid, researcher.jid)
    assert [n.content for n in await coordinator.memory.notes(pair)] == [
        "the researcher prefers short answers"
    ]
    assert await researcher.memory.list() == []  # each agent keeps its own memory

    await coordinator.stop()
    await team.start(coordinator)
    again = await researcher.ask(to, "what do you know about Lisbon?")
    assert "3 March" in again.body


async def test_in_memory_agents_forget_on_restart_and_leave_no_files(
    endpoint: Endpoint, team: Team, tmp_path: Path
) -> None:
    root = tmp_path / "memory"
    config = MemoryConfig(in_memory=True, root=root, embedder="hashing")
    keeper = LLMAgent(endpoint.jid("keeper"), "pw", port=endpoint.port, memory=config)
    asker = LLMAgent(endpoint.jid("asker"), "pw", port=endpoint.port, memory=config)
    await team.start(keeper)
    await team.start(asker)
    to = str(keeper.jid)
    await asker.ask(to, "remember that the vault code is 4711")
    assert "4711" in (await asker.ask(to, "what do you know about the vault code?")).body

    await keeper.stop()
    await team.start(keeper)
    assert await keeper.memory.list() == []
    after = await asker.ask(to, "what do you know about the vault code?")
    assert "4711" not in after.body
    assert not root.exists()


async def test_thread_keeps_notes_per_conversation(
    endpoint: Endpoint, team: Team, tmp_path: Path
) -> None:
    config = MemoryConfig(root=tmp_path / "memory", embedder="hashing")
    host = LLMAgent(endpoint.jid("host"), "pw", port=endpoint.port, memory=config)
    guest = LLMAgent(endpoint.jid("guest"), "pw", port=endpoint.port, memory=config)
    await team.start(host)
    await team.start(guest)
    reply = await guest.ask(str(host.jid), "note that we plan the offsite", thread="offsite-2025")
    assert reply.thread == "offsite-2025"
    cid = thread_conversation_id(host.jid, guest.jid, "offsite-2025")  # bound to the guest
    assert [n.content for n in await host.memory.notes(cid)] == ["we plan the offsite"]
    assert await host.memory.notes("offsite-2025") == []
    assert await host.memory.notes(conversation_id_for(host.jid, guest.jid)) == []
