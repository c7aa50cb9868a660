"""An embedder over any OpenAI-compatible ``/embeddings`` endpoint, through aiohttp.

Works with OpenAI, Ollama (``http://localhost:11434/v1``), vLLM, LM Studio, the
llama.cpp server and text-embeddings-inference. Texts go in batches (8 by default),
at most ``concurrency`` requests at a time (2 by default: the next request is on its
way while an answer is read, parsed and written; one at a time while the server
rate-limits), spaced by a delay that adapts to HTTP 429 and to the tokens-per-minute
budget a server reports (:mod:`.pacing`). A failed
request is retried (5 times by default, exponential backoff, the server's
``Retry-After`` honoured); when every attempt fails,
:class:`~spade_memory.errors.EmbeddingUnavailable` says so and the memory embeds
those texts later. Each text is cut to ``max_input_tokens`` (estimated) before it is
sent; the memory keeps its full text.

Its fingerprint names the model, the vector length and the endpoint, so a change of
any of them re-embeds the memory. A server that answers vectors of another length
than the memory's raises :class:`~spade_memory.errors.EmbeddingError`: vectors of two
lengths are never mixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import weakref
from collections.abc import AsyncIterator, Collection, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from ..endpoint_urls import endpoint_parts, split_credentials, without_credentials
from ..errors import ConfigError, EmbeddingError, EmbeddingUnavailable
from ..http_sessions import LoopSessions
from ..llm.retry_after import MAX_RETRY_AFTER_SECONDS, parse_retry_after
from .pacing import RequestPacer
from .vectors import normalise_rows

if TYPE_CHECKING:  # imported on the first request: naming an endpoint loads no HTTP client
    import aiohttp

__all__ = [
    "FINGERPRINT_PREFIX",
    "NAME_PREFIX",
    "OpenAICompatibleEmbedder",
    "estimate_tokens",
    "truncate_to_tokens",
]

logger = logging.getLogger(__name__)

#: How the fingerprints of these embedders start.
FINGERPRINT_PREFIX = "openai-compatible:"
#: How a configured embedder name for an endpoint starts: ``openai:MODEL@URL``.
NAME_PREFIX = "openai:"

_T = TypeVar("_T")
_EXCERPT = 200
_LENGTH_WORDS = ("too long", "context length", "maximum", "exceed", "too many tokens", "too large")
_MAX_SHRINKS = 4
_HINTS = {
    401: "check the API key (api_key, or $OPENAI_API_KEY)",
    403: "check the API key and its permissions",
    404: "check base_url (it usually ends in /v1) and that the server has the model "
    "(Ollama: ollama pull MODEL)",
}


def _char_cost(char: str) -> int:
    """Tenths of a token one character is counted as."""
    code = ord(char)
    if code < 0x80:
        return 3  # English runs near 4 characters per token; count a little more
    if code >= 0x2E80:
        return 10  # CJK, kana, hangul: about one token each
    return 5


def estimate_tokens(text: str) -> float:
    """A cautious estimate of the tokens a text takes (more rather than fewer)."""
    return sum(_char_cost(char) for char in text) / 10


def truncate_to_tokens(text: str, tokens: float) -> str:
    """``text`` cut where its :func:`estimate_tokens` would pass ``tokens``."""
    if len(text) <= tokens:
        return text
    budget = int(tokens * 10)
    spent = 0
    for position, char in enumerate(text):
        spent += _char_cost(char)
        if spent > budget:
            return text[:position]
    return text


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return (flat[:_EXCERPT] + "...") if len(flat) > _EXCERPT else (flat or "(empty body)")


class _Retry(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class _TooLong(Exception):
    pass


class _DimensionsRefused(Exception):
    """The server refused the ``dimensions`` field this embedder sent unasked."""


class _Gate:
    """Bounds the requests in flight from one event loop: ``concurrency`` of them, or
    one at a time while the server rate-limits (from the next start on)."""

    def __init__(self, concurrency: int, pacer: RequestPacer) -> None:
        self._slots = asyncio.Semaphore(concurrency)
        self._alone = asyncio.Lock()
        self._pacer = pacer

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Hold a place among the requests in flight."""
        async with self._slots:
            if self._pacer.slowed_down:
                async with self._alone:
                    yield
            else:
                yield


