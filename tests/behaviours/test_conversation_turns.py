"""ConversationBehaviour: conversations answered side by side, each in order; what is
kept of them (``FormationConfig``); and asking another agent from inside a turn.

The behaviour runs without XMPP: messages go into its mailbox, the replies it sends
are collected. The same over an XMPP server is in tests/integration.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import pytest
from factories import AgentDouble
from spade.message import Message

from spade_memory.config import FormationConfig, MemoryConfig
from spade_memory.identity import conversation_id_for
from spade_memory.llm import ChatMessage, LLMResponse, ToolCall
from spade_memory.manager import MemoryManager
from spade_memory.spade.conversation import IN_REPLY_TO, REPLY_WITH, ConversationBehaviour
from spade_memory.tools import ToolContext, ToolResult

ME = "bob@localhost"
SLOW = "alice@localhost"
QUICK = "carol@localhost"
WAIT = 20.0  # seconds a condition may take to hold; never a measure of speed


class Recording(ConversationBehaviour):
    """The behaviour with ``send`` collecting messages instead of using XMPP."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sent: list[Message] = []

    async def send(self, msg: Message) -> None:
        self.sent.append(msg)

    def replies_to(self, jid: str) -> list[str]:
        return [str(m.body) for m in self.sent if str(m.to.bare) == jid]


class GatedLLM:
    """Echoes the request (``re: TEXT``); a request whose text is gated waits for its gate.

    Every request is recorded, in the order the requests were made.
    """

    def __init__(self, gates: Mapping[str, asyncio.Event] | None = None) -> None:
        self.gates = dict(gates or {})
        self.requests: list[list[ChatMessage]] = []

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        self.requests.append(list(messages))
        text = messages[-1].content or ""
        gate = self.gates.get(text)
        if gate is not None:
            await gate.wait()
        return LLMResponse(text=f"re: {text}")

    def asked(self) -> list[str]:
        return [request[-1].content or "" for request in self.requests]

    async def aclose(self) -> None:
        return None


def incoming(body: str, *, sender: str) -> Message:
    msg = Message(to=ME, sender=sender, body=body)
    msg.set_metadata("performative", "request")
    return msg


async def deliver(behaviour: Recording, *messages: Message) -> None:
    """Put ``messages`` in the mailbox and run one cycle for each (no waiting for answers)."""
    for msg in messages:
        await behaviour.queue.put(msg)
        await behaviour.run()


async def until(condition: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), WAIT)


async def opened(formation: FormationConfig | None = None) -> MemoryManager:
    config = MemoryConfig(
        in_memory=True, embedder="hashing", formation=formation or FormationConfig()
    )
    return await MemoryManager.open(ME, config)


@pytest.fixture
async def manager() -> AsyncIterator[MemoryManager]:
    async with await opened() as memory:
        yield memory


def make(manager: MemoryManager, llm: Any, **kwargs: Any) -> Recording:
    behaviour = Recording(llm=llm, tools=kwargs.pop("tools", ()), **kwargs)
    behaviour.set_agent(AgentDouble(manager, ME))
    return behaviour


# -- concurrency ------------------------------------------------------------------


async def test_a_slow_turn_does_not_hold_up_another_conversation(manager: MemoryManager) -> None:
    release = asyncio.Event()
    llm = GatedLLM({"think hard": release})
    behaviour = make(manager, llm)
    await deliver(behaviour, incoming("think hard", sender=SLOW))
    await until(lambda: llm.asked() == ["think hard"])  # the slow turn is under way
    await deliver(behaviour, incoming("hello", sender=QUICK))
    await until(lambda: behaviour.replies_to(QUICK) == ["re: hello"])
    assert behaviour.replies_to(SLOW) == []  # still thinking
    release.set()
    await asyncio.wait_for(behaviour.settled(), WAIT)
    assert behaviour.replies_to(SLOW) == ["re: think hard"]


async def test_messages_of_one_conversation_are_answered_in_order(
    manager: MemoryManager,
) -> None:
    release = asyncio.Event()
    llm = GatedLLM({"one": release})
    behaviour = make(manager, llm)
    await deliver(
        behaviour,
        incoming("one", sender=SLOW),
        incoming("two", sender=SLOW),
        incoming("three", sender=SLOW),
        incoming("meanwhile", sender=QUICK),
    )
    await until(lambda: behaviour.replies_to(QUICK) == ["re: meanwhile"])
    assert "two" not in llm.asked() and "three" not in llm.asked()  # waiting behind "one"
    release.set()
    await asyncio.wait_for(behaviour.settled(), WAIT)
    assert behaviour.replies_to(SLOW) == ["re: one", "re: two", "re: three"]
    # each turn replays the one before it, kept in the store in order
    cid = conversation_id_for(ME, SLOW)
    kept = [(m.role, m.text) for m in await manager.history.messages(cid)]
    assert kept == [
        ("user", "one"),
        ("assistant", "re: one"),
        ("user", "two"),
        ("assistant", "re: two"),
        ("user", "three"),
        ("assistant", "re: three"),
    ]
    third = next(r for r in llm.requests if r[-1].content == "three")
    assert [m.content for m in third if m.role != "system"][-5:] == [
        "one",
        "re: one",
        "two",
        "re: two",
        "three",
    ]


