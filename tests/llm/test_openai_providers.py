"""OpenAICompatibleLLM with the providers users run: streamed answers (asked for or
not), tool calls written in text, structured JSON output, and a server failing in each
way it can, against an OpenAI-format HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import jsonschema
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.errors import InvalidToolInput, LLMError
from spade_memory.llm import ChatMessage, OpenAICompatibleLLM
from spade_memory.llm.json_output import json_in_text, schema_problems
from spade_memory.llm.text_tool_calls import tool_calls_in_text
from tests.llm.test_openai_client import STORE_TOOL, USER, Behaviour, FakeOpenAI, completion, reply

SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search_memories",
        "description": "Search memories.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}
TOOLS = [STORE_TOOL, SEARCH_TOOL]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    state = FakeOpenAI()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", state.handle)
    server = TestServer(app, host="127.0.0.1", port=0, handler_cancellation=True)
    await server.start_server()
    state.base_url = str(server.make_url("/v1"))
    yield state
    state.release.set()
    await server.close()


@pytest.fixture
async def make_client() -> AsyncIterator[Callable[..., OpenAICompatibleLLM]]:
    made: list[OpenAICompatibleLLM] = []

    def factory(fake: FakeOpenAI, **kwargs: Any) -> OpenAICompatibleLLM:
        kwargs.setdefault("model", "test-model")
        kwargs.setdefault("backoff", 0.0)
        client = OpenAICompatibleLLM(base_url=fake.base_url, **kwargs)
        made.append(client)
        return client

    yield factory
    for client in made:
        await client.aclose()


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def stream(
    events: list[Any],
    *,
    done: bool = True,
    content_type: str = "text/event-stream",
    abort: bool = False,
    hang: asyncio.Event | None = None,
) -> Behaviour:
    """Answer with server-sent events; optionally cut the connection or hang midway."""

    async def behave(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        for event in events:
            if isinstance(event, str) and event.startswith(":"):
                await response.write(f"{event}\n".encode())  # a comment line
                continue
            data = event if isinstance(event, str) else json.dumps(event)
            await response.write(f"data: {data}\n\n".encode())
        if hang is not None:
            await hang.wait()
        if abort:
            assert request.transport is not None
            request.transport.close()
            return response
        if done:
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    return behave


TEXT_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hel"}),
    ": a comment line",
    chunk({"content": "lo."}, "stop"),
    {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
]


# -- streaming ------------------------------------------------------------------------


async def test_streamed_text_is_assembled(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(stream(TEXT_STREAM))
    response = await make_client(fake, stream=True).complete(USER)
    assert response.text == "Hello."
    assert response.finish_reason == "stop"
    assert response.usage == {"prompt_tokens": 5, "completion_tokens": 2}
    assert fake.bodies[0]["stream"] is True
    assert fake.headers[0]["Accept"] == "text/event-stream"


async def test_streamed_tool_calls_are_assembled_by_index(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    first = {
        "index": 0,
        "id": "call_a",
        "type": "function",
        "function": {"name": "store_memory", "arguments": ""},
    }
    second = {
        "index": 1,
        "id": "call_b",
        "type": "function",
        "function": {"name": "search_memories", "arguments": '{"qu'},
    }
    events = [
        chunk({"role": "assistant", "tool_calls": [first]}),
        chunk({"tool_calls": [second]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"category": "fact", '}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'ery": "tea"}'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"content": "x"}'}}]}),
        chunk({}, "tool_calls"),
    ]  # fmt: skip
    fake.script.append(stream(events))
    response = await make_client(fake, stream=True).complete(USER, TOOLS)
    assert response.text is None
    assert [(c.id, c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("call_a", "store_memory", {"category": "fact", "content": "x"}),
        ("call_b", "search_memories", {"query": "tea"}),
    ]
    assert response.finish_reason == "tool_calls"


async def test_an_event_stream_answer_to_a_plain_request_is_read(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(stream(TEXT_STREAM))
    fake.script.append(stream(TEXT_STREAM, content_type="application/json"))
    client = make_client(fake)
    assert (await client.complete(USER)).text == "Hello."
    assert (await client.complete(USER)).text == "Hello."  # mislabelled, read by its body
    assert "stream" not in fake.bodies[0]


async def test_a_server_that_only_streams_gets_streamed_requests(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply({"error": {"message": "stream must be set to true"}}, status=400))
    fake.script.append(stream(TEXT_STREAM))
    fake.script.append(stream(TEXT_STREAM))
    client = make_client(fake, max_retries=1)
    assert (await client.complete(USER)).text == "Hello."
    assert (await client.complete(USER)).text == "Hello."
    assert ["stream" in body for body in fake.bodies] == [False, True, True]


async def test_a_stream_ending_early_is_retried_then_reported(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    partial = [chunk({"content": "Hal"})]
    fake.script.append(stream(partial, done=False))
    fake.script.append(stream(TEXT_STREAM))
    assert (await make_client(fake, stream=True, max_retries=1).complete(USER)).text == "Hello."
    fake.script.extend([stream(partial, done=False), stream(partial, abort=True)])
    with pytest.raises(LLMError, match=r"after 2 attempt\(s\)"):
        await make_client(fake, stream=True, max_retries=1).complete(USER)
    assert len(fake.bodies) == 4


async def test_a_connection_cut_mid_stream_is_retried(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(stream([chunk({"content": "Hal"})], abort=True))
    fake.script.append(stream(TEXT_STREAM))
    assert (await make_client(fake, stream=True, max_retries=1).complete(USER)).text == "Hello."


async def test_a_stream_that_stops_coming_ends_at_the_deadline(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.extend([stream([chunk({"content": "Hal"})], hang=fake.release)] * 3)
    client = make_client(fake, stream=True, timeout=0.3, deadline=0.8, max_retries=5)
    began = time.monotonic()
    with pytest.raises(LLMError, match="no answer within"):
        await client.complete(USER)
    assert time.monotonic() - began < 2.0


async def test_an_error_event_or_an_empty_stream_is_an_error(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(stream([{"error": {"message": "model crashed"}}]))
    with pytest.raises(LLMError, match="model crashed"):
        await make_client(fake, stream=True).complete(USER)
    fake.script.append(stream([]))
    with pytest.raises(LLMError, match="held no chunk"):
        await make_client(fake, stream=True).complete(USER)
    fake.script.append(stream(["not json"]))
    with pytest.raises(LLMError, match="not JSON"):
        await make_client(fake, stream=True).complete(USER)


async def test_rate_limit_then_stream(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply({"error": "slow"}, status=429, headers={"Retry-After": "0"}))
    fake.script.append(reply("boom", status=500))
    fake.script.append(stream(TEXT_STREAM))
    assert (await make_client(fake, stream=True, max_retries=2).complete(USER)).text == "Hello."


# -- tool calls written in text -----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "search_memories", "arguments": {"query": "tea"}}\n</tool_call>',
        'Let me look.\n```json\n{"name": "search_memories", "arguments": {"query": "tea"}}\n```',
        '{"name": "search_memories", "parameters": {"query": "tea"}}',
        '[{"type": "function", "function": {"name": "search_memories", '
        '"arguments": "{\\"query\\": \\"tea\\"}"}}]',
        '<function=search_memories>{"query": "tea"}</function>',
        '<tool_call>{"name": "search_memories", "arguments": {"query": "tea"}}',  # unclosed
    ],
)
async def test_tool_calls_in_text_become_real_calls(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM], text: str
) -> None:
    fake.script.append(reply(completion(text)))
    response = await make_client(fake).complete(USER, TOOLS)
    assert [(c.name, c.parse_arguments()) for c in response.tool_calls] == [
        ("search_memories", {"query": "tea"})
    ]
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls[0].id.startswith("call_")
    assert response.text in (None, "Let me look.")


async def test_several_tagged_calls_keep_their_order_and_the_text_around(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    text = (
        'Sure.\n<tool_call>{"name": "store_memory", "arguments": '
        '{"category": "fact", "content": "tea"}}</tool_call>\n'
        '<tool_call>{"name": "search_memories", "arguments": {"query": "tea"}}</tool_call>'
    )
    fake.script.append(reply(completion(text)))
    response = await make_client(fake).complete(USER, TOOLS)
    assert [c.name for c in response.tool_calls] == ["store_memory", "search_memories"]
    assert response.text == "Sure."


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "delete_everything", "arguments": {}}',  # not offered
        '{"name": "search_memories", "query": "tea", "score": 3}',  # not the shape of a call
        '```json\n{"name": "Alice", "age": 30}\n```',  # a JSON answer
        "I would call search_memories, but I know this already.",
    ],
)
async def test_text_that_is_not_an_offered_call_is_left_alone(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM], text: str
) -> None:
    fake.script.append(reply(completion(text)))
    response = await make_client(fake).complete(USER, TOOLS)
    assert response.tool_calls == () and response.text == text


async def test_a_broken_tagged_call_reaches_the_tool_as_a_clear_error(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    text = '<tool_call>{"name": "search_memories", "arguments": {"query": "tea}</tool_call>'
    fake.script.append(reply(completion(text)))
    response = await make_client(fake).complete(USER, TOOLS)
    (call,) = response.tool_calls
    assert call.name == "search_memories"
    with pytest.raises(InvalidToolInput, match="not valid JSON"):
        call.parse_arguments()


async def test_text_calls_are_read_only_when_asked_and_when_tools_are_offered(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    text = '{"name": "search_memories", "arguments": {"query": "tea"}}'
    fake.script.extend([reply(completion(text)), reply(completion(text))])
    assert (await make_client(fake, text_tool_calls=False).complete(USER, TOOLS)).text == text
    assert (await make_client(fake).complete(USER)).tool_calls == ()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_reading_calls_from_any_text_never_fails_nor_invents_tools(text: str) -> None:
    calls, rest = tool_calls_in_text(text, TOOLS)
    assert all(call.name in ("store_memory", "search_memories") for call in calls)
    if not calls:
        assert rest == text


# -- structured output ------------------------------------------------------------------

FORMED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memories": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "minLength": 1},
                    "category": {"enum": ["fact", "preference"]},
                    "importance": {"type": "number", "minimum": 0, "maximum": 1},
                },
                "required": ["content", "category"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["memories"],
    "additionalProperties": False,
}
GOOD = {"memories": [{"content": "Alice likes tea", "category": "preference", "importance": 0.4}]}


async def test_structured_output_asks_for_the_schema(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply(completion(json.dumps(GOOD))))
    value = await make_client(fake).complete_json(USER, FORMED, name="memories")
    assert value == GOOD
    sent = fake.bodies[0]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"] == FORMED


async def test_structured_output_falls_back_to_json_in_text(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply({"error": {"message": "response_format is not supported"}}, 400))
    fake.script.append(reply(completion("Here you go:\n```json\n" + json.dumps(GOOD) + "\n```")))
    value = await make_client(fake).complete_json(USER, FORMED)
    assert value == GOOD
    retry = fake.bodies[1]
    assert "response_format" not in retry
    assert "JSON schema" in retry["messages"][-1]["content"]


async def test_structured_output_is_corrected_once_then_refused(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    bad = {"memories": [{"content": "", "category": "gossip"}]}
    fake.script.append(reply(completion(json.dumps(bad))))
    fake.script.append(reply(completion(json.dumps(GOOD))))
    assert await make_client(fake).complete_json(USER, FORMED) == GOOD
    correction = fake.bodies[1]["messages"][-1]["content"]
    assert "$.memories[0].content is shorter than 1" in correction
    assert "$.memories[0].category must be one of" in correction
    fake.script.extend([reply(completion("no JSON here")), reply(completion("{}"))])
    with pytest.raises(LLMError, match="lacks the required property 'memories'"):
        await make_client(fake).complete_json(USER, FORMED)


async def test_structured_output_keeps_other_refusals(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply({"error": {"message": "unknown model"}}, 404))
    with pytest.raises(LLMError, match="HTTP 404"):
        await make_client(fake).complete_json([ChatMessage(role="user", content="x")], FORMED)
    assert len(fake.bodies) == 1


@pytest.mark.parametrize(
    "value",
    [
        GOOD,
        {"memories": []},
        {"memories": [{"content": "x", "category": "fact", "extra": 1}]},
        {"memories": [{"content": "x", "category": "fact", "importance": 2}]},
        {"memories": [{"content": 5, "category": "fact"}]},
        {"memories": "none"},
        {},
        [],
        {"memories": [{"content": "x", "category": "fact", "importance": True}]},
    ],
)
def test_schema_check_agrees_with_jsonschema(value: Any) -> None:
    valid = jsonschema.Draft202012Validator(FORMED).is_valid(value)
    assert (schema_problems(value, FORMED) == []) is valid


def test_json_is_found_in_chatty_text() -> None:
    assert json_in_text('Sure! {"a": {"b": "}"}} hope it helps') == {"a": {"b": "}"}}
    assert json_in_text("```\n[1, 2]\n```") == [1, 2]
    with pytest.raises(ValueError, match="no JSON"):
        json_in_text("nothing { here")
    assert json_in_text('He said "hi" [1] then {"x": [1, {"y": 2}]}') == [1]
    # a doubled bracket, as a template writes it: the inner one opens the JSON
    assert json_in_text('Here you go: {{"entities": ["Acme"]}') == {"entities": ["Acme"]}
    assert json_in_text('Result:\n{{"answer": 1}}') == {"answer": 1}
    assert json_in_text("values [[1, 2]") == [1, 2]
    # far past the first brackets, after brackets that hold no JSON
    thinking = " ".join(f"call(x[{i}, y" for i in range(300))
    assert json_in_text(f'<think>{thinking}</think> {{"memories": []}}') == {"memories": []}


@pytest.mark.parametrize(
    "text", ["{" * 16_000, "[" * 16_000, '{"' + "x{" * 16_000, "[1," * 16_000, "[" * 100_000]
)
def test_an_answer_of_brackets_is_refused_without_holding_the_event_loop(text: str) -> None:
    # A small model stuck repeating "{": matching brackets from every one of them
    # took 20 s for 16,000 (the square of the length), with no timeout able to stop
    # it on the event loop. The bound is a hang check, far above what it takes.
    started = time.perf_counter()
    with pytest.raises(ValueError, match="no JSON"):
        json_in_text(text)
    assert time.perf_counter() - started < 2.0


async def test_a_stream_line_too_long_to_read_is_an_llm_error(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(stream([chunk({"content": "x" * 600_000}, "stop")]))
    with pytest.raises(LLMError, match="unreadable answer"):
        await make_client(fake, stream=True).complete(USER)


async def test_a_mislabelled_stream_keeps_unicode_line_separators_in_its_text(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    # raw in the JSON (not escaped), as servers send them
    events = [
        json.dumps(chunk({"content": "first\u2028second\u0085third"}, "stop"), ensure_ascii=False)
    ]
    fake.script.append(stream(events, content_type="application/json"))
    fake.script.append(stream(events))
    client = make_client(fake)
    assert (await client.complete(USER)).text == "first\u2028second\u0085third"
    assert (await client.complete(USER)).text == "first\u2028second\u0085third"


async def test_streamed_tool_calls_without_an_index_are_told_apart_by_their_ids(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    # one whole call per chunk, no "index" (Ollama, some proxies)
    def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    events = [
        chunk(
            {"role": "assistant", "tool_calls": [call("call_a", "store_memory", '{"category": ')]}
        ),
        chunk({"tool_calls": [{"function": {"arguments": '"fact", "content": "x"}'}}]}),
        chunk({"tool_calls": [call("call_b", "search_memories", '{"query": "tea"}')]}),
        chunk({}, "tool_calls"),
    ]
    fake.script.append(stream(events))
    response = await make_client(fake, stream=True).complete(USER, TOOLS)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("call_a", "store_memory", {"category": "fact", "content": "x"}),
        ("call_b", "search_memories", {"query": "tea"}),
    ]


async def test_the_switch_to_streaming_spends_no_attempt(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply({"error": {"message": "stream must be set to true"}}, status=400))
    fake.script.append(stream(TEXT_STREAM))
    assert (await make_client(fake, max_retries=0).complete(USER)).text == "Hello."
    assert ["stream" in body for body in fake.bodies] == [False, True]
