"""A client for any OpenAI-compatible ``/chat/completions`` endpoint, over aiohttp.

Works with OpenAI, Ollama (``http://localhost:11434/v1``), vLLM, LM Studio and the
llama.cpp server. Transient failures (HTTP 429, 5xx, connection errors, timeouts, a
body that stops coming, a stream cut in the middle) are retried with exponential
backoff and jitter, within one overall deadline per request; other client errors
are not retried, nor is an answer without ``choices``.
:meth:`OpenAICompatibleLLM.check` asks the server once, up front, whether it is
there and serves the model.

Answers may stream (``stream=True``, or whenever a server answers with an event
stream: :mod:`.streaming`); tool calls a model writes in its text are turned into
real ones (:mod:`.text_tool_calls`); :meth:`OpenAICompatibleLLM.complete_json`
asks for JSON that follows a schema (:mod:`.json_output`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import aiohttp

from ..endpoint_urls import split_credentials
from ..errors import ConfigError, LLMError
from ..http_sessions import LoopSessions
from .json_output import json_in_text, schema_problems
from .messages import ChatMessage, LLMResponse, ToolCall
from .retry_after import MAX_RETRY_AFTER_SECONDS, parse_retry_after
from .streaming import (
    IncompleteStream,
    StreamAssembler,
    lines_of,
    looks_like_event_stream,
    read_events,
)
from .text_tool_calls import tool_calls_in_text

_retry_after = parse_retry_after

__all__ = ["OpenAICompatibleLLM", "parse_chat_completion"]

logger = logging.getLogger(__name__)

#: How much of an error body is quoted in an :class:`LLMError`.
BODY_EXCERPT_CHARS = 300

_HINTS = {
    401: " Check the API key (argument api_key or $OPENAI_API_KEY).",
    403: " Check the API key and its permissions.",
    404: " Check base_url (it usually ends in /v1) and the model name.",
}


_STREAM_REQUIRED = ("stream", "must", "only", "required", "true")
_FORMAT_WORDS = ("response_format", "json_schema", "json schema", "structured output")


class _Retryable(Exception):
    """A failed attempt worth repeating, with the wait the server asked for."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class _StreamOnly(Exception):
    """The server answers only streamed requests: the same request goes again, streamed
    (``stream`` is set once, so this happens at most once per client)."""


class _Refused(LLMError):
    """The server refused the request (HTTP 4xx); ``text`` is its answer."""

    def __init__(self, message: str, status: int, text: str) -> None:
        super().__init__(message)
        self.status = status
        self.text = text


