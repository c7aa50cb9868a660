"""OpenAICompatibleEmbedder against a local OpenAI-format embeddings server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from spade_memory.config import MemoryConfig
from spade_memory.embedding import (
    AsyncEmbedder,
    Embedder,
    OpenAICompatibleEmbedder,
    embedder_for_fingerprint,
    resolve_embedder,
)
from spade_memory.embedding.openai_compatible import estimate_tokens, truncate_to_tokens
from spade_memory.embedding.pacing import RequestPacer, parse_duration
from spade_memory.errors import ConfigError, EmbeddingError, EmbeddingUnavailable
from spade_memory.llm import OpenAICompatibleLLM
from spade_memory.llm.retry_after import MAX_RETRY_AFTER_SECONDS
from spade_memory.testing.embedding_server import EmbeddingServer, hashed_vector


@pytest.fixture
async def server() -> AsyncIterator[EmbeddingServer]:
    async with EmbeddingServer(dim=32) as running:
        yield running


def make(server: EmbeddingServer, **options: object) -> OpenAICompatibleEmbedder:
    options.setdefault("backoff", 0.0)
    return OpenAICompatibleEmbedder(server.base_url, server.model, **options)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_embeds_in_batches_in_input_order(server: EmbeddingServer) -> None:
    embedder = make(server, batch_size=3)
    texts = [f"text number {i}" for i in range(7)]
    await embedder.prepare(())
    matrix = await embedder.aembed_documents(texts)
    assert matrix.shape == (7, 32) and matrix.dtype == np.float32
    # the server answers each batch's items in reverse order: the index puts them back
    expected = np.asarray([hashed_vector(text, 32) for text in texts], dtype=np.float32)
    assert np.allclose(matrix, expected, atol=1e-6)
    assert [len(batch) for batch in server.inputs[1:]] == [3, 3, 1]
    assert isinstance(embedder, AsyncEmbedder) and isinstance(embedder, Embedder)


async def test_dimension_is_learnt_once_and_named_in_the_fingerprint(
    server: EmbeddingServer,
) -> None:
    embedder = make(server)
    with pytest.raises(EmbeddingError, match="not known yet"):
        _ = embedder.dim
    await embedder.prepare(())
    assert embedder.dim == 32
    assert embedder.fingerprint == f"openai-compatible:local-embed:dim=32@{server.base_url}"
    before = server.requests
    again = make(server)
    await again.prepare([embedder.fingerprint, "hashing-v1:dim=256"])
    assert again.dim == 32 and server.requests == before  # read from the stored fingerprint


async def test_dimensions_are_sent_and_checked(server: EmbeddingServer) -> None:
    embedder = make(server, dimensions=16)
    with pytest.raises(EmbeddingError, match=r"32-dimensional vectors.*have 16"):
        await embedder.aembed_documents(["hello"])
    assert server.bodies[-1]["dimensions"] == 16
    quiet = make(server, dimensions=32, send_dimensions=False)
    await quiet.aembed_documents(["hello"])
    assert "dimensions" not in server.bodies[-1]


async def test_prepare_without_server_or_dimensions_says_what_to_do() -> None:
    embedder = OpenAICompatibleEmbedder(f"http://127.0.0.1:{free_port()}/v1", "m", backoff=0)
    with pytest.raises(EmbeddingError, match="pass dimensions=N"):
        await embedder.prepare(())
    given = OpenAICompatibleEmbedder(f"http://127.0.0.1:{free_port()}/v1", "m", dimensions=8)
    await given.prepare(())  # nothing to ask
    assert given.dim == 8


async def test_rate_limit_is_waited_out_with_retry_after(server: EmbeddingServer) -> None:
    embedder = make(server, dimensions=32, send_dimensions=False)
    server.rate_limit(0.6, retry_after="0.3")
    started = time.monotonic()
    matrix = await embedder.aembed_documents(["a", "b"])
    assert matrix.shape == (2, 32)
    assert time.monotonic() - started >= 0.5
    assert 429 in server.statuses and server.statuses[-1] == 200
    assert embedder._pacer.delay > 0  # slowed down, and speeds up again as answers come


async def test_server_errors_are_retried_then_reported(server: EmbeddingServer) -> None:
    embedder = make(server, dimensions=32, max_retries=2)
    server.fail_next(500, 503)
    assert (await embedder.aembed_documents(["x"])).shape == (1, 32)
    server.fail_next(500, 502, 503)
    with pytest.raises(EmbeddingUnavailable, match="after 3 attempt"):
        await embedder.aembed_documents(["x"])


async def test_refused_connection_and_wrong_model_are_unavailable(
    server: EmbeddingServer,
) -> None:
    down = OpenAICompatibleEmbedder(
        f"http://127.0.0.1:{free_port()}/v1", "m", dimensions=4, max_retries=1, backoff=0
    )
    with pytest.raises(EmbeddingUnavailable, match="ClientConnectorError"):
        await down.aembed_documents(["x"])
    wrong = OpenAICompatibleEmbedder(server.base_url, "no-such-model", dimensions=32)
    with pytest.raises(EmbeddingUnavailable, match=r"HTTP 404.*ollama pull"):
        await wrong.aembed_documents(["x"])
    assert server.statuses == [404]  # not retried: the answer will not change by itself


async def test_a_hanging_server_times_out(server: EmbeddingServer) -> None:
    embedder = make(server, dimensions=32, timeout=0.2, max_retries=1)
    server.hang()
    with pytest.raises(EmbeddingUnavailable, match=r"no answer within 0\.2 s"):
        await embedder.aembed_documents(["x"])
    with pytest.raises(EmbeddingUnavailable):
        started = time.monotonic()
        await make(server, dimensions=32, query_timeout=0.2).aembed_query("q")
    assert time.monotonic() - started < 1.0  # a query gets one short attempt
    server.hang(False)


async def test_malformed_answers_are_errors(server: EmbeddingServer) -> None:
    embedder = make(server, dimensions=32)
    server.fail_next(400)
    with pytest.raises(EmbeddingError, match="HTTP 400"):
        await embedder.aembed_documents(["x"])


@pytest.mark.parametrize("indexes", [[0, 0, 2], [1, 2, 3], [0, 2, 5]])
async def test_vectors_whose_indexes_are_not_each_text_once_are_refused(
    indexes: list[int],
) -> None:
    async def answer(request: web.Request) -> web.Response:
        data = [{"index": i, "embedding": [float(i), 1.0, 0.0]} for i in indexes]
        return web.json_response({"data": data})

    app = web.Application()
    app.router.add_post("/v1/embeddings", answer)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        embedder = OpenAICompatibleEmbedder(str(server.make_url("/v1")), "m", dimensions=3)
        with pytest.raises(EmbeddingError, match="indexes are not 0 to 2"):
            await embedder.aembed_documents(["a", "b", "c"])
    finally:
        await server.close()


async def test_a_query_waits_no_longer_than_its_timeout_behind_spaced_batches(
    server: EmbeddingServer,
) -> None:
    embedder = make(server, dimensions=32, query_timeout=1.0)
    for _ in range(8):  # 429s answered: starts spaced out, and batches took the next ones
        embedder._pacer.slowed(None)
    assert embedder._pacer.delay >= 0.5
    for _ in range(6):
        embedder._pacer.reserve()
    started = time.monotonic()
    with pytest.raises(EmbeddingUnavailable, match="within 1 s"):
        await embedder.aembed_query("when does Lisbon deploy?")
    assert time.monotonic() - started < 2.0


async def _endpoint(app_answer: Any) -> TestServer:
    app = web.Application()
    app.router.add_post("/v1/embeddings", app_answer)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    return server


async def test_an_embedder_made_again_from_its_vectors_asks_for_their_length() -> None:
    sent: list[object] = []

    async def shortening(request: web.Request) -> web.Response:  # 32 unless asked for fewer
        body = await request.json()
        sent.append(body.get("dimensions"))
        length = body.get("dimensions") or 32
        data = [{"index": i, "embedding": [1.0] * length} for i in range(len(body["input"]))]
        return web.json_response({"data": data})

    server = await _endpoint(shortening)
    try:
        url = str(server.make_url("/v1"))
        made = OpenAICompatibleEmbedder(url, "m", dimensions=8)
        assert (await made.aembed_query("x")).shape == (8,)
        again = OpenAICompatibleEmbedder.from_fingerprint(made.fingerprint)
        assert again is not None and again.fingerprint == made.fingerprint
        assert (await again.aembed_query("x")).shape == (8,)  # not 32: "the model changed"
        named = OpenAICompatibleEmbedder(url, "m")  # the name alone, as openai:m@url
        assert named.learn_dim([made.fingerprint])
        assert (await named.aembed_documents(["y"])).shape == (1, 8)
        assert sent == [8, 8, 8]
    finally:
        await server.close()


async def test_a_length_sent_unasked_is_dropped_when_the_server_refuses_the_field() -> None:
    sent: list[object] = []

    async def strict(request: web.Request) -> web.Response:
        body = await request.json()
        sent.append(body.get("dimensions"))
        if "dimensions" in body:
            return web.json_response({"error": "unknown field: dimensions"}, status=400)
        data = [{"index": i, "embedding": [1.0] * 8} for i in range(len(body["input"]))]
        return web.json_response({"data": data})

    server = await _endpoint(strict)
    try:
        url = str(server.make_url("/v1"))
        again = OpenAICompatibleEmbedder.from_fingerprint(
            OpenAICompatibleEmbedder(url, "m", dimensions=8).fingerprint
        )
        assert again is not None
        assert (await again.aembed_documents(["a", "b"])).shape == (2, 8)
        assert (await again.aembed_query("c")).shape == (8,)
        assert sent == [8, None, None]
        given = OpenAICompatibleEmbedder(url, "m", dimensions=8)  # asked for: not dropped
        with pytest.raises(EmbeddingError, match="HTTP 400"):
            await given.aembed_documents(["a"])
    finally:
        await server.close()


async def test_long_inputs_are_cut_and_cut_again_when_refused() -> None:
    async with EmbeddingServer(dim=8, max_input_chars=100) as server:
        embedder = make(server, dimensions=8, max_input_tokens=200)
        long_text = "word " * 400
        matrix = await embedder.aembed_documents([long_text, "short"])
        assert matrix.shape == (2, 8)
        sent = server.inputs[-1]
        assert all(len(text) <= 100 for text in sent) and sent[1] == "short"
        assert 400 in server.statuses  # the first, longer cut was refused


def test_token_estimates_are_cautious() -> None:
    assert estimate_tokens("hello world") < 11
    assert estimate_tokens("你好世界") == 4
    assert truncate_to_tokens("short", 100) == "short"
    assert truncate_to_tokens("你好世界你好", 3) == "你好世"
    assert len(truncate_to_tokens("a" * 1000, 30)) == 100


async def test_concurrency_is_bounded() -> None:
    async with EmbeddingServer(dim=8, latency=0.1) as server:
        embedder = make(server, dimensions=8, batch_size=1, concurrency=2)
        started = time.monotonic()
        await embedder.aembed_documents(["a", "b", "c", "d"])
        elapsed = time.monotonic() - started
        assert 0.2 <= elapsed < 0.35  # two at a time: two rounds of 0.1 s


async def test_sync_methods_run_in_a_thread_without_a_loop(server: EmbeddingServer) -> None:
    embedder = make(server, dimensions=32)
    assert (await asyncio.to_thread(embedder.embed_query, "hello")).shape == (32,)
    assert (await asyncio.to_thread(embedder.embed_documents, ["a", "b"])).shape == (2, 32)


async def test_sync_methods_refuse_the_event_loop(server: EmbeddingServer) -> None:
    with pytest.raises(EmbeddingError, match="await aembed_documents"):
        make(server, dimensions=32).embed_documents(["a"])


def test_names_and_fingerprints_make_the_embedder_again() -> None:
    named = resolve_embedder("openai:nomic-embed-text:v1.5@http://localhost:11434/v1/")
    assert isinstance(named, OpenAICompatibleEmbedder)
    assert (named.model, named.base_url) == ("nomic-embed-text:v1.5", "http://localhost:11434/v1")
    for bad in ("openai:model", "openai:@http://x", "openai:m@ftp://x"):
        with pytest.raises(ConfigError, match="openai:MODEL@URL"):
            resolve_embedder(bad)
    prefixed = OpenAICompatibleEmbedder(
        "http://h/v1", "e5", dimensions=384, document_prefix="passage: ", query_prefix="query: "
    )
    again = embedder_for_fingerprint(prefixed.fingerprint)
    assert isinstance(again, OpenAICompatibleEmbedder)
    assert again.fingerprint == prefixed.fingerprint
    assert (again.document_prefix, again.query_prefix) == ("passage: ", "query: ")
    assert embedder_for_fingerprint("something-else") is None


def test_config_accepts_endpoint_names() -> None:
    from spade_memory.config import MemoryConfig

    config = MemoryConfig(in_memory=True, embedder="openai:m@http://127.0.0.1:1/v1")
    assert config.embedder == "openai:m@http://127.0.0.1:1/v1"
    with pytest.raises(ConfigError, match="openai:MODEL@URL"):
        MemoryConfig(in_memory=True, embedder="openai:nothing")
    with pytest.raises(ConfigError, match="openai:MODEL@URL"):
        MemoryConfig(in_memory=True, embedder="nano")


def test_pacer_slows_on_429_and_recovers() -> None:
    now = [100.0]
    pacer = RequestPacer(clock=lambda: now[0])
    assert pacer.reserve() == 0
    pacer.slowed(2.0)
    assert pacer.held_for() == 2.0 and pacer.reserve() == 2.0
    for _ in range(40):
        pacer.succeeded({}, 10)
    assert pacer.delay == 0.0
    now[0] += 5
    assert pacer.held_for() == 0
    pacer.succeeded({"x-ratelimit-remaining-tokens": "5", "x-ratelimit-reset-tokens": "1.5s"}, 10)
    assert pacer.held_for() == pytest.approx(1.5)


def test_a_long_retry_after_holds_the_starts_no_longer_than_the_cap() -> None:
    now = [100.0]
    pacer = RequestPacer(clock=lambda: now[0])
    pacer.slowed(3600.0)  # one 429 asking for an hour held every later batch for it
    assert pacer.held_for() == MAX_RETRY_AFTER_SECONDS
    pacer.slowed(-5.0)
    assert pacer.held_for() == MAX_RETRY_AFTER_SECONDS


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("20ms", 0.02), ("1s", 1.0), ("6m0s", 360.0), ("1h2m3.5s", 3723.5), ("7", 7.0)],
)
def test_rate_limit_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_rate_limit_durations_refuse_garbage() -> None:
    assert parse_duration("soon") is None and parse_duration("") is None


async def test_calls_share_one_session_kept_until_unused(
    server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = make(server, dimensions=32, batch_size=2)
    monkeypatch.setattr(embedder._sessions, "_idle_seconds", 0.2)
    opened: list[object] = []
    new_session = embedder._sessions._make

    def counted() -> Any:
        session = new_session()
        opened.append(session)
        return session

    monkeypatch.setattr(embedder._sessions, "_make", counted)
    _, second = await asyncio.gather(
        embedder.aembed_documents([f"first {i}" for i in range(6)]),
        embedder.aembed_documents([f"second {i}" for i in range(6)]),
    )
    expected = [hashed_vector(f"second {i}", 32) for i in range(6)]
    assert np.allclose(second, np.asarray(expected, dtype=np.float32), atol=1e-6)
    await embedder.aembed_documents(["later"])
    assert len(opened) == 1 and not opened[0].closed  # type: ignore[attr-defined]
    assert len(embedder._sessions) == 1  # kept for the next call
    await asyncio.sleep(0.6)
    assert opened[0].closed and len(embedder._sessions) == 0  # type: ignore[attr-defined]


def count_in_flight(server: EmbeddingServer) -> list[int]:
    """``[now, most]``: the requests the server is answering, and the most at once."""
    counts = [0, 0]
    answer = server._answer_embeddings

    async def counted(request: Any) -> Any:
        counts[0] += 1
        counts[1] = max(counts[1], counts[0])
        try:
            await asyncio.sleep(0.05)  # long enough for a second request to arrive
            return await answer(request)
        finally:
            counts[0] -= 1

    server._answer_embeddings = counted  # type: ignore[method-assign]
    return counts


async def test_two_requests_in_flight_keep_order_and_retry(server: EmbeddingServer) -> None:
    embedder = make(server, dimensions=32, batch_size=1)
    assert embedder.concurrency == 2
    counts = count_in_flight(server)
    server.fail_next(500)  # the first answer fails; its retry comes after the others
    texts = [f"text {i}" for i in range(6)]
    matrix = await embedder.aembed_documents(texts)
    assert counts[1] == 2
    expected = np.asarray([hashed_vector(text, 32) for text in texts], dtype=np.float32)
    assert np.allclose(matrix, expected, atol=1e-6)
    assert server.statuses.count(500) == 1 and server.statuses.count(200) == 6


async def test_one_request_in_flight_while_rate_limited(server: EmbeddingServer) -> None:
    embedder = make(server, dimensions=32, batch_size=1)
    embedder._pacer.slowed(None)  # as after an HTTP 429: starts spaced by 50 ms
    counts = count_in_flight(server)
    matrix = await embedder.aembed_documents([f"text {i}" for i in range(4)])
    assert matrix.shape == (4, 32)
    assert counts[1] == 1
    assert embedder._pacer.slowed_down  # four answers do not bring the pace back yet


def test_pacer_says_when_it_is_slowed_down() -> None:
    now = [0.0]
    pacer = RequestPacer(clock=lambda: now[0])
    assert not pacer.slowed_down
    pacer.slowed(2.0)
    assert pacer.slowed_down
    for _ in range(10):
        pacer.succeeded({}, 0)
    assert pacer.delay == 0.0 and pacer.slowed_down  # still held by Retry-After
    now[0] = 2.5
    assert not pacer.slowed_down


async def test_credentials_in_the_url_are_sent_as_a_header_and_shown_nowhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str | None] = []

    async def guarded(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        if request.headers.get("Authorization") != "Basic YWxpY2U6UzNjciV0":  # alice:S3cr%t
            return web.json_response({"error": "who are you?"}, status=503)
        texts = (await request.json())["input"]
        data = [{"index": i, "embedding": [1.0, 0.0]} for i in range(len(texts))]
        return web.json_response({"data": data})

    server = await _endpoint(guarded)
    try:
        host = str(server.make_url("/v1")).removeprefix("http://")
        embedder = OpenAICompatibleEmbedder(
            f"http://alice:S3cr%25t@{host}", "m", dimensions=2, max_retries=0
        )
        assert (await embedder.aembed_query("x")).shape == (2,)
        assert "S3cr" not in embedder.fingerprint + repr(embedder) + embedder.url
        wrong = OpenAICompatibleEmbedder(f"http://alice:wrong@{host}", "m", dimensions=2)
        with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingError) as failed:
            await OpenAICompatibleEmbedder(
                f"http://alice:wrong@{host}", "m", dimensions=2, max_retries=1, backoff=0
            ).aembed_documents(["y"])
        assert "wrong" not in str(failed.value) and "wrong" not in caplog.text
        assert "wrong" not in wrong.fingerprint
    finally:
        await server.close()


def test_a_name_may_hold_credentials_in_its_url_and_errors_do_not_show_them() -> None:
    name = "openai:nomic-embed-text@http://proxy:s3cret@127.0.0.1:11434/v1"
    embedder = OpenAICompatibleEmbedder.from_name(name)
    assert (embedder.model, embedder.base_url) == ("nomic-embed-text", "http://127.0.0.1:11434/v1")
    assert MemoryConfig(in_memory=True, embedder=name).embedder == name
    for wrong in ("openai:@http://proxy:s3cret@host/v1", "openai:m@ftp://proxy:s3cret@host"):
        with pytest.raises(ConfigError) as refused:
            OpenAICompatibleEmbedder.from_name(wrong)
        assert "s3cret" not in str(refused.value)
        with pytest.raises(ConfigError) as refused:
            MemoryConfig(in_memory=True, embedder=wrong)
        assert "s3cret" not in str(refused.value)


def test_credentials_in_the_url_win_over_a_key_of_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-another-service")
    url = "http://proxy:s3cret@127.0.0.1:11434/v1"
    assert OpenAICompatibleEmbedder(url, "m")._api_key is None
    assert (
        OpenAICompatibleLLM(base_url=url, model="m")
        ._headers()["Authorization"]
        .startswith("Basic ")
    )
    with pytest.raises(ConfigError, match="give one"):
        OpenAICompatibleEmbedder(url, "m", api_key="sk-this")
    with pytest.raises(ConfigError, match="give one"):
        OpenAICompatibleLLM(base_url=url, model="m", api_key="sk-this")