class OpenAICompatibleEmbedder:
    """An :class:`~spade_memory.models.AsyncEmbedder` over ``{base_url}/embeddings``.

    Pass it as ``MemoryConfig(embedder=...)``, or name it ``"openai:MODEL@URL"``
    (``"openai:nomic-embed-text@http://localhost:11434/v1"``). One object may serve
    many agents. Calls that overlap share one HTTP session (its connections kept
    alive from one request to the next); none is held once no call is running.

    Args:
        base_url: the API root, e.g. ``"http://localhost:11434/v1"``.
        model: the embedding model the server knows.
        api_key: the bearer token; defaults to ``$OPENAI_API_KEY``; none is sent
            without one.
        dimensions: the vector length. Sent to the server as ``dimensions`` (models
            that can shorten their vectors do so) and checked on every answer.
            Without it the length is learnt from the vectors a memory already holds
            of this model and endpoint, or by asking the server once when a memory
            opens (which then needs the server to answer).
        batch_size: texts per request.
        concurrency: requests in flight at once. The default, 2, keeps the next
            request on its way while an answer is read, parsed and stored, so a
            server that serves one request at a time never waits for the client (and
            one that serves several answers up to twice as fast); while the server
            answers 429 or reports its token budget spent, one request at a time.
            Pass 1 for a server that must never see two requests at once.
        max_retries: further attempts after a failed request (429, 5xx, timeout,
            refused connection).
        backoff: the first retry waits about this many seconds; each next one
            twice as long, unless the server said how long (``Retry-After``, up to
            30 s).
        timeout: seconds allowed for one request of documents.
        query_timeout: seconds allowed to embed a search query (one attempt: a
            search that cannot wait falls back to keywords).
        max_input_tokens: texts are cut to about this many tokens before they are
            sent (the model's input limit); a server that still finds one too long
            gets it cut further.
        document_prefix: put before every stored text (e5 models want ``"passage: "``).
        query_prefix: put before every query (e5 models want ``"query: "``).
        send_dimensions: send ``dimensions`` in requests (turn off for servers that
            refuse the field but still check the length).
        extra_headers: more HTTP headers for every request.

    Raises:
        ConfigError: an argument is out of range.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        dimensions: int | None = None,
        *,
        batch_size: int = 8,
        concurrency: int = 2,
        max_retries: int = 5,
        backoff: float = 0.5,
        timeout: float = 30.0,
        query_timeout: float = 5.0,
        max_input_tokens: int = 512,
        document_prefix: str = "",
        query_prefix: str = "",
        send_dimensions: bool = True,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                "base_url must be an http(s) URL such as http://localhost:11434/v1, "
                f"got {base_url!r}"
            )
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("model must be a non-empty model name")
        if dimensions is not None and (
            not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1
        ):
            raise ConfigError(f"dimensions must be a positive integer, got {dimensions!r}")
        for name, value in (("batch_size", batch_size), ("concurrency", concurrency)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if not isinstance(max_input_tokens, int) or max_input_tokens < 8:
            raise ConfigError(f"max_input_tokens must be an integer >= 8, got {max_input_tokens!r}")
        for name, seconds in (("backoff", backoff), ("timeout", timeout)):
            if not seconds >= 0:
                raise ConfigError(f"{name} must be >= 0 seconds, got {seconds!r}")
        if not timeout > 0 or not query_timeout > 0:
            raise ConfigError("timeout and query_timeout must be > 0 seconds")
        # user:password in the URL go as a header: the URL is shown in errors and logs,
        # and kept in the fingerprint of the vectors
        self.base_url, self._basic_auth = split_credentials(base_url.rstrip("/"))
        self.url = f"{self.base_url}/embeddings"
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.timeout = float(timeout)
        self.query_timeout = float(query_timeout)
        self.max_input_tokens = max_input_tokens
        self.document_prefix = document_prefix
        self.query_prefix = query_prefix
        self.send_dimensions = send_dimensions
        if self._basic_auth is not None and api_key:
            raise ConfigError("base_url holds user:password and api_key is given too: give one")
        # credentials written in the URL win over a key of the environment
        from_environment = None if self._basic_auth else os.environ.get("OPENAI_API_KEY")
        key = api_key if api_key is not None else from_environment
        self._api_key = key or None
        self._extra_headers = dict(extra_headers or {})
        self._dim: int | None = dimensions
        # dimensions taken from stored vectors, not given: sent so that a model that
        # shortened them shortens them again, dropped if the server refuses the field
        self._dimensions_guessed = False
        self._token_cap = float(max_input_tokens)
        self._pacer = RequestPacer()
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Gate] = (
            weakref.WeakKeyDictionary()
        )
        self._sessions = LoopSessions(self._session)

    @classmethod
    def from_name(cls, name: str, **options: Any) -> OpenAICompatibleEmbedder:
        """The embedder a name ``"openai:MODEL@URL"`` stands for.

        Raises:
            ConfigError: the name is not of that form.
        """
        parts = endpoint_parts(name)
        if parts is None:
            raise ConfigError(
                f"an endpoint embedder is named openai:MODEL@URL, such as "
                f"openai:nomic-embed-text@http://localhost:11434/v1; "
                f"got {without_credentials(name)!r}"
            )
        model, url = parts
        return cls(url, model, **options)

    @classmethod
    def from_fingerprint(cls, fingerprint: str) -> OpenAICompatibleEmbedder | None:
        """The embedder that made vectors of ``fingerprint`` (its key from the
        environment), or ``None`` when the fingerprint is not one of these."""
        if not fingerprint.startswith(FINGERPRINT_PREFIX):
            return None
        head, at, url = fingerprint[len(FINGERPRINT_PREFIX) :].rpartition("@")
        model, marker, dim_text = head.rpartition(":dim=")
        if not at or not marker or not dim_text.isdigit() or not model:
            return None
        url, _, prefixes = url.partition("#")
        options: dict[str, Any] = {}
        if prefixes:
            try:
                document_prefix, query_prefix = json.loads(prefixes)
            except (ValueError, TypeError):
                return None
            options.update(document_prefix=document_prefix, query_prefix=query_prefix)
        try:
            embedder = cls(url, model, dimensions=int(dim_text), **options)
        except ConfigError:
            return None
        embedder._dimensions_guessed = True
        return embedder

    def __repr__(self) -> str:
        return (
            f"OpenAICompatibleEmbedder(base_url={self.base_url!r}, model={self.model!r}, "
            f"dim={self._dim})"
        )

    # -- what the memory reads -------------------------------------------------

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise EmbeddingError(
                f"the vector length of {self.model} at {self.base_url} is not known yet: "
                "open a memory with it (which asks the server), or pass dimensions=N"
            )
        return self._dim

    @property
    def fingerprint(self) -> str:
        text = f"{FINGERPRINT_PREFIX}{self.model}:dim={self.dim}@{self.base_url}"
        if self.document_prefix or self.query_prefix:
            text += "#" + json.dumps([self.document_prefix, self.query_prefix])
        return text

    async def prepare(self, stored_fingerprints: Collection[str]) -> None:
        """Learn the vector length: given, read from a stored fingerprint of this model
        and endpoint, or asked of the server with one short text.

        Raises:
            EmbeddingError: nothing is stored of this model and the server did not
                answer (the message says to pass ``dimensions``).
        """
        if self.learn_dim(stored_fingerprints):
            return
        try:
            await self.ask_dim()
        except EmbeddingError as exc:
            raise EmbeddingError(
                f"{exc}; start the server, or pass dimensions=N (the model's vector "
                "length) so that a memory opens while the server is down"
            ) from None

    def learn_dim(self, stored_fingerprints: Collection[str]) -> bool:
        """Learn the vector length without asking the server: given as ``dimensions``,
        or read from a stored fingerprint of this model, endpoint and prefixes.
        Returns whether it is known."""
        if self._dim is not None:
            return True
        for fingerprint in stored_fingerprints:
            other = OpenAICompatibleEmbedder.from_fingerprint(fingerprint)
            if (
                other is not None
                and other.model == self.model
                and other.base_url == self.base_url
                and (other.document_prefix, other.query_prefix)
                == (self.document_prefix, self.query_prefix)
            ):
                self._dim = self.dimensions = other._dim
                self._dimensions_guessed = True
                return True
        return False

    async def ask_dim(self) -> int:
        """Ask the server for the vector length (one short text to embed) and keep it.

        Raises:
            EmbeddingError: the server did not answer or answered something unusable
                (the message names the model and the server, and says why).
        """
        try:
            async with self._sessions.connection() as session:
                probe = await self._post(
                    session, ["dimension probe"], attempts=2, timeout=self.timeout
                )
        except EmbeddingError as exc:
            raise EmbeddingError(
                f"cannot learn the vector length of {self.model} at {self.base_url} ({exc})"
            ) from None
        self._dim = int(probe.shape[1])
        return self._dim

    # -- embedding -------------------------------------------------------------

    async def aembed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Embed stored texts, in batches, retrying each as configured.

        Raises:
            EmbeddingUnavailable: a batch failed on every attempt.
            EmbeddingError: the server answered something unusable.
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        gate = self._gate()
        prefixed = [self.document_prefix + text for text in texts]
        batches = [
            prefixed[start : start + self.batch_size]
            for start in range(0, len(prefixed), self.batch_size)
        ]
        async with self._sessions.connection() as session:

            async def one(batch: list[str]) -> NDArray[np.float32]:
                return await self._post(
                    session, batch, attempts=self.max_retries + 1, timeout=self.timeout, gate=gate
                )

            if len(batches) == 1:
                return await one(batches[0])
            tasks = [asyncio.ensure_future(one(batch)) for batch in batches]
            try:
                parts = await asyncio.gather(*tasks)
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
        return np.concatenate(parts, axis=0)

    async def aembed_query(self, text: str) -> NDArray[np.float32]:
        """Embed a search query with one attempt of ``query_timeout`` seconds.

        Raises:
            EmbeddingUnavailable: no answer in time (the search uses keywords).
            EmbeddingError: the server answered something unusable.
        """
        held = self._pacer.held_for()
        if held > self.query_timeout:
            raise EmbeddingUnavailable(f"{self.base_url} asked to wait {held:.1f} s (rate limited)")
        try:
            # the whole call, with its turn behind the document batches' spaced starts
            async with asyncio.timeout(self.query_timeout):
                async with self._sessions.connection() as session:
                    matrix = await self._post(
                        session, [self.query_prefix + text], attempts=1, timeout=self.query_timeout
                    )
        except TimeoutError:
            raise EmbeddingUnavailable(
                f"{self.base_url} did not embed the query within {self.query_timeout:g} s"
            ) from None
        return matrix.reshape(-1)

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """:meth:`aembed_documents` for threads without an event loop."""
        return _run(self.aembed_documents(texts), "aembed_documents")

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """:meth:`aembed_query` for threads without an event loop."""
        return _run(self.aembed_query(text), "aembed_query")

    # -- HTTP --------------------------------------------------------------------

    def _gate(self) -> _Gate:
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = _Gate(self.concurrency, self._pacer)
        return gate

    def _session(self) -> aiohttp.ClientSession:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(self._extra_headers)
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        elif self._basic_auth is not None:
            headers.setdefault("Authorization", self._basic_auth)
        import aiohttp

        return aiohttp.ClientSession(headers=headers)

    def _body(self, texts: Sequence[str]) -> bytes:
        cut = [truncate_to_tokens(text, self._token_cap) for text in texts]
        payload: dict[str, Any] = {"model": self.model, "input": cut}
        if self.dimensions is not None and self.send_dimensions:
            payload["dimensions"] = self.dimensions
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")

    async def _post(
        self,
        session: aiohttp.ClientSession,
        texts: Sequence[str],
        *,
        attempts: int,
        timeout: float,
        gate: _Gate | None = None,
    ) -> NDArray[np.float32]:
        """Post ``texts``, retrying as configured; ``gate`` bounds the requests in flight
        (held while a request is sent and its answer read, not while it is parsed)."""
        reason = "no attempt made"
        made = shrinks = 0
        while made < attempts:
            wait = self._pacer.reserve()
            if wait > 0:
                await asyncio.sleep(wait)
            made += 1
            try:
                return await self._attempt(session, texts, timeout, gate)
            except _DimensionsRefused:
                made -= 1  # sent again at once, without the field (once: it stays off)
                self.send_dimensions = False
                logger.info("%s refuses the dimensions field; not sending it", self.url)
                continue
            except _TooLong:
                if shrinks >= _MAX_SHRINKS:
                    raise EmbeddingError(
                        f"{self.url} refused the texts as too long even cut to about "
                        f"{self._token_cap:.0f} tokens; lower max_input_tokens"
                    ) from None
                shrinks += 1
                made -= 1  # not the server's failure: send the shorter texts at once
                self._token_cap = max(self._token_cap / 2, 8.0)
                logger.warning(
                    "%s refused a text as too long; cutting texts to about %.0f tokens",
                    self.url,
                    self._token_cap,
                )
                continue
            except _Retry as failure:
                reason = failure.reason
                if made >= attempts:
                    break
                if failure.retry_after is not None:  # the server knows best
                    delay = min(failure.retry_after, MAX_RETRY_AFTER_SECONDS)
                else:
                    delay = self.backoff * 2.0 ** (made - 1) * (0.5 + random.random() / 2)
                logger.info(
                    "embedding request to %s failed (%s); retry %d/%d in %.2f s",
                    self.url,
                    reason,
                    made,
                    attempts - 1,
                    delay,
                )
                await asyncio.sleep(delay)
        raise EmbeddingUnavailable(
            f"embedding request to {self.url} failed after {made} attempt(s): {reason}"
        )

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        texts: Sequence[str],
        timeout: float,
        gate: _Gate | None,
    ) -> NDArray[np.float32]:
        import aiohttp

        body = self._body(texts)
        try:
            async with contextlib.AsyncExitStack() as held:
                if gate is not None:
                    await held.enter_async_context(gate.held())
                async with session.post(
                    self.url, data=body, timeout=aiohttp.ClientTimeout(total=timeout)
                ) as response:
                    status = response.status
                    text = await response.text(errors="replace")
                    headers = {key.lower(): value for key, value in response.headers.items()}
        except TimeoutError:
            raise _Retry(f"no answer within {timeout:g} s") from None
        except aiohttp.ClientError as exc:
            raise _Retry(f"{type(exc).__name__}: {exc}") from None
        retry_after = parse_retry_after(headers.get("retry-after"))
        if status == 429:
            self._pacer.slowed(retry_after)
            raise _Retry("HTTP 429 (rate limited)", retry_after)
        if status >= 500 or status == 408:
            raise _Retry(f"HTTP {status}: {_excerpt(text)}", retry_after)
        if status in _HINTS:
            raise EmbeddingUnavailable(
                f"{self.url} answered HTTP {status}: {_excerpt(text)}; {_HINTS[status]}"
            )
        if (
            status in (400, 422)
            and self._dimensions_guessed
            and self.send_dimensions
            and "dimension" in text.lower()
        ):
            raise _DimensionsRefused
        if status in (400, 413) and any(word in text.lower() for word in _LENGTH_WORDS):
            raise _TooLong()
        if status != 200:
            raise EmbeddingError(f"{self.url} answered HTTP {status}: {_excerpt(text)}")
        matrix = self._vectors(text, len(texts))
        # the next request's tokens, guessed from this one's (counted only when needed)
        needed = (
            int(estimate_tokens("".join(texts))) + 1
            if "x-ratelimit-remaining-tokens" in headers
            else 0
        )
        self._pacer.succeeded(headers, needed)
        return matrix

    def _vectors(self, body: str, count: int) -> NDArray[np.float32]:
        """The vectors of an ``/embeddings`` answer, in input order, checked and normalised."""
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            raise EmbeddingError(
                f"{self.url} did not answer JSON: {_excerpt(body)}; is base_url an "
                "OpenAI-compatible API root?"
            ) from None
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list) or len(items) != count:
            got = len(items) if isinstance(items, list) else "no"
            raise EmbeddingError(
                f"{self.url} answered {got} vectors for {count} texts: {_excerpt(body)}"
            )
        if all(isinstance(item, dict) and isinstance(item.get("index"), int) for item in items):
            if sorted(int(item["index"]) for item in items) != list(range(count)):
                raise EmbeddingError(
                    f"{self.url} answered vectors whose indexes are not 0 to {count - 1}: "
                    f"{_excerpt(body)}"
                )
            items = sorted(items, key=lambda item: int(item["index"]))
        rows: list[Any] = []
        for item in items:
            vector = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(vector, list) or not vector:
                raise EmbeddingError(f"{self.url} answered an item without an embedding list")
            rows.append(vector)
        lengths = {len(row) for row in rows}
        if len(lengths) != 1:
            raise EmbeddingError(
                f"{self.url} answered vectors of several lengths {sorted(lengths)}"
            )
        length = lengths.pop()
        if self._dim is not None and length != self._dim:
            raise EmbeddingError(
                f"{self.model} at {self.base_url} answered {length}-dimensional vectors, but "
                f"this memory's vectors have {self._dim}: the model behind that name changed. "
                "Give the new length (dimensions=...) to re-embed the memory with it, or "
                "serve the old model again; no vector of the wrong length was kept"
            )
        if self._dim is None:
            self._dim = length  # learnt from the first answer
        try:
            matrix = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError):
            raise EmbeddingError(f"{self.url} answered vectors that are not numbers") from None
        if not np.all(np.isfinite(matrix)):
            raise EmbeddingError(f"{self.url} answered vectors holding NaN or infinity")
        return normalise_rows(matrix)


def _run(coroutine: Coroutine[Any, Any, _T], instead: str) -> _T:
    """Run ``coroutine`` to the end in this thread, which must have no running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise EmbeddingError(
        f"called from a running event loop: await {instead}() instead, or call this "
        "from a worker thread"
    )
