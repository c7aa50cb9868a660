"""LLMAgent: tools registered once, extra tools, templates, turn settings, asking other
agents (also from inside a turn)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from factories import MEMORY_TOOL_NAMES, unique_name
from spade.message import Message
from spade.template import Template

from spade_memory.config import MemoryConfig
from spade_memory.errors import AskFailed, StoreClosedError
from spade_memory.llm import ChatMessage, LLMResponse, ToolCall
from spade_memory.spade.conversation import ConversationBehaviour
from spade_memory.spade.llm_agent import LLMAgent
from spade_memory.testing.scripted_llm import ScriptedLLM
from spade_memory.testing.xmpp_server import EmbeddedXMPPServer
from spade_memory.tools import ToolContext, ToolResult

MEMORY_TOOLS = set(MEMORY_TOOL_NAMES)

Starter = Callable[[LLMAgent], Awaitable[LLMAgent]]


class Clock:
    """An extra tool: answers the time of day (fixed)."""

    name = "get_time"

    def __init__(self) -> None:
        self.calls: list[tuple[Mapping[str, Any] | str, ToolContext]] = []

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": "The current time.",
                "parameters": {"type": "object", "properties": {}},
            },
        }

    async def call(self, arguments: Mapping[str, Any] | str, context: ToolContext) -> ToolResult:
        self.calls.append((arguments, context))
        return ToolResult(ok=True, text="It is 09:30.")


class TimeAsker:
    """An LLM that calls get_time once, then answers with the tool's text."""

    def __init__(self) -> None:
        self.offered: list[list[str]] = []

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        self.offered.append([tool["function"]["name"] for tool in tools])
        if messages[-1].role == "tool":
            return LLMResponse(text=f"The clock says: {messages[-1].content}")
        return LLMResponse(text=None, tool_calls=(ToolCall("t1", "get_time", json.dumps({})),))

    async def aclose(self) -> None:
        return None


def new_agent(xmpp: EmbeddedXMPPServer, tmp_path: Path, name: str, **kwargs: Any) -> LLMAgent:
    kwargs.setdefault("memory", MemoryConfig(root=tmp_path / "memory", embedder="hashing"))
    return LLMAgent(xmpp.jid(unique_name(name)), "pw", port=xmpp.port, **kwargs)


def conversations(agent: LLMAgent) -> list[ConversationBehaviour]:
    return [
        b for b in agent.behaviours if isinstance(b, ConversationBehaviour) and not b.is_killed()
    ]