class OpenAICompatibleLLM:
    """An :class:`~spade_memory.llm.messages.LLMClient` for OpenAI-compatible servers.

    Requests of one event loop share an HTTP session whose connection is kept from
    one request to the next (a tool loop's requests pay one handshake, not one
    each); it is closed after 30 s unused, when its loop ends, or on :meth:`aclose`
    (:mod:`spade_memory.http_sessions`), so one client serves one ``asyncio.run``
    after another (or several threads' loops). After :meth:`aclose` (or the end of
    ``async with``) the client refuses further requests.

    Args:
        base_url: the API root, e.g. ``"http://localhost:11434/v1"``; requests go to
            ``{base_url}/chat/completions``.
        model: the model name the server knows.
        api_key: the bearer token; defaults to ``$OPENAI_API_KEY``; without one no
            ``Authorization`` header is sent (Ollama needs none).
        timeout: seconds allowed for each HTTP attempt.
        deadline: seconds allowed for one request, every attempt and wait between
            them included: an attempt gets at most what is left of it, and no retry
            starts once it has passed (a hung server holds a caller this long, not
            ``timeout`` times the attempts).
        max_retries: further attempts after a transient failure.
        backoff: the first retry waits about this many seconds; each next one twice as long.
        temperature: sampling temperature, sent only when given.
        max_tokens: answer length cap, sent only when given.
        extra_headers: more HTTP headers for every request.
        stream: ask for a streamed answer (``"stream": true``), for servers that
            only stream. An answer that comes as an event stream is read as one
            either way, and a server that refuses a request for not streaming gets
            streamed requests from then on.
        text_tool_calls: when a model offered tools answers with a tool call
            written in its text (``<tool_call>`` tags, a fenced JSON block, a bare
            JSON object, ``<function=name>``), return it as a real tool call.

    Raises:
        ConfigError: an argument is out of range.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        deadline: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_headers: Mapping[str, str] | None = None,
        stream: bool = False,
        text_tool_calls: bool = True,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"base_url must be an http(s) URL such as http://localhost:11434/v1, "
                f"got {base_url!r}"
            )
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("model must be a non-empty model name")
        if not timeout > 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout!r}")
        if not deadline > 0:
            raise ConfigError(f"deadline must be > 0 seconds, got {deadline!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if not backoff >= 0:
            raise ConfigError(f"backoff must be >= 0 seconds, got {backoff!r}")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise ConfigError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        # user:password in the URL go as a header: the URL is shown in errors and logs
        self.base_url, self._basic_auth = split_credentials(base_url.rstrip("/"))
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.timeout = float(timeout)
        self.deadline = float(deadline)
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.temperature = temperature
        self.max_tokens = max_tokens
        if self._basic_auth is not None and api_key:
            raise ConfigError("base_url holds user:password and api_key is given too: give one")
        # credentials written in the URL win over a key of the environment
        from_environment = None if self._basic_auth else os.environ.get("OPENAI_API_KEY")
        key = api_key if api_key is not None else from_environment
        self._api_key = key or None
        self._extra_headers = dict(extra_headers or {})
        self.stream = bool(stream)
        self.text_tool_calls = bool(text_tool_calls)
        self._sessions = LoopSessions(aiohttp.ClientSession)
        self._closed = False

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"OpenAICompatibleLLM(base_url={self.base_url!r}, model={self.model!r}, key={key})"

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._closed

    async def __aenter__(self) -> OpenAICompatibleLLM:
        self._check_open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Refuse further requests (:class:`LLMError`); those under way finish. The
        connection kept for the next request is closed (the last request under way
        closes it as it ends)."""
        self._closed = True
        await self._sessions.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise LLMError("client is closed; create a new OpenAICompatibleLLM to send requests")

    def _headers(self) -> dict[str, str]:
        accept = "text/event-stream" if self.stream else "application/json"
        headers = {"Content-Type": "application/json", "Accept": accept}
        headers.update(self._extra_headers)
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        elif self._basic_auth is not None:
            headers.setdefault("Authorization", self._basic_auth)
        return headers

    def _payload(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[Mapping[str, Any]],
        response_format: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [message.to_openai() for message in messages],
        }
        if self.stream:
            payload["stream"] = True
        if response_format is not None:
            payload["response_format"] = dict(response_format)
        if tools:
            payload["tools"] = [dict(tool) for tool in tools]
            payload["tool_choice"] = "auto"
        if self.temperature is not None:
            payload["temperature"] = self.temperature
        if self.max_tokens is not None:
            payload["max_tokens"] = self.max_tokens
        return payload

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        """Send one chat completion request and parse the first choice.

        Args:
            messages: the conversation so far.
            tools: OpenAI function schemas the model may call (``tool_choice="auto"``).

        Returns:
            The answer text and/or tool calls.

        Raises:
            LLMError: the client is closed, the server refused the request, every
                attempt failed, or the answer was malformed.
        """
        self._check_open()
        response = await self._send(lambda: self._payload(messages, tools))
        if self.text_tool_calls and tools and not response.tool_calls:
            calls, rest = tool_calls_in_text(response.text, tools)
            if calls:
                logger.debug("%d tool call(s) read from the answer text", len(calls))
                return LLMResponse(
                    text=rest, tool_calls=calls, finish_reason="tool_calls", usage=response.usage
                )
        return response

    async def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema: Mapping[str, Any],
        *,
        name: str = "answer",
    ) -> Any:
        """Ask for a JSON value that follows ``schema`` (structured output).

        Sends ``response_format: {"type": "json_schema", ...}``. A server that refuses
        the field is asked again without it, the schema given in the prompt instead;
        the JSON is then read from the answer text (the whole text, a fenced block or
        the first object). An answer that breaks the schema is sent back once with
        what was wrong, for the model to correct.

        Returns:
            The JSON value, checked against ``schema``.

        Raises:
            LLMError: every attempt failed, or the answer held no JSON that follows
                the schema (the message names what was wrong).
        """
        self._check_open()
        response_format: dict[str, Any] | None = {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": dict(schema), "strict": True},
        }
        conversation = list(messages)
        try:
            response = await self._send(lambda: self._payload(conversation, (), response_format))
        except _Refused as refused:
            if not any(word in refused.text.lower() for word in _FORMAT_WORDS):
                raise
            logger.info("%s refused response_format; asking for JSON in the text", self.url)
            response_format = None
            conversation.append(ChatMessage(role="system", content=_json_instruction(schema)))
            response = await self._send(lambda: self._payload(conversation, ()))
        problems = _json_problems(response.text, schema)
        if not problems:
            return json_in_text(response.text or "")
        conversation += [
            ChatMessage(role="assistant", content=response.text),
            ChatMessage(
                role="user",
                content="That answer does not follow the JSON schema: "
                + "; ".join(problems)
                + ". Answer again with only the corrected JSON.",
            ),
        ]
        fixed = await self._send(lambda: self._payload(conversation, (), response_format))
        problems = _json_problems(fixed.text, schema)
        if problems:
            raise LLMError(
                f"the model's answer does not follow the JSON schema {name!r}: "
                + "; ".join(problems)
            )
        return json_in_text(fixed.text or "")

    async def _send(self, payload: Callable[[], dict[str, Any]]) -> LLMResponse:
        """Post one request (its body made again for each attempt), retrying
        transient failures within the deadline."""
        ends = time.monotonic() + self.deadline
        attempts = self.max_retries + 1
        made = 0
        last_reason = "no attempt made"
        attempt = -1
        while attempt + 1 < attempts:
            attempt += 1
            left = ends - time.monotonic()
            if left <= 0:
                break
            made += 1
            body = json.dumps(payload(), ensure_ascii=False).encode("utf-8")
            try:
                return await self._attempt(body, min(self.timeout, left))
            except _StreamOnly:
                attempt -= 1  # sent again at once, streamed: no attempt spent
                continue
            except _Retryable as failure:
                last_reason = failure.reason
                if attempt + 1 >= attempts:
                    break
                delay = self._delay(attempt, failure.retry_after)
                if time.monotonic() + delay >= ends:
                    break  # the next attempt could not start before the deadline
                logger.warning(
                    "LLM request to %s failed (%s); retry %d/%d in %.2f s",
                    self.url,
                    failure.reason,
                    attempt + 1,
                    self.max_retries,
                    delay,
                )
                await asyncio.sleep(delay)
        raise LLMError(
            f"LLM request to {self.url} failed after {made} attempt(s): {last_reason} "
            f"(deadline {self.deadline:g} s). Check that the server is running and "
            "reachable, or raise timeout/deadline/max_retries."
        )

    async def check(self, *, timeout: float = 5.0) -> None:
        """Ask the server once whether it answers and serves :attr:`model`.

        Sends ``GET {base_url}/models``. A server that answers without a model list
        (some do not implement it) passes; one whose list lacks the model does not.

        Raises:
            LLMError: the server cannot be reached within ``timeout`` seconds,
                refuses the key, or does not serve the model (the message names
                what it serves).
        """
        self._check_open()
        url = f"{self.base_url}/models"
        try:
            async with (
                self._sessions.connection() as session,
                session.get(
                    url, headers=self._headers(), timeout=aiohttp.ClientTimeout(total=timeout)
                ) as response,
            ):
                status = response.status
                text = await response.text(errors="replace")
        except TimeoutError:
            raise LLMError(
                f"the LLM server at {self.base_url} did not answer in {timeout:g} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise LLMError(
                f"cannot reach the LLM server at {self.base_url} ({type(exc).__name__}: {exc})"
            ) from None
        if status in (401, 403):
            raise LLMError(
                f"the LLM server at {self.base_url} refused the request (HTTP {status})."
                + _HINTS[status]
            )
        if status != 200:
            return  # reachable; it just has no model list
        served = _model_ids(text)
        if served is not None and not _serves(served, self.model):
            shown = ", ".join(sorted(served)[:10]) or "none"
            raise LLMError(
                f"the LLM server at {self.base_url} does not serve model {self.model!r} "
                f"(it serves: {shown})"
            )

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), MAX_RETRY_AFTER_SECONDS)
        base: float = self.backoff * 2.0**attempt
        return base * (0.5 + random.random() / 2)

    async def _attempt(self, body: bytes, seconds: float) -> LLMResponse:
        timeout = aiohttp.ClientTimeout(total=seconds)
        logger.debug("POST %s (model %s, %d bytes)", self.url, self.model, len(body))
        try:
            async with (
                self._sessions.connection() as session,
                session.post(
                    self.url, data=body, headers=self._headers(), timeout=timeout
                ) as response,
            ):
                status = response.status
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                content_type = response.headers.get("Content-Type", "")
                if status == 200 and looks_like_event_stream(content_type, ""):
                    return await _assemble(read_events(response.content))
                text = await response.text(errors="replace")
        except TimeoutError:
            raise _Retryable(f"no answer within {seconds:.3g} s") from None
        except aiohttp.ClientError as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from None
        except IncompleteStream as exc:
            raise _Retryable(f"the answer stream was cut ({exc})") from None
        except aiohttp.http_exceptions.HttpProcessingError as exc:  # a line too long, say
            raise LLMError(f"LLM endpoint {self.url} sent an unreadable answer: {exc}") from None
        if status == 429:
            raise _Retryable("HTTP 429 (rate limited)", retry_after)
        if status >= 500:
            raise _Retryable(f"HTTP {status}: {_excerpt(text)}", retry_after)
        if status == 400 and not self.stream and _asks_to_stream(text):
            self.stream = True
            logger.info("%s answers only streamed requests; streaming from now on", self.url)
            raise _StreamOnly
        if status >= 400 or status < 200:
            raise _Refused(
                f"LLM endpoint {self.url} answered HTTP {status}: {_excerpt(text)}."
                + _HINTS.get(status, " Check the model name, messages and tool schemas."),
                status,
                text,
            )
        if looks_like_event_stream("", text[:64]):
            try:
                return await _assemble(read_events(lines_of(text)))
            except IncompleteStream as exc:
                raise _Retryable(f"the answer stream was cut ({exc})") from None
        return parse_chat_completion(text)


