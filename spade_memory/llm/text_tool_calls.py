"""Tool calls that a model wrote in its text instead of sending them as tool calls.

Small local models often answer a tool request with text such as::

    <tool_call>{"name": "store_memory", "arguments": {"content": "..."}}</tool_call>
    ```json
    {"name": "search_memories", "arguments": {"query": "..."}}
    ```
    {"name": "list_memories", "parameters": {}}
    <function=list_memories>{"limit": 5}</function>

:func:`tool_calls_in_text` finds them and returns real :class:`~.messages.ToolCall`
objects, only for the tools that were offered and only when the JSON has the shape
of a call (a name, and arguments or parameters, nothing else), so a JSON answer the
user asked for is left alone. Their arguments are then checked by the tool like
any call's: a call the tool refuses (broken JSON, a missing argument) comes back to
the model as the tool's error, which it can correct. The text around the calls
is kept as the answer text.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from .messages import ToolCall, tool_names

__all__ = ["tool_calls_in_text"]

_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)
_FUNCTION_TAG = re.compile(r"<function=([\w.-]+)>\s*(.*?)\s*</function>", re.S)
_FENCE = re.compile(r"```(?:json|tool_call|tool|javascript)?[ \t]*\n?(.*?)```", re.S | re.I)
_NAME = re.compile(r'"name"\s*:\s*"([\w.-]+)"')
_ARGUMENTS = re.compile(r'"(?:arguments|parameters|args)"\s*:\s*(.*)', re.S)
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "args", "type", "id", "function"})


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _arguments_text(value: Any) -> str:
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _as_call(item: Any, offered: frozenset[str]) -> ToolCall | None:
    """A call from one JSON value of the shape of a call to an offered tool, else ``None``."""
    if not isinstance(item, Mapping) or not set(item) <= _CALL_KEYS:
        return None
    function = item.get("function")
    if isinstance(function, Mapping):
        name, arguments = function.get("name"), function.get("arguments")
    else:
        name = item.get("name")
        arguments = next(
            (item[key] for key in ("arguments", "parameters", "args") if key in item), None
        )
    if not isinstance(name, str) or name not in offered:
        return None
    return ToolCall(id=_call_id(), name=name, arguments=_arguments_text(arguments))


def _calls_in(payload: str, offered: frozenset[str], *, tagged: bool) -> list[ToolCall] | None:
    """The calls a JSON payload holds (one call or a list of them), or ``None`` when it
    holds none. Inside ``<tool_call>`` tags, a payload that is not JSON but names an
    offered tool still becomes a call, with its broken arguments, for the tool to refuse
    in words the model can act on."""
    try:
        value = json.loads(payload)
    except json.JSONDecodeError:
        if not tagged:
            return None
        named = _NAME.search(payload)
        if named is None or named.group(1) not in offered:
            return None
        found = _ARGUMENTS.search(payload)
        raw = found.group(1).rstrip().removesuffix("}").rstrip() if found else payload
        return [ToolCall(id=_call_id(), name=named.group(1), arguments=raw)]
    items = value if isinstance(value, list) else [value]
    calls = [_as_call(item, offered) for item in items]
    if not calls or any(call is None for call in calls):
        return None
    return [call for call in calls if call is not None]


def tool_calls_in_text(
    text: str | None, tools: Sequence[Mapping[str, Any]]
) -> tuple[tuple[ToolCall, ...], str | None]:
    """The tool calls written in ``text`` and the text left around them.

    Args:
        text: the model's answer text.
        tools: the OpenAI tool schemas offered with the request.

    Returns:
        ``(calls, rest)``: no calls and ``text`` unchanged when none was found; else the
        calls in order and the remaining text (``None`` when nothing else was said).
    """
    offered = frozenset(tool_names(tools))
    if not text or not offered:
        return (), text
    calls: list[ToolCall] = []
    rest = text
    for pattern, tagged in ((_TAG, True), (_FENCE, False)):
        spans: list[tuple[int, int]] = []
        for match in pattern.finditer(rest):
            found = _calls_in(match.group(1), offered, tagged=tagged)
            if found:
                calls.extend(found)
                spans.append(match.span())
        for start, end in reversed(spans):
            rest = rest[:start] + rest[end:]
        if calls:
            break
    if not calls:
        for match in _FUNCTION_TAG.finditer(rest):
            if match.group(1) in offered:
                calls.append(ToolCall(id=_call_id(), name=match.group(1), arguments=match.group(2)))
        if calls:
            rest = _FUNCTION_TAG.sub(lambda m: "" if m.group(1) in offered else m.group(0), rest)
    if not calls:
        whole = _calls_in(text.strip(), offered, tagged=False)
        if whole:
            return tuple(whole), None
        return (), text
    remaining = rest.strip()
    return tuple(calls), remaining or None
