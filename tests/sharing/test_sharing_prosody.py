"""A forged ``from`` on a real XMPP server: the owner answers the real sender only.

Sharing trusts the sender address the server delivers. Prosody binds each client
stream to its account and does not let a client send as another; this checks that
end to end: mallory sends a memory query that claims to come from bob (who may
ask); whatever the server does with it, bob receives no answer he did not ask
for and mallory learns nothing. Runs when ``SPADE_MEMORY_TEST_XMPP_PORT`` names a
running Prosody (``bash .ci/prosody.sh start``); the embedded server does not
check senders, so it is not run there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from spade.agent import Agent
from spade.behaviour import CyclicBehaviour
from spade.container import Container
from spade.message import Message

from spade_memory.config import MemoryConfig, SharingConfig
from spade_memory.spade.llm_agent import LLMAgent
from spade_memory.spade.sharing.protocol import (
    PERFORMATIVE,
    QUERY_PROTOCOL,
    QUERY_REF,
    make_request,
)
from spade_memory.testing.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.prosody

PORT_ENV = "SPADE_MEMORY_TEST_XMPP_PORT"
HOST_ENV = "SPADE_MEMORY_TEST_XMPP_HOST"
SECRET = "The vault code is 4711"


class Inbox(CyclicBehaviour):
    """Keeps every message its agent receives."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[Message] = []
        self.arrived = asyncio.Event()

    async def run(self) -> None:
        msg = await self.receive(timeout=0.5)
        if msg is not None:
            self.messages.append(msg)
            self.arrived.set()

    async def next_on(self, thread: str, timeout: float = 20.0) -> Message:
        async def wait() -> Message:
            while True:
                for msg in self.messages:
                    if msg.thread == thread:
                        return msg
                self.arrived.clear()
                await self.arrived.wait()

        return await asyncio.wait_for(wait(), timeout)


class Listener(Agent):
    async def setup(self) -> None:
        self.inbox = Inbox()
        self.add_behaviour(self.inbox)


@pytest.fixture
async def domain_port() -> tuple[str, int]:
    port = os.environ.get(PORT_ENV)
    if not port:
        pytest.skip(f"no Prosody: set {PORT_ENV} (bash .ci/prosody.sh start prints it)")
    Container().reset()
    return os.environ.get(HOST_ENV, "localhost"), int(port)


@pytest.fixture
async def started() -> AsyncIterator[list[Agent]]:
    agents: list[Agent] = []
    yield agents
    for agent in agents:
        with contextlib.suppress(Exception):
            await agent.stop()


async def send(agent: Listener, msg: Message) -> None:
    class Once(CyclicBehaviour):
        async def run(self) -> None:
            await self.send(msg)
            self.kill()

    once = Once()
    agent.add_behaviour(once)
    await once.join(10)


async def test_a_forged_sender_gets_no_answer_meant_for_the_allowed_agent(
    domain_port: tuple[str, int], started: list[Agent], tmp_path: Path
) -> None:
    domain, port = domain_port

    def jid(name: str) -> str:
        return f"{name}-{uuid.uuid4().hex[:8]}@{domain}"

    bob = Listener(jid("bob"), "pw", port=port)
    mallory = Listener(jid("mallory"), "pw", port=port)
    bob_bare = str(bob.jid.bare)
    alice = LLMAgent(
        jid("alice"),
        "pw",
        port=port,
        llm=ScriptedLLM(),
        memory=MemoryConfig(
            root=tmp_path / "memory",
            embedder="hashing",
            sharing=SharingConfig(allow={"fact": [bob_bare]}),
        ),
    )
    for agent in (alice, bob, mallory):
        started.append(agent)
        await asyncio.wait_for(agent.start(auto_register=True), 30)
        Container().unregister(str(agent.jid))  # every message crosses the server
    await alice.memory.store(SECRET, category="fact")
    alice_bare = str(alice.jid.bare)
    query = json.dumps({"query": "vault code"})

    forged = make_request(alice_bare, QUERY_PROTOCOL, QUERY_REF, query)
    forged.sender = bob_bare  # what an unchecked server would pass on as from
    forged.thread = "forged-" + uuid.uuid4().hex
    await send(mallory, forged)

    own = make_request(alice_bare, QUERY_PROTOCOL, QUERY_REF, query)
    own.thread = "own-" + uuid.uuid4().hex
    await send(mallory, own)
    refusal = await mallory.inbox.next_on(own.thread)
    assert refusal.get_metadata(PERFORMATIVE) == "refuse"
    assert "4711" not in str(refusal.body)

    asked = make_request(alice_bare, QUERY_PROTOCOL, QUERY_REF, query)
    asked.thread = "asked-" + uuid.uuid4().hex
    await send(bob, asked)
    answer = await bob.inbox.next_on(asked.thread)
    assert answer.get_metadata(PERFORMATIVE) == "inform"
    assert "4711" in str(answer.body)  # bob may ask, and does get the answer

    # alice answers in order on one stream: an answer to the forged query would have
    # reached bob before the answer to his own question.
    assert [m.thread for m in bob.inbox.messages] == [asked.thread]
    assert all("4711" not in str(m.body) for m in mallory.inbox.messages)