async def test_memory_tools_are_registered_once_across_restarts_and_setups(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    agent = new_agent(xmpp, tmp_path, "once", tools=[Clock()])
    await start(agent)
    names = [tool.name for tool in agent.tools]
    assert sorted(names) == sorted([*MEMORY_TOOLS, "get_time"])
    await agent.setup()
    assert [tool.name for tool in agent.tools] == names
    assert len(conversations(agent)) == 1
    await agent.stop()
    await start(agent)
    assert [tool.name for tool in agent.tools] == names
    assert len(conversations(agent)) == 1
    offered = [tool.schema()["function"]["name"] for tool in agent.conversation.tools]
    assert offered == names


async def test_extra_tool_is_offered_and_called_with_the_turn_context(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    clock = Clock()
    llm = TimeAsker()
    agent = await start(new_agent(xmpp, tmp_path, "timekeeper", llm=llm, tools=[clock]))
    asker = await start(new_agent(xmpp, tmp_path, "asker"))
    answer = await asker.ask(str(agent.jid), "what time is it?", timeout=10)
    assert answer.body == "The clock says: It is 09:30."
    assert set(llm.offered[0]) == MEMORY_TOOLS | {"get_time"}
    ((_, context),) = clock.calls
    assert context.sender == str(asker.jid.bare)
    assert context.manager is agent.memory
    assert context.budget is not None


async def test_template_filters_what_reaches_the_llm(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    template = Template()
    template.set_metadata("ontology", "memory")
    llm = ScriptedLLM()
    agent = await start(new_agent(xmpp, tmp_path, "picky", llm=llm, template=template))
    asker = await start(new_agent(xmpp, tmp_path, "asker"))
    with pytest.raises(TimeoutError):
        await asker.ask(str(agent.jid), "remember that nobody hears this", timeout=0.5)
    assert llm.calls == []
    answer = await asker.ask(
        str(agent.jid), "remember that the door code is 1234", metadata={"ontology": "memory"}
    )
    assert answer.get_metadata("performative") == "inform"
    assert [m.content for m in await agent.memory.list()] == ["the door code is 1234"]


def test_default_llm_is_the_offline_scripted_one() -> None:
    agent = LLMAgent("solo@localhost", "pw", memory=MemoryConfig(in_memory=True))
    assert isinstance(agent.llm, ScriptedLLM)
    assert agent.tools == ()
    with pytest.raises(StoreClosedError, match="has not started"):
        _ = agent.conversation


async def test_ask_before_start_is_refused() -> None:
    agent = LLMAgent("solo@localhost", "pw", memory=MemoryConfig(in_memory=True))
    with pytest.raises(StoreClosedError, match="not running"):
        await agent.ask("other@localhost", "hello")


def test_tool_names_must_be_distinct_and_not_reuse_memory_tools() -> None:
    with pytest.raises(ValueError, match="distinct"):
        LLMAgent("a@localhost", "pw", tools=[Clock(), Clock()])
    shadow = Clock()
    shadow.name = "search_memories"
    with pytest.raises(ValueError, match="search_memories"):
        LLMAgent("a@localhost", "pw", tools=[shadow])
    with pytest.raises(TypeError, match="not a tool"):
        LLMAgent("a@localhost", "pw", tools=[object()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="max_tool_rounds"):
        LLMAgent("a@localhost", "pw", max_tool_rounds=-1)
    with pytest.raises(ValueError, match="max_concurrent_turns"):
        LLMAgent("a@localhost", "pw", max_concurrent_turns=0)


async def test_the_behaviour_gets_the_turn_settings(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    agent = new_agent(
        xmpp, tmp_path, "settings", history_turns=5, turn_timeout=9.0, max_concurrent_turns=2
    )
    await start(agent)
    behaviour = agent.conversation
    assert (behaviour.history_turns, behaviour.turn_timeout) == (5, 9.0)
    assert behaviour.max_concurrent_turns == 2


class AskAnother:
    """An extra tool: asks another agent through its own agent's ``ask``."""

    name = "ask_clock"

    def __init__(self) -> None:
        self.agent: LLMAgent | None = None
        self.clock = ""

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": "Ask the clock agent the time.",
                "parameters": {"type": "object", "properties": {}},
            },
        }

    async def call(self, arguments: Mapping[str, Any] | str, context: ToolContext) -> ToolResult:
        assert self.agent is not None
        answer = await self.agent.ask(self.clock, "what time is it?", timeout=20)
        return ToolResult(ok=True, text=str(answer.body))


class ClockAsker(TimeAsker):
    """Calls ask_clock once, then answers with the tool's text."""

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        if messages[-1].role == "tool":
            return LLMResponse(text=f"The clock says: {messages[-1].content}")
        return LLMResponse(text=None, tool_calls=(ToolCall("t1", "ask_clock", "{}"),))


async def test_a_tool_may_ask_another_agent_during_a_turn(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    clock = await start(new_agent(xmpp, tmp_path, "clock", llm=TimeAsker(), tools=[Clock()]))
    tool = AskAnother()
    middle = await start(new_agent(xmpp, tmp_path, "middle", llm=ClockAsker(), tools=[tool]))
    tool.agent, tool.clock = middle, str(clock.jid)
    asker = await start(new_agent(xmpp, tmp_path, "asker"))
    answer = await asker.ask(str(middle.jid), "what time is it at the clock?", timeout=30)
    assert answer.get_metadata("performative") == "inform"
    assert answer.body == "The clock says: The clock says: It is 09:30."


async def test_a_templated_agent_gets_the_answers_to_its_own_asks(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    template = Template()
    template.set_metadata("performative", "request")  # its chat: requests only
    picky = await start(new_agent(xmpp, tmp_path, "picky", template=template))
    other = await start(new_agent(xmpp, tmp_path, "other"))
    answer = await picky.ask(str(other.jid), "remember that the door code is 1234", timeout=10)
    assert answer.get_metadata("performative") == "inform"  # not a request: let through


async def test_an_ask_still_waiting_fails_at_once_when_its_agent_stops(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    asker = await start(new_agent(xmpp, tmp_path, "asker"))
    waiting = asyncio.ensure_future(asker.ask(xmpp.jid("nobody-there"), "hello?", timeout=30))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await asker.stop()
    with pytest.raises(AskFailed, match="stopped"):
        await asyncio.wait_for(waiting, 5)
    assert time.monotonic() - started < 5


async def test_a_bounced_message_fails_its_ask_and_never_reaches_the_chat(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    llm = ScriptedLLM()
    asker = await start(new_agent(xmpp, tmp_path, "asker", llm=llm))
    sent: list[Message] = []
    original = asker.conversation.send

    async def keep(msg: Message) -> None:
        sent.append(msg)
        await original(msg)

    asker.conversation.send = keep  # type: ignore[method-assign]
    waiting = asyncio.ensure_future(asker.ask(xmpp.jid("gone"), "the capital of Peru?"))
    while not sent:
        await asyncio.sleep(0.01)
    # the server sends the message back as an error, its content echoed (RFC 6120 8.3.1)
    bounce = sent[0].prepare(asker.client)
    bounce["from"], bounce["to"] = str(sent[0].to), str(asker.jid)
    bounce["type"] = "error"
    bounce["error"]["condition"] = "service-unavailable"
    asker._message_received(bounce)
    with pytest.raises(AskFailed, match=r"could not be reached \(service-unavailable\)"):
        await asyncio.wait_for(waiting, 5)
    # a plain message of the agent's, sent back: not the partner's words
    told = Message(to=xmpp.jid("gone"), body="my locker code is 1234")
    told.set_metadata("performative", "inform")
    bounce = told.prepare(asker.client)
    bounce["from"], bounce["to"] = xmpp.jid("gone"), str(asker.jid)
    bounce["type"] = "error"
    asker._message_received(bounce)
    await asyncio.sleep(0.5)
    assert llm.calls == []
    assert await asker.memory.history.conversations() == []


class Shutdown:
    """A tool that stops its own agent (SPADE's ``await self.agent.stop()``)."""

    name = "shutdown"

    def __init__(self) -> None:
        self.agent: LLMAgent | None = None
        self.returned = asyncio.Event()

    def schema(self) -> dict[str, Any]:
        parameters = {"type": "object", "properties": {}}
        return {"type": "function", "function": {"name": self.name, "parameters": parameters}}

    async def call(self, arguments: Mapping[str, Any] | str, context: ToolContext) -> ToolResult:
        assert self.agent is not None
        await self.agent.stop()
        self.returned.set()
        return ToolResult(ok=True, text="stopped")


class ShutdownAsker:
    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        if messages[-1].role == "tool":
            return LLMResponse(text="bye")
        return LLMResponse(text=None, tool_calls=(ToolCall("t1", "shutdown", "{}"),))

    async def aclose(self) -> None:
        return None


async def test_a_tool_may_stop_its_own_agent(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    tool = Shutdown()
    agent = await start(new_agent(xmpp, tmp_path, "stopper", llm=ShutdownAsker(), tools=[tool]))
    tool.agent = agent
    asker = await start(new_agent(xmpp, tmp_path, "asker"))
    waiting = asyncio.ensure_future(asker.ask(str(agent.jid), "please shut down", timeout=10))
    await asyncio.wait_for(tool.returned.wait(), 10)  # stop() returned inside the turn
    assert not agent.is_alive()
    with pytest.raises(StoreClosedError):
        _ = agent.memory
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
