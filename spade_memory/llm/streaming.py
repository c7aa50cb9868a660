"""Streamed chat completions: server-sent events read, and their deltas assembled.

A streaming ``/chat/completions`` answer is a series of ``data: {json}`` events (each
a ``chat.completion.chunk``), ended by ``data: [DONE]``. :func:`read_events` splits
the body into event payloads; :class:`StreamAssembler` joins the deltas of the
first choice into one :class:`~.messages.LLMResponse`: text pieces in order, tool
calls assembled by their ``index`` (the id and name arrive once, the arguments in
pieces). A stream that stops before ``[DONE]`` or a ``finish_reason`` is
:class:`IncompleteStream`: the answer is not used.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import LLMError
from .messages import LLMResponse, ToolCall

__all__ = ["IncompleteStream", "StreamAssembler", "looks_like_event_stream", "read_events"]

_EXCERPT = 200


class IncompleteStream(Exception):
    """The stream ended before the answer was complete (no ``[DONE]``, no finish reason)."""


def looks_like_event_stream(content_type: str, body_start: str) -> bool:
    """Whether an answer is an event stream: by its type, or a body of ``data:`` lines
    sent with another type."""
    if content_type.lower().startswith("text/event-stream"):
        return True
    return body_start.lstrip().startswith("data:")


async def read_events(lines: AsyncIterable[bytes]) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event (several ``data:`` lines joined by newlines);
    comments, ``event:``, ``id:`` and ``retry:`` lines are skipped."""
    data: list[str] = []
    async for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


async def lines_of(text: str) -> AsyncIterator[bytes]:
    """A text body as the lines :func:`read_events` reads."""
    # not splitlines(): it also breaks at U+2028, U+2029 and U+0085, which JSON
    # strings may hold raw
    for line in text.split("\n"):
        yield line.removesuffix("\r").encode("utf-8")
    yield b""


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAssembler:
    """Joins ``chat.completion.chunk`` events into one response (first choice only)."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._last_key: int | None = None  # the slot the last call delta went to
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._done = False
        self._chunks = 0

    @property
    def done(self) -> bool:
        """Whether ``[DONE]`` arrived."""
        return self._done

    def feed(self, data: str) -> None:
        """Take one event's data.

        Raises:
            LLMError: the event is not a chunk, or reports an error.
        """
        if data.strip() == "[DONE]":
            self._done = True
            return
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise LLMError(
                f"malformed LLM stream: an event is not JSON: {data[:_EXCERPT]!r}"
            ) from None
        if not isinstance(chunk, Mapping):
            raise LLMError(f"malformed LLM stream: an event is not an object: {data[:_EXCERPT]!r}")
        if "error" in chunk and not chunk.get("choices"):
            raise LLMError(
                f"LLM endpoint reported an error in its stream: "
                f"{json.dumps(chunk['error'])[:_EXCERPT]}"
            )
        self._chunks += 1
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            self._usage = dict(usage)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: Mapping[str, Any]) -> None:
        delta = choice.get("delta")
        if not isinstance(delta, Mapping):
            delta = choice.get("message")  # some servers send the whole message last
        if isinstance(delta, Mapping):
            content = delta.get("content")
            if isinstance(content, str):
                self._text.append(content)
            raw_calls = delta.get("tool_calls")
            if isinstance(raw_calls, list):
                for position, raw in enumerate(raw_calls):
                    if isinstance(raw, Mapping):
                        self._call_delta(raw, position)
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            self._finish_reason = finish

    def _call_delta(self, raw: Mapping[str, Any], position: int) -> None:
        index = raw.get("index")
        key = index if isinstance(index, int) else self._unindexed_key(raw)
        self._last_key = key
        call = self._calls.setdefault(key, _PartialCall())
        call_id = raw.get("id")
        if isinstance(call_id, str) and call_id and not call.id:
            call.id = call_id
        function = raw.get("function")
        if not isinstance(function, Mapping):
            return
        name = function.get("name")
        if isinstance(name, str) and name and not call.name:
            call.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif isinstance(arguments, Mapping):
            call.arguments.append(json.dumps(arguments, ensure_ascii=False))

    def _unindexed_key(self, raw: Mapping[str, Any]) -> int:
        """The slot of a call delta without an ``index`` (some servers send one whole
        call per chunk without it): a new call when it brings an id or a name other
        than the last call's, else more of the last call's arguments."""
        last = self._calls.get(self._last_key) if self._last_key is not None else None
        if last is None:
            return len(self._calls)
        call_id = raw.get("id")
        function = raw.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        new_id = isinstance(call_id, str) and bool(call_id) and call_id != last.id
        same_id = isinstance(call_id, str) and bool(call_id) and call_id == last.id
        new_name = isinstance(name, str) and bool(name) and bool(last.name) and not same_id
        if new_id or new_name:
            return max(self._calls) + 1
        return self._last_key if self._last_key is not None else 0

    def result(self) -> LLMResponse:
        """The assembled answer.

        Raises:
            IncompleteStream: neither ``[DONE]`` nor a finish reason arrived.
            LLMError: a tool call never got a name, or the stream held no chunk.
        """
        if not self._done and self._finish_reason is None:
            raise IncompleteStream(
                f"the stream ended after {self._chunks} chunk(s) without [DONE] or a finish reason"
            )
        if not self._chunks:
            raise LLMError("malformed LLM stream: it held no chunk")
        calls: list[ToolCall] = []
        for key in sorted(self._calls):
            partial = self._calls[key]
            if not partial.name:
                raise LLMError("malformed LLM stream: a tool call never named its function")
            calls.append(
                ToolCall(
                    id=partial.id or f"call_{uuid.uuid4().hex[:24]}",
                    name=partial.name,
                    arguments="".join(partial.arguments) or "{}",
                )
            )
        text = "".join(self._text)
        return LLMResponse(
            text=text if text or not calls else None,
            tool_calls=tuple(calls),
            finish_reason=self._finish_reason,
            usage=self._usage,
        )
