"""Chat messages, tool calls and responses, and the protocol every LLM client speaks.

The types mirror the OpenAI chat format, which OpenAI, Ollama, vLLM, LM Studio and
the llama.cpp server all understand: :meth:`ChatMessage.to_openai` gives the wire
form and :meth:`ChatMessage.from_openai` reads it back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from ..errors import InvalidToolInput

__all__ = [
    "ChatMessage",
    "LLMClient",
    "LLMResponse",
    "Role",
    "ToolCall",
    "tool_names",
]

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = get_args(Role)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call requested by the model.

    Args:
        id: the call id; the tool's answer refers to it as ``tool_call_id``.
        name: the function the model wants to call.
        arguments: the raw JSON text of the arguments exactly as the model produced
            it. It may be malformed; :meth:`parse_arguments` checks it.
    """

    id: str
    name: str
    arguments: str

    def parse_arguments(self) -> dict[str, Any]:
        """The arguments as a dict (an empty text counts as ``{}``).

        Raises:
            InvalidToolInput: the text is not JSON or not a JSON object.
        """
        if not self.arguments.strip():
            return {}
        try:
            value = json.loads(self.arguments)
        except json.JSONDecodeError as exc:
            raise InvalidToolInput(
                f"arguments of tool call {self.name!r} are not valid JSON ({exc.msg} at "
                f'position {exc.pos}); send a JSON object such as {{"query": "..."}}'
            ) from None
        if not isinstance(value, dict):
            raise InvalidToolInput(
                f"arguments of tool call {self.name!r} must be a JSON object, "
                f"got {type(value).__name__}"
            )
        return value

    def to_openai(self) -> dict[str, Any]:
        """The call in the OpenAI ``tool_calls`` format."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a conversation with the model.

    Args:
        role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
        content: the text; may be ``None`` for an assistant message holding only
            tool calls.
        tool_calls: calls requested by the model (assistant messages only).
        tool_call_id: the call a ``"tool"`` message answers (required for that role).
        name: an optional participant or function name.

    Raises:
        ValueError: the role is unknown, a tool message lacks ``tool_call_id``, or
            a message other than an assistant one carries tool calls.
    """

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if not isinstance(self.tool_calls, tuple):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages carry tool calls, not {self.role!r}")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")

    def to_openai(self) -> dict[str, Any]:
        """The message in the OpenAI chat format."""
        out: dict[str, Any] = {"role": self.role}
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
            out["content"] = self.content if self.content is not None else ""
        elif self.role == "assistant":
            out["content"] = self.content
            if self.tool_calls:
                out["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        else:
            out["content"] = self.content if self.content is not None else ""
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> ChatMessage:
        """Read a message in the OpenAI chat format.

        Raises:
            ValueError: the mapping is not a valid chat message.
        """
        role = data.get("role")
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        content = data.get("content")
        if content is not None and not isinstance(content, str):
            raise ValueError(f"content must be a string or null, got {type(content).__name__}")
        calls: list[ToolCall] = []
        for raw in data.get("tool_calls") or ():
            function = raw.get("function") if isinstance(raw, Mapping) else None
            if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
                raise ValueError(f"tool call without a function name: {raw!r}")
            arguments = function.get("arguments", "")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            calls.append(
                ToolCall(id=str(raw.get("id", "")), name=function["name"], arguments=arguments)
            )
        tool_call_id = data.get("tool_call_id")
        name = data.get("name")
        return cls(
            role=role,
            content=content,
            tool_calls=tuple(calls),
            tool_call_id=tool_call_id if isinstance(tool_call_id, str) else None,
            name=name if isinstance(name, str) else None,
        )


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """What the model answered to one request.

    Args:
        text: the answer text, or ``None`` when the model only called tools.
        tool_calls: the tool calls the model requested, in order.
        finish_reason: why the model stopped (``"stop"``, ``"tool_calls"``, ``"length"``).
        usage: token counts as the server reported them, if it did.
    """

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: dict[str, Any] | None = field(default=None, compare=False)

    def to_message(self) -> ChatMessage:
        """The assistant message to append to the conversation before tool results."""
        return ChatMessage(role="assistant", content=self.text, tool_calls=self.tool_calls)


@runtime_checkable
class LLMClient(Protocol):
    """A chat model that answers with text and/or tool calls.

    ``tools`` are OpenAI function schemas:
    ``{"type": "function", "function": {"name", "description", "parameters"}}``.
    """

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        """Answer the conversation, possibly by calling some of ``tools``.

        Raises:
            LLMError: the model failed or answered something unusable.
        """
        ...

    async def aclose(self) -> None:
        """Release the client's resources; it refuses further requests."""
        ...


def tool_names(tools: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The function names offered by OpenAI tool schemas (malformed entries skipped)."""
    names: list[str] = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function", tool)
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str) and name:
            names.append(name)
    return tuple(names)