async def _assemble(events: AsyncIterator[str]) -> LLMResponse:
    """The response a stream of chunk events makes (read up to ``[DONE]``)."""
    assembler = StreamAssembler()
    async for data in events:
        assembler.feed(data)
        if assembler.done:
            break
    return assembler.result()


def _asks_to_stream(text: str) -> bool:
    """Whether an HTTP 400 answer says the server wants ``stream: true``."""
    lowered = text.lower()
    return "stream" in lowered and any(word in lowered for word in _STREAM_REQUIRED[1:])


def _json_instruction(schema: Mapping[str, Any]) -> str:
    return (
        "Answer with only a JSON value (no other text) that follows this JSON schema: "
        + json.dumps(schema, ensure_ascii=False)
    )


def _json_problems(text: str | None, schema: Mapping[str, Any]) -> list[str]:
    """What keeps an answer text from being JSON that follows ``schema`` (empty: nothing)."""
    try:
        value = json_in_text(text or "")
    except ValueError:
        return ["the answer holds no JSON value"]
    return schema_problems(value, schema)


def _model_ids(body: str) -> set[str] | None:
    """The model ids of a ``/models`` answer (``{"data": [{"id": ...}]}``), or ``None``
    when it is not such a list."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    items = data.get("data") if isinstance(data, Mapping) else None
    if not isinstance(items, list):
        return None
    ids = {item.get("id") for item in items if isinstance(item, Mapping)}
    return {model for model in ids if isinstance(model, str)}


def _serves(served: set[str], model: str) -> bool:
    """Whether ``model`` is among the ``served`` ids, a name without a tag meaning its
    ``:latest`` (Ollama lists ``qwen2.5:latest`` and answers to ``qwen2.5``)."""
    if model in served:
        return True
    name, colon, tag = model.partition(":")
    if not colon:
        return f"{model}:latest" in served
    return tag == "latest" and name in served


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > BODY_EXCERPT_CHARS:
        flat = flat[:BODY_EXCERPT_CHARS] + "..."
    return flat or "(empty body)"


def _content_text(content: Any) -> str | None:
    """Message content as text: a string, or the text parts of a content list."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        ]
        return "".join(parts)
    raise LLMError(f"malformed LLM response: message content is a {type(content).__name__}")


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return "{}"
    return json.dumps(arguments, ensure_ascii=False)


