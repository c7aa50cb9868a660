"""Chat message types, their OpenAI wire form, and the LLMClient protocol."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import spade_memory.llm as llm_pkg
from spade_memory.errors import InvalidToolInput
from spade_memory.llm import (
    ChatMessage,
    LLMClient,
    LLMResponse,
    OpenAICompatibleLLM,
    ToolCall,
)
from spade_memory.llm.messages import tool_names
from spade_memory.testing.scripted_llm import ScriptedLLM


def test_public_names_are_sorted_and_exported() -> None:
    assert llm_pkg.__all__ == sorted(llm_pkg.__all__)
    for name in llm_pkg.__all__:
        assert hasattr(llm_pkg, name), name


def test_user_and_system_messages_to_openai() -> None:
    assert ChatMessage(role="user", content="hi").to_openai() == {"role": "user", "content": "hi"}
    assert ChatMessage(role="system", content="be brief", name="cfg").to_openai() == {
        "role": "system",
        "content": "be brief",
        "name": "cfg",
    }


def test_assistant_message_with_tool_calls_to_openai() -> None:
    call = ToolCall(id="call_9", name="search_memories", arguments='{"query": "tea"}')
    message = ChatMessage(role="assistant", tool_calls=[call])  # type: ignore[arg-type]
    assert message.tool_calls == (call,)
    assert message.to_openai() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_9",
                "type": "function",
                "function": {"name": "search_memories", "arguments": '{"query": "tea"}'},
            }
        ],
    }


def test_tool_message_to_openai() -> None:
    message = ChatMessage(role="tool", content="- [fact] x (id 1)", tool_call_id="call_9")
    assert message.to_openai() == {
        "role": "tool",
        "tool_call_id": "call_9",
        "content": "- [fact] x (id 1)",
    }


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"role": "robot", "content": "x"}, "role must be one of"),
        ({"role": "tool", "content": "x"}, "tool_call_id"),
        ({"role": "user", "tool_calls": (ToolCall("a", "b", "{}"),)}, "only assistant"),
    ],
)
def test_invalid_messages_are_refused(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        ChatMessage(**kwargs)


def test_parse_arguments() -> None:
    assert ToolCall("1", "f", '{"a": [1, 2]}').parse_arguments() == {"a": [1, 2]}
    assert ToolCall("1", "f", "  ").parse_arguments() == {}
    with pytest.raises(InvalidToolInput, match="not valid JSON"):
        ToolCall("1", "f", '{"a": ').parse_arguments()
    with pytest.raises(InvalidToolInput, match="must be a JSON object"):
        ToolCall("1", "f", "[1]").parse_arguments()


def test_response_to_message_keeps_text_and_calls() -> None:
    call = ToolCall("c1", "list_memories", "{}")
    response = LLMResponse(text="thinking", tool_calls=(call,), finish_reason="tool_calls")
    message = response.to_message()
    assert message.role == "assistant"
    assert message.content == "thinking"
    assert message.tool_calls == (call,)


def test_tool_names_skips_malformed_entries() -> None:
    tools: list[Any] = [
        {"type": "function", "function": {"name": "store_memory", "parameters": {}}},
        {"type": "function", "function": {"description": "no name"}},
        {"name": "flat_form"},
        "not a mapping",
        {"type": "function", "function": "broken"},
    ]
    assert tool_names(tools) == ("store_memory", "flat_form")


def test_clients_satisfy_the_protocol() -> None:
    assert isinstance(ScriptedLLM(), LLMClient)
    assert isinstance(OpenAICompatibleLLM(base_url="http://127.0.0.1:1/v1", model="m"), LLMClient)
    assert not isinstance(object(), LLMClient)


def test_from_openai_normalises_object_arguments() -> None:
    message = ChatMessage.from_openai(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": {"k": "中"}}}],
        }
    )
    assert json.loads(message.tool_calls[0].arguments) == {"k": "中"}


def test_from_openai_refuses_garbage() -> None:
    with pytest.raises(ValueError, match="role"):
        ChatMessage.from_openai({"content": "x"})
    with pytest.raises(ValueError, match="content"):
        ChatMessage.from_openai({"role": "user", "content": 3})
    with pytest.raises(ValueError, match="function name"):
        ChatMessage.from_openai({"role": "assistant", "tool_calls": [{"id": "x"}]})


_ids = st.text(min_size=1, max_size=12)
_calls = st.builds(ToolCall, id=_ids, name=_ids, arguments=st.text(max_size=40))
_messages = st.one_of(
    st.builds(
        ChatMessage,
        role=st.sampled_from(["system", "user"]),
        content=st.text(max_size=60),
        name=st.none() | _ids,
    ),
    st.builds(
        ChatMessage,
        role=st.just("assistant"),
        content=st.none() | st.text(max_size=60),
        tool_calls=st.lists(_calls, max_size=3).map(tuple),
    ),
    st.builds(ChatMessage, role=st.just("tool"), content=st.text(max_size=60), tool_call_id=_ids),
)


@given(_messages)
def test_openai_form_round_trips_through_json(message: ChatMessage) -> None:
    wire = json.loads(json.dumps(message.to_openai()))
    assert ChatMessage.from_openai(wire) == message
