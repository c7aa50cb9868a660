"""An endpoint client keeps its connection between requests, and nothing past its loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from spade_memory.http_sessions import LoopSessions
from spade_memory.llm import ChatMessage, OpenAICompatibleLLM

USER = [ChatMessage(role="user", content="hello")]
ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}


class Server:
    """An OpenAI-format server that notes the client port of each request."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.base_url = ""

    async def handle(self, request: web.Request) -> web.Response:
        assert request.transport is not None
        self.ports.append(request.transport.get_extra_info("peername")[1])
        return web.Response(text=json.dumps(ANSWER), content_type="application/json")


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", state.handle)
    test_server = TestServer(app, host="127.0.0.1", port=0)
    await test_server.start_server()
    state.base_url = str(test_server.make_url("/v1"))
    yield state
    await test_server.close()


class Recording:
    """Makes the sessions a client uses, and keeps them to look at afterwards."""

    def __init__(self) -> None:
        self.made: list[aiohttp.ClientSession] = []

    def __call__(self) -> aiohttp.ClientSession:
        session = aiohttp.ClientSession()
        self.made.append(session)
        return session


def _client(server: Server, *, idle_seconds: float | None = None) -> tuple[Any, Recording]:
    client = OpenAICompatibleLLM(base_url=server.base_url, model="m", max_retries=0)
    recording = Recording()
    options = {} if idle_seconds is None else {"idle_seconds": idle_seconds}
    client._sessions = LoopSessions(recording, **options)
    return client, recording


async def test_requests_one_after_another_share_one_connection(server: Server) -> None:
    client, recording = _client(server)
    for _ in range(3):
        assert (await client.complete(USER)).text == "ok"
    assert len(set(server.ports)) == 1  # one TCP connection (one TLS handshake) for all
    assert len(recording.made) == 1 and len(client._sessions) == 1
    await client.aclose()
    assert recording.made[0].closed and len(client._sessions) == 0


async def test_a_session_unused_for_a_while_is_closed(server: Server) -> None:
    client, recording = _client(server, idle_seconds=0.1)
    await client.complete(USER)
    assert not recording.made[0].closed
    await asyncio.sleep(0.4)
    assert recording.made[0].closed and len(client._sessions) == 0
    await client.complete(USER)  # the next request opens another
    assert len(recording.made) == 2 and len(set(server.ports)) == 2
    await client.aclose()


async def test_a_request_while_the_session_is_kept_cancels_its_closing(server: Server) -> None:
    client, recording = _client(server, idle_seconds=0.3)
    for _ in range(4):
        await client.complete(USER)
        await asyncio.sleep(0.15)  # less than the idle time each time: 0.6 s in all
    assert len(recording.made) == 1 and not recording.made[0].closed
    assert len(set(server.ports)) == 1
    await client.aclose()


def test_each_loop_closes_its_session_as_it_ends() -> None:
    """asyncio.run, and a loop ended as spade.run ends it, close the kept session."""

    async def serve_and_call(client: OpenAICompatibleLLM) -> None:
        app = web.Application()
        state = Server()
        app.router.add_post("/v1/chat/completions", state.handle)
        test_server = TestServer(app, host="127.0.0.1", port=0)
        await test_server.start_server()
        try:
            client.base_url = str(test_server.make_url("/v1"))
            client.url = f"{client.base_url}/chat/completions"
            await client.complete(USER)
            await client.complete(USER)
        finally:
            await test_server.close()
        assert len(set(state.ports)) == 1

    client = OpenAICompatibleLLM(base_url="http://127.0.0.1:9/v1", model="m", max_retries=0)
    recording = Recording()
    client._sessions = LoopSessions(recording)
    asyncio.run(serve_and_call(client))
    assert len(recording.made) == 1 and recording.made[0].closed
    loop = asyncio.new_event_loop()  # ended as spade.run ends its loop
    try:
        loop.run_until_complete(serve_and_call(client))
        assert not recording.made[1].closed  # kept while the loop runs
        loop.run_until_complete(loop.shutdown_asyncgens())
        assert recording.made[1].closed
    finally:
        loop.close()
    assert len(client._sessions) == 0


async def test_a_closed_client_keeps_nothing_after_its_last_request(server: Server) -> None:
    client, recording = _client(server)
    started = asyncio.ensure_future(client.complete(USER))
    await asyncio.sleep(0)
    await client.aclose()  # the request under way finishes, then its session closes
    assert (await started).text == "ok"
    assert all(session.closed for session in recording.made)
    assert len(client._sessions) == 0


def test_idle_time_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="idle_seconds"):
        LoopSessions(aiohttp.ClientSession, idle_seconds=-1)


async def test_a_call_starting_as_the_idle_session_closes_takes_a_new_one() -> None:
    """The idle timer lets go of the session before its closing runs: a call that
    starts in between never gets the session closing under it."""
    recording = Recording()
    sessions = LoopSessions(recording, idle_seconds=60)
    async with sessions.connection() as first:
        pass
    loop = asyncio.get_running_loop()
    shared = sessions._shared[loop]
    assert shared.idle is not None
    shared.idle.cancel()
    sessions._idle(loop, shared)  # what the timer does: its closing task not run yet
    async with sessions.connection() as second:
        assert second is not first and not second.closed
        await asyncio.sleep(0.01)  # the closing task runs
        assert first.closed and not second.closed
    await sessions.aclose()
    assert second.closed and len(sessions) == 0
