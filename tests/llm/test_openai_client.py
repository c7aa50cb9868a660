"""OpenAICompatibleLLM against a real OpenAI-format HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from spade_memory.errors import ConfigError, LLMError
from spade_memory.llm import ChatMessage, OpenAICompatibleLLM
from spade_memory.llm.openai import MAX_RETRY_AFTER_SECONDS, _retry_after, parse_chat_completion

Behaviour = Callable[[web.Request], Awaitable[web.StreamResponse]]

STORE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "store_memory",
        "description": "Store a long-term memory.",
        "parameters": {
            "type": "object",
            "properties": {"category": {"type": "string"}, "content": {"type": "string"}},
            "required": ["category", "content"],
        },
    },
}


def completion(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str = "stop",
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }


def reply(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Behaviour:
    async def behave(request: web.Request) -> web.StreamResponse:
        body = payload if isinstance(payload, str) else json.dumps(payload)
        return web.Response(
            text=body, status=status, headers=headers, content_type="application/json"
        )

    return behave


class FakeOpenAI:
    """Records each request and answers with the next scripted behaviour."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.script: list[Behaviour] = []
        self.release = asyncio.Event()
        self.base_url = ""

    async def hang(self, request: web.Request) -> web.StreamResponse:
        await self.release.wait()
        return web.Response(text="{}")

    async def models(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        assert self.script, "the test server received more requests than scripted"
        return await self.script.pop(0)(request)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        self.bodies.append(await request.json())
        assert self.script, "the test server received more requests than scripted"
        return await self.script.pop(0)(request)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    server_state = FakeOpenAI()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server_state.handle)
    app.router.add_get("/v1/models", server_state.models)
    server = TestServer(app, host="127.0.0.1", port=0, handler_cancellation=True)
    await server.start_server()
    server_state.base_url = str(server.make_url("/v1"))
    yield server_state
    server_state.release.set()
    await server.close()


@pytest.fixture
async def make_client() -> AsyncIterator[Callable[..., OpenAICompatibleLLM]]:
    made: list[OpenAICompatibleLLM] = []

    def factory(**kwargs: Any) -> OpenAICompatibleLLM:
        kwargs.setdefault("model", "test-model")
        kwargs.setdefault("backoff", 0.0)
        client = OpenAICompatibleLLM(**kwargs)
        made.append(client)
        return client

    yield factory
    for client in made:
        await client.aclose()


@pytest.fixture
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield


USER = [ChatMessage(role="user", content="hello")]


