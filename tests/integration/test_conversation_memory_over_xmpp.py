"""Conversation memory over the embedded XMPP server: an agent whose LLM never calls a
tool remembers what it was told across a restart, and continues the conversation; a
slow turn holds up its own conversation only.

Every message crosses a real XMPP socket: the agents are taken out of SPADE's
in-process container, which would otherwise hand messages over directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from factories import Client, unique_name
from spade.container import Container
from spade.message import Message

from spade_memory.config import MemoryConfig
from spade_memory.context import is_memory_context
from spade_memory.llm import ChatMessage, LLMResponse
from spade_memory.spade.llm_agent import LLMAgent
from spade_memory.testing.xmpp_server import EmbeddedXMPPServer

WAIT = 30.0  # seconds a condition may take to hold; never a measure of speed

Starter = Callable[[Any], Awaitable[Any]]


class TextOnlyLLM:
    """Never calls a tool: answers ``OK`` (or ``re: TEXT`` when echoing), records every
    request; a request whose text is gated waits for its gate."""

    def __init__(
        self, *, echo: bool = False, gates: Mapping[str, asyncio.Event] | None = None
    ) -> None:
        self.echo = echo
        self.gates = dict(gates or {})
        self.requests: list[list[ChatMessage]] = []
        self.offered: list[int] = []

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        self.requests.append(list(messages))
        self.offered.append(len(tools))
        text = messages[-1].content or ""
        gate = self.gates.get(text)
        if gate is not None:
            await gate.wait()
        return LLMResponse(text=f"re: {text}" if self.echo else "OK")

    async def aclose(self) -> None:
        return None


@pytest.fixture
async def run(xmpp: EmbeddedXMPPServer) -> AsyncIterator[Starter]:
    """Start an agent on real sockets (out of the in-process container); all stop after."""
    started: list[Any] = []

    async def starter(agent: Any) -> Any:
        if agent not in started:
            started.append(agent)
        await asyncio.wait_for(agent.start(auto_register=True), WAIT)
        Container().unregister(str(agent.jid))
        return agent

    yield starter
    for agent in started:
        with contextlib.suppress(Exception):
            await agent.stop()


FACTS = [
    "My name is Dana and I work at Acme Robotics",
    "I prefer green tea",
    "My sister Emma lives in Lisbon",
    "I am planning a trip to Kyoto in May",
]


async def test_facts_told_without_tool_calls_are_remembered_after_a_restart(
    xmpp: EmbeddedXMPPServer, run: Starter, tmp_path: Path
) -> None:
    llm = TextOnlyLLM()
    config = MemoryConfig(root=tmp_path / "memory", embedder="hashing")
    agent = LLMAgent(
        xmpp.jid(unique_name("keeper")),
        "pw",
        port=xmpp.port,
        llm=llm,
        memory=config,
        history_turns=len(FACTS),
    )
    dana = Client(xmpp.jid(unique_name("dana")), "pw", port=xmpp.port)
    await run(agent)
    await run(dana)
    to, thread = str(agent.jid), "getting-to-know"
    for fact in FACTS:
        reply = await dana.say(to, fact, thread=thread, timeout=WAIT)
        assert reply.body == "OK"

    [info] = await agent.memory.history.conversations()
    told_by_dana = [
        m for m in await agent.memory.history.messages(info.conversation_id) if m.role == "user"
    ]
    # each with the id of its stanza, so a message delivered twice is kept once
    assert len({m.message_id for m in told_by_dana} - {None}) == len(FACTS)

    await agent.stop()  # its memory closes
    await run(agent)  # the same root
    await agent.memory.form_memories()
    memories = await agent.memory.list()
    assert memories and all(m.metadata.get("formed") for m in memories)  # none by a tool
    found = await agent.memory.search("Where does Emma live?")
    assert found and "Lisbon" in found[0].memory.content
    found = await agent.memory.search("Where does Dana work?")
    assert any("Acme Robotics" in r.memory.content for r in found)
    assert any("green tea" in r.memory.content for r in await agent.memory.search("tea"))

    before = len(llm.requests)
    reply = await dana.say(to, "Where does my sister live?", thread=thread, timeout=WAIT)
    assert reply.body == "OK"
    first = llm.requests[before]
    replayed = [m.content for m in first if m.role in ("user", "assistant")]
    told = [turn for fact in FACTS for turn in (fact, "OK")]
    assert replayed[: len(told)] == told  # the earlier turns, from the store
    assert replayed[-1] == "Where does my sister live?"
    (context,) = [m for m in first if is_memory_context(m)]  # and recalled
    assert "Lisbon" in (context.content or "")
    assert set(llm.offered) != {0}  # tools were offered; none was ever called


async def test_a_slow_turn_holds_up_its_own_conversation_only(
    xmpp: EmbeddedXMPPServer, run: Starter, tmp_path: Path
) -> None:
    release = asyncio.Event()
    llm = TextOnlyLLM(echo=True, gates={"think hard": release})
    config = MemoryConfig(root=tmp_path / "memory", embedder="hashing")
    agent = LLMAgent(xmpp.jid(unique_name("thinker")), "pw", port=xmpp.port, llm=llm, memory=config)
    slow = Client(xmpp.jid(unique_name("slow")), "pw", port=xmpp.port)
    quick = Client(xmpp.jid(unique_name("quick")), "pw", port=xmpp.port)
    for started in (agent, slow, quick):
        await run(started)
    to = str(agent.jid)

    for body in ("think hard", "two", "three"):  # quickly, one conversation
        msg = Message(to=to, body=body, thread="deep")
        msg.set_metadata("reply-with", uuid.uuid4().hex)
        await slow.send(msg)
    reply = await quick.say(to, "hello", timeout=WAIT)
    assert reply.body == "re: hello"
    assert slow.inbox.messages == []  # still thinking
    asked = [request[-1].content for request in llm.requests]
    assert "two" not in asked and "three" not in asked  # waiting behind "think hard"

    release.set()
    replies = [await slow.reply_on("deep", timeout=WAIT) for _ in range(3)]
    assert [r.body for r in replies] == ["re: think hard", "re: two", "re: three"]
