"""A local OpenAI-format ``/v1/embeddings`` server on 127.0.0.1, for tests and benchmarks.

It embeds by hashing words into ``dim`` slots (texts sharing words are similar), and
can be told to misbehave as real servers do: add latency to each request, answer
HTTP 429 for a while (with ``Retry-After``), answer 5xx, refuse long inputs, change
its vector length (a model swapped behind the same name)::

    async with EmbeddingServer(dim=64, latency=0.02) as server:
        embedder = OpenAICompatibleEmbedder(server.base_url, server.model)

or, in a process of its own (it prints its API root, then serves until stopped)::

    python -m spade_memory.testing.embedding_server --dim 384 --latency 0.02

A process of its own is told to misbehave, and asked what it answered, over HTTP:
``POST /control`` with ``{"rate_limit": seconds, "retry_after": "1"}`` or
``{"fail_next": [500, 503]}``, and ``GET /stats`` (requests and statuses).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from aiohttp import web

__all__ = ["EmbeddingServer"]

_WORD = re.compile(r"\w+", re.UNICODE)


def hashed_vector(text: str, dim: int) -> list[float]:
    """A unit vector of ``text``: each lower-cased word adds ±1 to one of ``dim`` slots."""
    vector = np.zeros(dim, dtype=np.float64)
    for word in _WORD.findall(text.lower()) or [""]:
        digest = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        vector[digest % dim] += 1.0 if (digest >> 63) & 1 else -1.0
    norm = float(np.linalg.norm(vector))
    if norm == 0:
        vector[0] = 1.0
        norm = 1.0
    values: list[float] = (vector / norm).tolist()
    return values


class EmbeddingServer:
    """An OpenAI-compatible embeddings server on loopback (an aiohttp application).

    Args:
        model: the only model it serves (another name gets HTTP 404).
        dim: the vector length it answers.
        latency: seconds each answer takes, the server's own work included.
        max_input_chars: an input longer than this gets HTTP 400 "input is too long".

    Attributes:
        requests: requests answered so far (each status counted).
        inputs: the inputs of each successful request, in order.
        statuses: the status of each request, in order.
    """

    def __init__(
        self,
        *,
        model: str = "local-embed",
        dim: int = 64,
        latency: float = 0.0,
        max_input_chars: int | None = None,
    ) -> None:
        self.model = model
        self.dim = dim
        self.latency = latency
        self.max_input_chars = max_input_chars
        self.requests = 0
        self.inputs: list[list[str]] = []
        self.statuses: list[int] = []
        self.bodies: list[dict[str, Any]] = []
        self._limited_until = 0.0
        self._retry_after: str | None = None
        self._failures: list[int] = []
        self._hang = False
        self._runner: web.AppRunner | None = None
        self._port = 0

    @property
    def base_url(self) -> str:
        """The API root, ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def port(self) -> int:
        return self._port

    async def start(self, port: int = 0) -> EmbeddingServer:
        """Listen on 127.0.0.1 (``port`` 0: a free one)."""
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/control", self._control)
        app.router.add_get("/stats", self._stats)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def aclose(self) -> None:
        """Stop listening (a request then finds the connection refused)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> EmbeddingServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def rate_limit(self, seconds: float, *, retry_after: str | None = "1") -> None:
        """Answer HTTP 429 (with ``Retry-After: retry_after``) for the next ``seconds``."""
        self._limited_until = time.monotonic() + seconds
        self._retry_after = retry_after

    def fail_next(self, *statuses: int) -> None:
        """Answer the next requests with these HTTP statuses, one each."""
        self._failures.extend(statuses)

    def hang(self, on: bool = True) -> None:
        """Accept requests and never answer them (until turned off)."""
        self._hang = on

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        arrived = time.monotonic()
        try:
            return await self._answer_embeddings(request)
        finally:
            # the answer leaves ``latency`` seconds after the request came, its own work
            # included (at least that long)
            left = self.latency - (time.monotonic() - arrived)
            if left > 0:
                await asyncio.sleep(left)

    async def _answer_embeddings(self, request: web.Request) -> web.StreamResponse:
        while self._hang:
            await asyncio.sleep(0.05)
        if self._failures:
            status = self._failures.pop(0)
            return self._answer({"error": {"message": f"scripted failure {status}"}}, status)
        if time.monotonic() < self._limited_until:
            headers = {"Retry-After": self._retry_after} if self._retry_after else None
            return self._answer({"error": {"message": "rate limited"}}, 429, headers)
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return self._answer({"error": {"message": "body is not JSON"}}, 400)
        self.bodies.append(body)
        if body.get("model") != self.model:
            return self._answer(
                {"error": {"message": f"model {body.get('model')!r} not found"}}, 404
            )
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
            return self._answer({"error": {"message": "input must be text"}}, 400)
        if self.max_input_chars is not None and any(
            len(text) > self.max_input_chars for text in texts
        ):
            return self._answer({"error": {"message": "input is too long for the model"}}, 400)
        self.inputs.append(list(texts))
        data = [
            {"object": "embedding", "index": index, "embedding": hashed_vector(text, self.dim)}
            for index, text in enumerate(texts)
        ]
        usage = {"prompt_tokens": sum(len(text.split()) for text in texts)}
        return self._answer(
            {"object": "list", "model": self.model, "data": data[::-1], "usage": usage}, 200
        )

    async def _control(self, request: web.Request) -> web.StreamResponse:
        order = await request.json()
        if "rate_limit" in order:
            self.rate_limit(float(order["rate_limit"]), retry_after=order.get("retry_after", "1"))
        if "fail_next" in order:
            self.fail_next(*[int(status) for status in order["fail_next"]])
        return web.json_response({"ok": True})

    async def _stats(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"requests": self.requests, "statuses": self.statuses})

    def _answer(
        self, payload: Any, status: int, headers: dict[str, str] | None = None
    ) -> web.Response:
        self.statuses.append(status)
        return web.json_response(payload, status=status, headers=headers)


async def _serve(args: argparse.Namespace) -> None:
    server = EmbeddingServer(model=args.model, dim=args.dim, latency=args.latency)
    await server.start(args.port)
    sys.stdout.write(server.base_url + "\n")
    sys.stdout.flush()
    try:
        await asyncio.Event().wait()
    finally:
        await server.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    """Serve on 127.0.0.1 until stopped (``python -m spade_memory.testing.embedding_server``)."""
    parser = argparse.ArgumentParser(description="a local OpenAI-format embeddings server")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--model", default="local-embed")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