def _tool_call(raw: Any) -> ToolCall:
    function = raw.get("function") if isinstance(raw, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(name, str) or not name:
        raise LLMError(f"malformed LLM response: tool call without a function name: {raw!r:.200}")
    call_id = raw.get("id")
    if not isinstance(call_id, str) or not call_id:
        call_id = f"call_{uuid.uuid4().hex[:24]}"
    return ToolCall(id=call_id, name=name, arguments=_arguments_text(function.get("arguments")))


def parse_chat_completion(body: str) -> LLMResponse:
    """Parse a ``/chat/completions`` response body (its first choice).

    Tool-call arguments sent as JSON objects are turned into JSON text; missing
    call ids are generated. Malformed argument *text* is passed through untouched.

    Raises:
        LLMError: the body is not a chat completion.
    """
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        raise LLMError(
            f"malformed LLM response: not JSON: {_excerpt(body)}; is base_url an "
            "OpenAI-compatible API root?"
        ) from None
    if not isinstance(data, Mapping):
        raise LLMError(f"malformed LLM response: expected a JSON object, got {_excerpt(body)}")
    if "error" in data and "choices" not in data:
        raise LLMError(f"LLM endpoint reported an error: {_excerpt(json.dumps(data['error']))}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise LLMError(f"malformed LLM response: no choices in {_excerpt(body)}")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, Mapping):
        raise LLMError(f"malformed LLM response: first choice has no message: {_excerpt(body)}")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise LLMError("malformed LLM response: tool_calls is not a list")
    calls = [_tool_call(raw) for raw in raw_calls]
    legacy = message.get("function_call")
    if not calls and isinstance(legacy, Mapping):
        calls.append(_tool_call({"function": legacy}))
    finish_reason = choice.get("finish_reason")
    usage = data.get("usage")
    return LLMResponse(
        text=_content_text(message.get("content")),
        tool_calls=tuple(calls),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        usage=dict(usage) if isinstance(usage, Mapping) else None,
    )
