"""ScriptedLLM: real tool calls for memory requests in English and Chinese, offline."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from factories import MEMORY_TOOL_NAMES
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.errors import LLMError
from spade_memory.llm import ChatMessage, LLMResponse
from spade_memory.testing.scripted_llm import ScriptedLLM, memory_lines

NAMES = MEMORY_TOOL_NAMES


def schema(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": parameters or {"type": "object", "properties": {}},
        },
    }


TOOLS = [schema(name) for name in NAMES]


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


async def ask(text: str, tools: Sequence[dict[str, Any]] = TOOLS) -> LLMResponse:
    return await ScriptedLLM().complete([user(text)], tools)


def only_call(response: LLMResponse) -> tuple[str, dict[str, Any]]:
    assert response.text is None
    assert response.finish_reason == "tool_calls"
    assert len(response.tool_calls) == 1
    call = response.tool_calls[0]
    arguments = json.loads(call.arguments)
    assert isinstance(arguments, dict)
    return call.name, arguments


@pytest.mark.parametrize(
    ("text", "category", "content"),
    [
        ("remember that Alice likes green tea.", "preference", "Alice likes green tea"),
        ("Remember: Bob can speak French", "capability", "Bob can speak French"),
        ("please remember I usually wake up at 7", "pattern", "I usually wake up at 7"),
        ("Please remember the office is on floor 3, thanks!", "fact", "the office is on floor 3"),
        ("REMEMBER THAT Carol prefers email", "preference", "Carol prefers email"),
        ("记住我喜欢喝茶", "preference", "我喜欢喝茶"),
        ("请记住：小明会弹钢琴。", "capability", "小明会弹钢琴"),
        ("记一下：他每天早上跑步", "pattern", "他每天早上跑步"),
        ("请记住：北京是中国的首都", "fact", "北京是中国的首都"),
    ],
)
async def test_remember_stores_a_memory(text: str, category: str, content: str) -> None:
    assert only_call(await ask(text)) == (
        "store_memory",
        {"category": category, "content": content},
    )


@pytest.mark.parametrize(
    ("text", "information"),
    [
        ("note that the meeting moved to Friday", "the meeting moved to Friday"),
        ("Note: bob prefers short replies.", "bob prefers short replies"),
        ("记下：会议改到周五", "会议改到周五"),
        ("备注：对方喜欢简短的回复", "对方喜欢简短的回复"),
    ],
)
async def test_note_remembers_interaction_info(text: str, information: str) -> None:
    assert only_call(await ask(text)) == (
        "remember_interaction_info",
        {"information": information},
    )


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("What do you know about Alice?", "Alice"),
        ("what do you remember about green tea", "green tea"),
        ("Do you remember Bob's birthday?", "Bob's birthday"),
        ("Please tell me about Paris.", "Paris"),
        ("What is FAISS?", "FAISS"),
        ("你知道小明吗？", "小明"),
        ("关于小明，你知道什么？", "小明"),
        ("向量索引是什么", "向量索引"),
    ],
)
async def test_questions_search_memories(text: str, query: str) -> None:
    assert only_call(await ask(text)) == ("search_memories", {"query": query})


@pytest.mark.parametrize(
    ("text", "arguments"),
    [
        ("list your memories", {}),
        ("What do you remember?", {}),
        ("列出记忆", {}),
        ("你记得什么？", {}),
        ("list your preferences", {"category": "preference"}),
        ("列出偏好记忆", {"category": "preference"}),
    ],
)
async def test_list_requests_list_memories(text: str, arguments: dict[str, Any]) -> None:
    assert only_call(await ask(text)) == ("list_memories", arguments)


@pytest.mark.parametrize("text", ["forget memory 12", "Forget #12.", "忘记记忆12", "请忘记记忆 12"])
async def test_forget_by_id(text: str) -> None:
    assert only_call(await ask(text)) == ("forget_memory", {"memory_id": 12})


@pytest.mark.parametrize(
    "text", ["hello there", "remembering things is hard", "notebook on the desk", "", "你好"]
)
async def test_other_text_is_acknowledged(text: str) -> None:
    response = await ask(text)
    assert response.tool_calls == ()
    assert response.text == ("好的。" if "你" in text else "Noted.")


async def test_only_offered_tools_are_called() -> None:
    search_only = [schema("search_memories")]
    refused = await ask("remember that Alice likes tea", search_only)
    assert refused.tool_calls == () and refused.text
    assert only_call(await ask("what do you know about Alice", search_only))[0] == (
        "search_memories"
    )
    without_tools = await ask("what do you know about Alice", [])
    assert without_tools.tool_calls == () and without_tools.text


async def test_category_stays_within_the_schema_enum() -> None:
    parameters = {
        "type": "object",
        "properties": {"category": {"type": "string", "enum": ["fact", "event"]}},
    }
    name, arguments = only_call(
        await ask("remember that Alice likes tea", [schema("store_memory", parameters)])
    )
    assert (name, arguments["category"]) == ("store_memory", "fact")


async def run_turn(
    llm: ScriptedLLM, text: str, result: str, tools: Sequence[dict[str, Any]] = TOOLS
) -> str:
    """One full tool loop: request, tool call, tool result, final text."""
    conversation = [ChatMessage(role="system", content="You are helpful."), user(text)]
    first = await llm.complete(conversation, tools)
    assert len(first.tool_calls) == 1
    call = first.tool_calls[0]
    conversation += [
        first.to_message(),
        ChatMessage(role="tool", content=result, tool_call_id=call.id),
    ]
    final = await llm.complete(conversation, tools)
    assert final.tool_calls == ()
    assert final.finish_reason == "stop"
    assert final.text is not None
    return final.text


@pytest.mark.parametrize(
    ("text", "result", "answer"),
    [
        ("remember that Alice likes tea", "Stored 4.", "OK, I'll remember that: Alice likes tea"),
        ("请记住：小明喜欢猫", "Stored memory 5.", "好的，我记住了：小明喜欢猫"),
        ("note that bob is on holiday", "Noted.", "OK, noted: bob is on holiday"),
        ("forget #12", "Forgot memory 12.", "OK, I've forgotten memory 12."),
        ("忘记记忆12", "Forgot memory 12.", "好的，我已忘记记忆12。"),
        ("what do you know about Bob", "No matches.", "I don't remember anything about Bob."),
        ("你知道小红吗", "No memories found.", "我不记得关于小红的任何事情。"),
        ("list your memories", "No memories yet.", "I don't remember anything yet."),
    ],
)  # fmt: skip
async def test_answers_after_tool_results(text: str, result: str, answer: str) -> None:
    assert await run_turn(ScriptedLLM(), text, result) == answer


async def test_search_answer_quotes_found_memories() -> None:
    result = (
        "Found 2 memories:\n"
        "- [preference] Alice likes green tea (id 3)\n"
        "- [fact] Alice works in Lyon (#8)\n"
    )
    text = await run_turn(ScriptedLLM(), "What do you know about Alice?", result)
    assert text == (
        "Here is what I remember about Alice:\n- Alice likes green tea\n- Alice works in Lyon"
    )


async def test_list_answer_quotes_memories_in_chinese() -> None:
    text = await run_turn(ScriptedLLM(), "你记得什么", "- [fact] 北京是首都 (id 1)")
    assert text == "我记得这些：\n- 北京是首都"


@pytest.mark.parametrize(
    "result",
    ["Error: content must not be empty", '{"error": "budget exhausted"}', "invalid category"],
)
async def test_failed_tool_is_reported(result: str) -> None:
    text = await run_turn(ScriptedLLM(), "remember that x is y", result)
    assert text.startswith("Sorry, I couldn't remember that:")
    assert result in text


async def test_memory_context_is_not_a_request_but_is_recalled() -> None:
    context = (
        "<memory-context source=recall>\n"
        "- [fact] The server runs on port 5222 (id 2)\n"
        "- [preference] Alice likes green tea (id 3)\n"
        "</memory-context>"
    )
    llm = ScriptedLLM()
    before = await llm.complete([ChatMessage(role="user", content=context), user("hi")], TOOLS)
    after = await llm.complete(
        [user("does alice drink tea"), ChatMessage(role="user", content=context)], TOOLS
    )
    assert before.text == "I recall: The server runs on port 5222"
    assert after.text == "I recall: Alice likes green tea"
    stored = await llm.complete(
        [user("remember that Bob likes coffee"), ChatMessage(role="user", content=context)], TOOLS
    )
    assert only_call(stored)[1]["content"] == "Bob likes coffee"


async def test_tool_result_always_ends_the_loop_even_with_unknown_ids() -> None:
    llm = ScriptedLLM()
    messages = [
        user("remember that x"),
        ChatMessage(role="tool", content="whatever", tool_call_id="other", name="weather"),
    ]
    response = await llm.complete(messages, TOOLS)
    assert response.tool_calls == () and response.text == "Done: whatever"


async def test_deterministic_ids_and_answers() -> None:
    script = ["remember that a likes b", "what do you know about a", "hello", "forget 3"]
    first, second = ScriptedLLM(), ScriptedLLM()
    answers_1 = [await first.complete([user(t)], TOOLS) for t in script]
    answers_2 = [await second.complete([user(t)], TOOLS) for t in script]
    assert answers_1 == answers_2
    assert [c.id for r in answers_1 for c in r.tool_calls] == ["call_1", "call_2", "call_3"]
    assert [call.messages[-1].content for call in first.calls] == script
    assert first.calls[0].tools == NAMES
    assert first.calls[0].response == answers_1[0]


async def test_closed_client_refuses() -> None:
    async with ScriptedLLM() as llm:
        await llm.complete([user("hi")])
    with pytest.raises(LLMError, match="closed"):
        await llm.complete([user("hi")])


def test_memory_lines_formats() -> None:
    text = (
        "Results:\n"
        "- [fact] plain (id 1)\n"
        "* [pattern] starred (id: 2)\n"
        "1. numbered (#3)\n"
        "[preference] bare line (id 4, score 0.91)\n"
        "> quoted memory\n"
        "not a memory line\n"
    )
    assert memory_lines(text) == ["plain", "starred", "numbered", "bare line", "quoted memory"]
    as_json = json.dumps({"results": [{"id": 1, "content": "from json"}, {"id": 2}]})
    assert memory_lines(as_json) == ["from json"]
    assert memory_lines("No memories found.") == []


PHRASES = st.sampled_from(
    ["", "remember that ", "记住", "note: ", "备注：", "what is ", "你知道", "forget #",
     "list your ", "请", "please ", "what do you know about ", "<memory-context>\n- "]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    prefix=PHRASES,
    body=st.text(max_size=60),
    offered=st.lists(st.sampled_from(NAMES), unique=True),
    result=st.text(max_size=80),
)
def test_any_text_yields_text_or_one_offered_call(
    prefix: str, body: str, offered: list[str], result: str
) -> None:
    async def scenario() -> None:
        llm = ScriptedLLM()
        tools = [schema(name) for name in offered]
        conversation = [user(prefix + body)]
        response = await llm.complete(conversation, tools)
        if response.tool_calls:
            (call,) = response.tool_calls
            assert response.text is None
            assert call.name in offered
            assert isinstance(json.loads(call.arguments), dict)
            conversation += [
                response.to_message(),
                ChatMessage(role="tool", content=result, tool_call_id=call.id),
            ]
            final = await llm.complete(conversation, tools)
            assert final.tool_calls == () and isinstance(final.text, str)
        else:
            assert isinstance(response.text, str) and response.text

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("text", "name", "arguments"),
    [
        ("I am human@localhost. list your memories", "list_memories", {}),
        ("I am human@localhost, forget memory 1", "forget_memory", {"memory_id": 1}),
        ("我是human@localhost。列出所有记忆", "list_memories", {}),
        ("what memories do you have?", "list_memories", {}),
        ("show me everything you remember", "list_memories", {}),
        ("把你的记忆都列出来", "list_memories", {}),
        ("你都记得哪些事", "list_memories", {}),
        ("delete memory #3", "forget_memory", {"memory_id": 3}),
        ("please forget the memory with id 3", "forget_memory", {"memory_id": 3}),
        ("Tell me the wifi password", "search_memories", {"query": "wifi password"}),
        (
            "This is human@localhost speaking: what is the Porto wifi password?",
            "search_memories",
            {"query": "the Porto wifi password"},
        ),
    ],
)
async def test_more_phrasings_and_a_request_after_other_sentences(
    text: str, name: str, arguments: dict[str, Any]
) -> None:
    assert only_call(await ask(text)) == (name, arguments)


@pytest.mark.parametrize(
    "result",
    [
        "forget_memory failed: memory 3 is not yours to forget",
        "search_memories ran out of time: the limit was reached",
        "unknown tool 'x'; the tools available are: none",
    ],
)
async def test_a_refused_tool_call_is_not_reported_as_done(result: str) -> None:
    text = await run_turn(ScriptedLLM(), "forget memory 3", result)
    assert text.startswith("Sorry, I couldn't forget memory 3:")