async def test_plain_answer(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply(completion("Hi there.")))
    client = make_client(base_url=fake.base_url + "/", temperature=0.2, max_tokens=64)
    response = await client.complete([ChatMessage(role="system", content="be kind"), *USER])
    assert response.text == "Hi there."
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.usage == {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    body = fake.bodies[0]
    assert body["model"] == "test-model"
    assert body["messages"] == [
        {"role": "system", "content": "be kind"},
        {"role": "user", "content": "hello"},
    ]
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 64
    assert "tools" not in body and "tool_choice" not in body


async def test_multi_round_tool_calls(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    arguments = json.dumps({"category": "preference", "content": "Alice likes tea"})
    fake.script.append(
        reply(
            completion(
                None,
                [{"id": "call_abc", "type": "function",
                  "function": {"name": "store_memory", "arguments": arguments}}],
                "tool_calls",
            )
        )
    )  # fmt: skip
    fake.script.append(reply(completion("I'll remember that Alice likes tea.")))
    client = make_client(base_url=fake.base_url)
    conversation = [ChatMessage(role="user", content="remember that Alice likes tea")]

    first = await client.complete(conversation, [STORE_TOOL])
    assert first.text is None
    assert first.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_abc", "store_memory", arguments)
    ]
    conversation.append(first.to_message())
    conversation.append(ChatMessage(role="tool", content="stored (id 7)", tool_call_id="call_abc"))
    second = await client.complete(conversation, [STORE_TOOL])
    assert second.text == "I'll remember that Alice likes tea."
    assert second.tool_calls == ()

    for body in fake.bodies:
        assert body["tools"] == [STORE_TOOL]
        assert body["tool_choice"] == "auto"
    sent = fake.bodies[1]["messages"]
    assert sent[1]["role"] == "assistant"
    assert sent[1]["tool_calls"][0]["id"] == "call_abc"
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == arguments
    assert sent[2] == {"role": "tool", "tool_call_id": "call_abc", "content": "stored (id 7)"}


async def test_malformed_tool_arguments_pass_through_untouched(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    broken = '{"content": "unterminated'
    fake.script.append(
        reply(completion(None, [{"id": "c1", "function": {"name": "store_memory",
                                                          "arguments": broken}}]))
    )  # fmt: skip
    response = await make_client(base_url=fake.base_url).complete(USER, [STORE_TOOL])
    assert response.tool_calls[0].arguments == broken


async def test_object_arguments_become_json_text_and_missing_ids_are_generated(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    calls = [
        {"function": {"name": "store_memory", "arguments": {"content": "茶", "category": "fact"}}},
        {"id": "", "function": {"name": "store_memory", "arguments": None}},
    ]
    fake.script.append(reply(completion(None, calls)))
    response = await make_client(base_url=fake.base_url).complete(USER, [STORE_TOOL])
    first, second = response.tool_calls
    assert json.loads(first.arguments) == {"content": "茶", "category": "fact"}
    assert json.loads(second.arguments) == {}
    assert first.id and second.id and first.id != second.id


async def test_rate_limit_honours_retry_after(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply({"error": "slow down"}, status=429, headers={"Retry-After": "0"}))
    fake.script.append(reply(completion("after the wait")))
    # With the backoff alone the retry would wait 30-60 s; Retry-After: 0 overrides it.
    client = make_client(base_url=fake.base_url, backoff=60.0)
    async with asyncio.timeout(10):
        response = await client.complete(USER)
    assert response.text == "after the wait"
    assert len(fake.bodies) == 2


async def test_server_errors_are_retried_then_reported(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.extend(reply("upstream exploded", status=500) for _ in range(3))
    client = make_client(base_url=fake.base_url, max_retries=2)
    with pytest.raises(LLMError, match=r"after 3 attempt\(s\): HTTP 500: upstream exploded"):
        await client.complete(USER)
    assert len(fake.bodies) == 3


async def test_server_error_then_success(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply("busy", status=503))
    fake.script.append(reply(completion("recovered")))
    response = await make_client(base_url=fake.base_url, max_retries=1).complete(USER)
    assert response.text == "recovered"


async def test_client_error_is_not_retried(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply({"error": {"message": "unknown model 'nope'"}}, status=400))
    client = make_client(base_url=fake.base_url, max_retries=3)
    with pytest.raises(LLMError, match=r"HTTP 400: .*unknown model 'nope'"):
        await client.complete(USER)
    assert len(fake.bodies) == 1


async def test_timeout_is_retried_then_reported(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.extend([fake.hang, fake.hang])
    client = make_client(base_url=fake.base_url, timeout=0.2, max_retries=1)
    with pytest.raises(LLMError, match=r"after 2 attempt\(s\): no answer within 0.2 s"):
        await client.complete(USER)
    assert len(fake.bodies) == 2


async def test_connection_refused_is_reported(
    make_client: Callable[..., OpenAICompatibleLLM],
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = make_client(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    with pytest.raises(LLMError, match=r"after 2 attempt\(s\)"):
        await client.complete(USER)


async def test_api_key_from_argument_is_sent_but_never_logged(
    fake: FakeOpenAI,
    make_client: Callable[..., OpenAICompatibleLLM],
    caplog: pytest.LogCaptureFixture,
    no_env_key: None,
) -> None:
    caplog.set_level(logging.DEBUG, logger="spade_memory")
    fake.script.append(reply("oops", status=500))
    fake.script.append(reply(completion("ok")))
    client = make_client(base_url=fake.base_url, api_key="sk-secret-123", max_retries=1)
    await client.complete(USER)
    assert all(h["Authorization"] == "Bearer sk-secret-123" for h in fake.headers)
    assert caplog.records, "the retry should have been logged"
    assert "sk-secret-123" not in caplog.text
    assert "sk-secret-123" not in repr(client)


async def test_api_key_from_environment(
    fake: FakeOpenAI,
    make_client: Callable[..., OpenAICompatibleLLM],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    fake.script.append(reply(completion("ok")))
    await make_client(base_url=fake.base_url).complete(USER)
    assert fake.headers[0]["Authorization"] == "Bearer sk-env"


async def test_no_api_key_no_authorization_header(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM], no_env_key: None
) -> None:
    fake.script.append(reply(completion("ok")))
    client = make_client(base_url=fake.base_url, extra_headers={"X-Trace": "t1"})
    await client.complete(USER)
    assert "Authorization" not in fake.headers[0]
    assert fake.headers[0]["X-Trace"] == "t1"


async def test_closed_client_refuses(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply(completion("ok")))
    async with make_client(base_url=fake.base_url) as client:
        await client.complete(USER)
    assert client.closed
    with pytest.raises(LLMError, match="client is closed"):
        await client.complete(USER)
    await client.aclose()  # idempotent
    assert len(fake.bodies) == 1


async def test_one_client_serves_one_event_loop_after_another(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    # A client made once and used by one asyncio.run after another (a script, or
    # agents started again): each loop gets a session of its own, none is kept.
    fake.script.extend([reply(completion("first")), reply(completion("second"))])
    client = make_client(base_url=fake.base_url, max_retries=0)

    def in_a_new_loop() -> str:
        return asyncio.run(client.complete(USER)).text or ""

    assert await asyncio.to_thread(in_a_new_loop) == "first"
    assert await asyncio.to_thread(in_a_new_loop) == "second"
    assert len(client._sessions) == 0  # each loop closed its session as it ended
    fake.script.append(reply(completion("third")))
    assert (await client.complete(USER)).text == "third"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("<html>not json</html>", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"choices": []}', "no choices"),
        ('{"choices": [{"text": "legacy"}]}', "has no message"),
        ('{"error": {"message": "model overloaded"}}', "model overloaded"),
        ('{"choices": [{"message": {"content": 5}}]}', "content is a int"),
        ('{"choices": [{"message": {"tool_calls": [{"id": "x"}]}}]}', "without a function name"),
    ],
)
async def test_malformed_bodies_raise(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM], body: str, fragment: str
) -> None:
    fake.script.append(reply(body))
    with pytest.raises(LLMError, match=fragment):
        await make_client(base_url=fake.base_url, max_retries=2).complete(USER)
    assert len(fake.bodies) == 1


def test_content_parts_and_legacy_function_call_are_read() -> None:
    body = {
        "choices": [
            {
                "message": {
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                    "function_call": {"name": "list_memories", "arguments": "{}"},
                },
                "finish_reason": "function_call",
            }
        ]
    }
    response = parse_chat_completion(json.dumps(body))
    assert response.text == "ab"
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("list_memories", "{}")]
    assert response.usage is None


def test_retry_after_is_capped() -> None:
    client = OpenAICompatibleLLM(base_url="http://127.0.0.1:1/v1", model="m", backoff=1.0)
    assert client._delay(0, 10_000.0) == MAX_RETRY_AFTER_SECONDS
    assert client._delay(0, 2.5) == 2.5
    assert 2.0 <= client._delay(2, None) <= 4.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": "localhost:11434/v1"},
        {"model": " "},
        {"timeout": 0},
        {"deadline": 0},
        {"max_retries": -1},
        {"backoff": -1.0},
        {"max_tokens": 0},
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kwargs}
    with pytest.raises(ConfigError):
        OpenAICompatibleLLM(**args)


def test_retry_after_header_forms() -> None:
    assert _retry_after("3") == 3.0
    assert _retry_after("-5") == 0.0
    assert _retry_after("nan") is None
    assert _retry_after("soon") is None
    assert _retry_after(None) is None
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55.0 <= (_retry_after(in_a_minute) or 0.0) <= 60.0
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


async def test_one_deadline_holds_across_retries(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.extend([fake.hang] * 4)
    client = make_client(base_url=fake.base_url, timeout=30, deadline=0.5, max_retries=3)
    began = time.monotonic()
    with pytest.raises(LLMError, match=r"after 1 attempt\(s\): no answer within 0.5 s"):
        await client.complete(USER)
    assert time.monotonic() - began < 3
    assert len(fake.bodies) == 1


async def test_no_retry_starts_when_its_wait_passes_the_deadline(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.extend([reply("busy", status=503, headers={"Retry-After": "20"})] * 2)
    client = make_client(base_url=fake.base_url, deadline=2, max_retries=1)
    began = time.monotonic()
    with pytest.raises(LLMError, match=r"after 1 attempt\(s\): HTTP 503"):
        await client.complete(USER)
    assert time.monotonic() - began < 2
    assert len(fake.bodies) == 1


async def test_check_passes_when_the_model_is_served(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply({"object": "list", "data": [{"id": "test-model"}]}))
    await make_client(base_url=fake.base_url).check()
    fake.script.append(reply("not found", status=404))  # no model list: reachable is enough
    await make_client(base_url=fake.base_url).check()


async def test_check_names_the_models_a_server_serves(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply({"data": [{"id": "qwen2.5"}, {"id": "llama3"}]}))
    with pytest.raises(LLMError, match=r"does not serve model 'test-model' .*llama3, qwen2.5"):
        await make_client(base_url=fake.base_url).check()


async def test_check_reports_a_refused_key_and_an_unreachable_server(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    fake.script.append(reply({"error": "no"}, status=401))
    with pytest.raises(LLMError, match=r"HTTP 401.*API key"):
        await make_client(base_url=fake.base_url).check()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(LLMError, match=r"cannot reach the LLM server at http://127.0.0.1"):
        await make_client(base_url=f"http://127.0.0.1:{port}/v1").check(timeout=2)
    fake.script.append(fake.hang)
    with pytest.raises(LLMError, match=r"did not answer in 0.3 s"):
        await make_client(base_url=fake.base_url).check(timeout=0.3)


async def test_check_takes_a_name_without_a_tag_for_its_latest(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM]
) -> None:
    # Ollama lists "qwen2.5:latest" and answers to "qwen2.5"
    fake.script.append(reply({"data": [{"id": "qwen2.5:latest"}, {"id": "llama3:8b"}]}))
    await make_client(base_url=fake.base_url, model="qwen2.5").check()
    fake.script.append(reply({"data": [{"id": "qwen2.5"}]}))
    await make_client(base_url=fake.base_url, model="qwen2.5:latest").check()
    fake.script.append(reply({"data": [{"id": "llama3:8b"}]}))
    with pytest.raises(LLMError, match="does not serve model 'llama3'"):
        await make_client(base_url=fake.base_url, model="llama3").check()


async def test_credentials_in_the_url_go_as_a_header_not_into_errors(
    fake: FakeOpenAI, make_client: Callable[..., OpenAICompatibleLLM], no_env_key: None
) -> None:
    fake.script.append(reply(completion("hi")))
    fake.script.extend([reply("upstream exploded", status=500)] * 2)
    host = fake.base_url.removeprefix("http://")
    client = make_client(base_url=f"http://bob:pa55@{host}", max_retries=1)
    assert (await client.complete(USER)).text == "hi"
    assert fake.headers[0]["Authorization"] == "Basic Ym9iOnBhNTU="  # bob:pa55
    with pytest.raises(LLMError) as failed:
        await client.complete(USER)
    assert "pa55" not in str(failed.value) + repr(client) + client.url