async def test_max_concurrent_turns_bounds_the_turns_under_way(manager: MemoryManager) -> None:
    release = asyncio.Event()
    llm = GatedLLM({"think hard": release})
    behaviour = make(manager, llm, max_concurrent_turns=1)
    await deliver(behaviour, incoming("think hard", sender=SLOW))
    await until(lambda: llm.asked() == ["think hard"])
    await deliver(behaviour, incoming("hello", sender=QUICK))
    for _ in range(20):
        await asyncio.sleep(0.01)
    assert llm.asked() == ["think hard"]  # the one slot is taken
    release.set()
    await asyncio.wait_for(behaviour.settled(), WAIT)
    assert behaviour.replies_to(QUICK) == ["re: hello"]
    assert behaviour.replies_to(SLOW) == ["re: think hard"]


# -- what is kept -----------------------------------------------------------------


@pytest.mark.parametrize(
    "formation",
    [FormationConfig(senders={QUICK}), FormationConfig(record=False)],
    ids=["left-out-sender", "record-off"],
)
async def test_a_partner_not_kept_leaves_nothing_and_replays_from_ram(
    formation: FormationConfig,
) -> None:
    async with await opened(formation) as memory:
        llm = GatedLLM()
        behaviour = make(memory, llm, history_turns=2)
        await deliver(behaviour, incoming("My sister Emma lives in Lisbon", sender=SLOW))
        await asyncio.wait_for(behaviour.settled(), WAIT)
        await deliver(behaviour, incoming("I prefer green tea", sender=SLOW))
        await asyncio.wait_for(behaviour.settled(), WAIT)

        assert behaviour.replies_to(SLOW) == [
            "re: My sister Emma lives in Lisbon",
            "re: I prefer green tea",
        ]
        # the second turn still saw the first, from RAM
        assert [m.content for m in llm.requests[-1] if m.role != "system"] == [
            "My sister Emma lives in Lisbon",
            "re: My sister Emma lives in Lisbon",
            "I prefer green tea",
        ]
        cid = conversation_id_for(ME, SLOW)
        assert await memory.history.messages(cid) == []
        assert await memory.history.conversations(peer=SLOW) == []
        report = await memory.form_memories()
        assert report.windows == 0
        assert await memory.list() == []
        assert await memory.search("Where does Emma live?") == []

        await deliver(behaviour, incoming("I work at Acme", sender=QUICK))
        await asyncio.wait_for(behaviour.settled(), WAIT)
        kept = await memory.history.messages(conversation_id_for(ME, QUICK))
        if formation.record:
            assert [m.text for m in kept] == ["I work at Acme", "re: I work at Acme"]
        else:
            assert kept == []


async def test_a_kept_conversation_is_formed_without_any_tool_call(
    manager: MemoryManager,
) -> None:
    llm = GatedLLM()
    behaviour = make(manager, llm, tools=manager.tools())
    await deliver(behaviour, incoming("My sister Emma lives in Lisbon", sender=SLOW))
    await asyncio.wait_for(behaviour.settled(), WAIT)
    await manager.form_memories()
    found = await manager.search("Where does Emma live?")
    assert any("Lisbon" in result.memory.content for result in found)


# -- asking from inside a turn ----------------------------------------------------------


class AskTool:
    """A tool that asks another agent through the behaviour and returns its answer."""

    name = "ask_clock"

    def __init__(self) -> None:
        self.behaviour: ConversationBehaviour | None = None

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
        assert self.behaviour is not None
        answer = await self.behaviour.ask(QUICK, "what time is it?", timeout=WAIT)
        return ToolResult(ok=True, text=str(answer.body))


class AskingLLM:
    """Calls ``ask_clock`` once, then answers with what the tool returned."""

    def __init__(self) -> None:
        self.requests: list[list[ChatMessage]] = []

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        self.requests.append(list(messages))
        if messages[-1].role == "tool":
            return LLMResponse(text=f"the clock says {messages[-1].content}")
        return LLMResponse(text=None, tool_calls=(ToolCall("c1", "ask_clock", "{}"),))

    async def aclose(self) -> None:
        return None


async def test_a_tool_may_ask_another_agent_from_inside_a_turn(manager: MemoryManager) -> None:
    tool = AskTool()
    behaviour = make(manager, AskingLLM(), tools=[tool])
    tool.behaviour = behaviour
    await deliver(behaviour, incoming("what time is it where the clock is?", sender=SLOW))
    await until(lambda: bool(behaviour.sent))
    question = behaviour.sent[0]
    assert str(question.to) == QUICK and question.body == "what time is it?"
    answer = question.make_reply()
    answer.body = "noon"
    answer.set_metadata(IN_REPLY_TO, question.get_metadata(REPLY_WITH) or "")
    await deliver(behaviour, answer)  # taken by run() while the turn waits for it
    await asyncio.wait_for(behaviour.settled(), WAIT)
    assert behaviour.replies_to(SLOW) == ["the clock says noon"]
