"""A local OpenAI-format ``/v1/embeddings`` server on 127.0.0.1, for tests and benchmarks.

It embeds by hashing words into ``dim`` slots (texts sharing words are similar), and
can be told to misbehave as real servers do: add latency to each request, answer
HTTP 429 for a while (with ``Retry-After``), answer 5xx, refuse long inputs, change
its vector length (a model swapped behind the same name)::

    async with EmbeddingServer(dim=64, latency=0.02) as server:
        embedder = OpenAICompatibleEmbedder(server.base_url, server.model)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
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
    return [float(value) for value in vector / norm]


class EmbeddingServer:
    """An OpenAI-compatible embeddings server on loopback (an aiohttp application).

    Args:
        model: the only model it serves (another name gets HTTP 404).
        dim: the vector length it answers.
        latency: seconds added to every request.
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
        if self.latency:
            await asyncio.sleep(self.latency)
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

    def _answer(
        self, payload: Any, status: int, headers: dict[str, str] | None = None
    ) -> web.Response:
        self.statuses.append(status)
        return web.json_response(payload, status=status, headers=headers)
