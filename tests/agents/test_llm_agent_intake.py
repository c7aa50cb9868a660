"""What an LLMAgent takes in: protocols it does not speak are answered ``not-understood``
and never reach the LLM; chat senders are rate limited, each on its own bucket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from factories import Client, unique_name
from spade.message import Message

from spade_memory.config import ChatConfig, MemoryConfig, SharingConfig
from spade_memory.spade.llm_agent import LLMAgent
from spade_memory.spade.sharing.protocol import parse_reason
from spade_memory.testing.scripted_llm import ScriptedLLM
from spade_memory.testing.xmpp_server import EmbeddedXMPPServer

Starter = Callable[[Any], Awaitable[Any]]
CATEGORIES = ("fact", "pattern", "preference", "capability", "private")


def keeper(xmpp: EmbeddedXMPPServer, tmp_path: Path, **config: Any) -> LLMAgent:
    config.setdefault("embedder", "hashing")
    return LLMAgent(
        xmpp.jid(unique_name("keeper")),
        "pw",
        port=xmpp.port,
        llm=ScriptedLLM(),
        memory=MemoryConfig(root=tmp_path / "memory", categories=CATEGORIES, **config),
    )


def client(xmpp: EmbeddedXMPPServer, name: str) -> Client:
    return Client(xmpp.jid(unique_name(name)), "pw", port=xmpp.port)


def protocol_message(to: str, protocol: str, performative: str, body: str) -> Message:
    msg = Message(to=to, body=body, thread=f"p-{unique_name('t')}")
    msg.set_metadata("protocol", protocol)
    msg.set_metadata("performative", performative)
    return msg


async def test_protocols_the_agent_does_not_speak_are_not_understood_and_skip_the_llm(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    analyst_jid = xmpp.jid(unique_name("analyst"))
    agent = await start(
        keeper(xmpp, tmp_path, sharing=SharingConfig(allow={"fact": [analyst_jid]}))
    )
    await agent.memory.store("The Lisbon office budget is 2.4 million", category="private")
    visitor = await start(client(xmpp, "visitor"))
    to = str(agent.jid.bare)
    query = json.dumps({"query": "Lisbon office budget"})
    cases = [
        ("spade-memory/query/9", "query-ref", query),
        ("spade-memory/query/2", "query-ref", query),
        ("SPADE-MEMORY/share/1", "request", query),
        ("fipa-contract-net", "cfp", "What is the Lisbon office budget?"),
        ("fipa-request", "request", "What is the Lisbon office budget?"),
    ]
    for protocol, performative, body in cases:
        msg = protocol_message(to, protocol, performative, body)
        await visitor.send(msg)
        answer = await visitor.reply_on(str(msg.thread))
        assert answer.get_metadata("performative") == "not-understood", protocol
        assert answer.get_metadata("protocol") == protocol
        assert "does not speak protocol" in parse_reason(answer.body)
        assert "2.4" not in str(answer.body)
    assert agent.llm.calls == []  # type: ignore[attr-defined]
    # and plain chat gives away no more than the sharing protocol does
    await agent.memory.store("The Lisbon team meets every Monday", category="pattern")
    for question in ("What is the Lisbon office budget?", "list your memories"):
        reply = str((await visitor.say(to, question)).body)
        assert "2.4" not in reply and "Monday" not in reply, reply


async def test_an_agent_without_sharing_says_so_at_once(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    agent = await start(keeper(xmpp, tmp_path))
    visitor = await start(client(xmpp, "visitor"))
    msg = protocol_message(
        str(agent.jid.bare), "spade-memory/query/1", "query-ref", '{"query": "x"}'
    )
    await visitor.send(msg)
    answer = await visitor.reply_on(str(msg.thread), timeout=5)
    assert answer.get_metadata("performative") == "not-understood"
    assert agent.llm.calls == []  # type: ignore[attr-defined]


async def test_answers_are_never_answered_and_a_flood_is_cut_at_the_burst(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    agent = await start(keeper(xmpp, tmp_path, chat=ChatConfig(burst=5, rate_per_minute=1)))
    visitor = await start(client(xmpp, "visitor"))
    to = str(agent.jid.bare)
    for performative in ("inform", "not-understood", "failure"):
        await visitor.send(protocol_message(to, "spade-memory/query/9", performative, "{}"))
    flood = [protocol_message(to, "spade-memory/query/9", "query-ref", "{}") for _ in range(64)]
    for msg in flood:
        await visitor.send(msg)
    await asyncio.sleep(1.5)
    answered = [m for m in visitor.inbox.messages if m.get_metadata("in-reply-to")]
    assert len(answered) == 5  # the burst; the answers sent first got none
    assert {m.thread for m in answered} == {m.thread for m in flood[:5]}
    assert agent.llm.calls == []  # type: ignore[attr-defined]


async def test_chat_is_rate_limited_per_sender_without_calling_the_llm(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    agent = await start(keeper(xmpp, tmp_path, chat=ChatConfig(burst=3, rate_per_minute=1)))
    flooder = await start(client(xmpp, "flooder"))
    other = await start(client(xmpp, "other"))
    to = str(agent.jid.bare)
    replies = [await flooder.say(to, f"hello number {n}") for n in range(8)]
    performatives = [r.get_metadata("performative") for r in replies]
    assert performatives == ["inform"] * 3 + ["refuse"] * 5
    assert all("Too many messages" in str(r.body) for r in replies[3:])
    assert len(agent.llm.calls) == 3  # type: ignore[attr-defined]
    assert (await other.say(to, "hello")).get_metadata("performative") == "inform"
