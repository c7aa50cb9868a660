"""The tool object: schema, validation, budget and error handling around a memory call.

A :class:`MemoryTool` is stateless: everything about one call (the manager, the
conversation, the sender, the request's budget) arrives in a :class:`ToolContext`.
:meth:`MemoryTool.call` never raises for bad input, a spent budget or a failing
memory: it returns ``ToolResult(ok=False, text=...)`` with a message for the LLM.
"""

from __future__ import annotations

import abc
import asyncio
import builtins
import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..config import MemoryConfig
from ..errors import BudgetExceeded, InvalidToolInput, SpadeMemoryError
from ..models import InteractionNote, Memory, Scope, SearchResult, Viewer
from .budget import RequestBudget
from .validation import ToolArguments, tool_schema, validate_model

__all__ = ["MemoryBackend", "MemoryTool", "ToolContext", "ToolResult"]

logger = logging.getLogger(__name__)


class MemoryBackend(Protocol):
    """What the tools need of a memory: the part of ``MemoryManager`` they call."""

    @property
    def config(self) -> MemoryConfig: ...

    @property
    def categories(self) -> tuple[str, ...]: ...

    async def store(
        self,
        content: str,
        *,
        category: str = "fact",
        context: str | None = None,
        confidence: float = 1.0,
        importance: float = 0.5,
        source_conversation: str | None = None,
        source_sender: str | None = None,
        entities: Sequence[str] | None = None,
        relations: Sequence[Mapping[str, str]] | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
    ) -> Memory: ...

    async def search(
        self,
        query: str,
        *,
        limit: int = 5,
        category: str | None = None,
        explain: bool = False,
        viewer: Viewer | None = None,
    ) -> builtins.list[SearchResult]: ...

    async def recall(
        self,
        query: str,
        *,
        limit: int = 5,
        category: str | None = None,
        viewer: Viewer | None = None,
    ) -> builtins.list[SearchResult]: ...

    async def list(
        self,
        category: str | None = None,
        *,
        limit: int = 20,
        offset: int = 0,
        viewer: Viewer | None = None,
    ) -> builtins.list[Memory]: ...

    async def get(self, memory_id: int, *, viewer: Viewer | None = None) -> Memory: ...

    async def forget(self, memory_id: int, *, viewer: Viewer | None = None) -> None: ...

    async def add_note(
        self, conversation_id: str, content: str, *, author: str | None = None
    ) -> InteractionNote: ...


@dataclass(frozen=True)
class ToolContext:
    """Everything one tool call needs besides its arguments.

    Attributes:
        manager: the agent's memory (a ``MemoryManager``).
        conversation_id: the conversation the call happens in, if any.
        sender: bare JID of the agent being talked with, if any.
        budget: the request's budget; ``None`` means unlimited.
        viewer: whom the results are for: the tools read and change only what it
            sees (:class:`~spade_memory.models.Viewer`); ``None``: the agent itself.
        scope: the scope of memories stored in this call; ``None``: global (the
            agent's own).
    """

    manager: MemoryBackend
    conversation_id: str | None = None
    sender: str | None = None
    budget: RequestBudget | None = None
    viewer: Viewer | None = None
    scope: Scope | None = None


@dataclass(frozen=True)
class ToolResult:
    """The outcome of a tool call: short text for the LLM."""

    ok: bool
    text: str


class MemoryTool(abc.ABC):
    """A memory tool an LLM can call.

    Args:
        name: the function name the LLM calls.
        description: what the tool does and when to use it, written for an LLM.
        arguments: the model of its arguments; the JSON schema is generated from it
            (see :mod:`spade_memory.tools.validation`).
        categories: the memory's categories, the ``enum`` of the model's category
            fields.
        read_only: the tool changes nothing, so it may be cut off when the
            request's time budget runs out.
    """

    def __init__(
        self,
        *,
        name: str,
        description: str,
        arguments: type[ToolArguments],
        categories: Sequence[str] = (),
        read_only: bool,
    ) -> None:
        self._name = name
        self._description = description
        self._arguments = arguments
        self._categories = tuple(categories)
        self._parameters: dict[str, Any] = tool_schema(arguments, self._categories)
        self._read_only = read_only

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def parameters(self) -> dict[str, Any]:
        """A copy of the argument schema (OpenAI function ``parameters``)."""
        return copy.deepcopy(self._parameters)

    @property
    def arguments(self) -> type[ToolArguments]:
        """The model of the tool's arguments."""
        return self._arguments

    @property
    def read_only(self) -> bool:
        return self._read_only

    def schema(self) -> dict[str, Any]:
        """The OpenAI tool definition: ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {
                "name": self._name,
                "description": self._description,
                "parameters": self.parameters,
            },
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name}>"

    def max_lengths(self, manager: MemoryBackend) -> dict[str, int]:
        """Run-time length limits of string arguments (from the manager's config)."""
        return {}

    @abc.abstractmethod
    async def run(self, arguments: Any, context: ToolContext) -> str:
        """Do the work with validated arguments and return the text for the LLM.

        ``arguments`` is an instance of the tool's :attr:`arguments` model (each tool
        annotates it with its own model).

        Raises:
            SpadeMemoryError: reported to the LLM as a failed call.
        """

    async def call(self, arguments: Mapping[str, Any] | str, context: ToolContext) -> ToolResult:
        """Run the tool for an LLM: budget, validation, the memory call, a short text.

        Args:
            arguments: the arguments as a mapping or the LLM's raw JSON text.
            context: the manager, conversation, sender and budget of this call.

        Returns:
            ``ok=True`` and the result text, or ``ok=False`` and what went wrong.
        """
        budget = context.budget
        if budget is not None:
            try:
                budget.charge_call(self._name)
            except BudgetExceeded as exc:
                return ToolResult(ok=False, text=str(exc))
        try:
            cleaned = validate_model(
                self._arguments,
                arguments,
                schema=self._parameters,
                categories=self._categories,
                max_lengths=self.max_lengths(context.manager),
            )
        except InvalidToolInput as exc:
            logger.debug("refused %s call: %s", self._name, exc)
            return ToolResult(
                ok=False,
                text=f"invalid arguments for {self._name}: {exc}. Nothing was changed; "
                "fix the arguments and call again",
            )
        except Exception:  # arguments no check foresaw (e.g. an object whose repr fails)
            logger.exception("could not check the arguments of a %s call", self._name)
            return ToolResult(
                ok=False,
                text=f"invalid arguments for {self._name}: they could not be read. Nothing "
                "was changed; send a JSON object of named arguments",
            )
        try:
            text = await self._run_within_budget(cleaned, context)
        except SpadeMemoryError as exc:  # first: some are TimeoutErrors of their own
            return ToolResult(ok=False, text=f"{self._name} failed: {exc}")
        except TimeoutError:
            return ToolResult(
                ok=False,
                text=f"{self._name} ran out of time: the memory tools' time limit for this "
                "request was reached. Answer with what you have",
            )
        except Exception:
            logger.exception("%s failed unexpectedly", self._name)
            return ToolResult(
                ok=False,
                text=f"internal error in {self._name}; the memory could not answer. "
                "Continue without it",
            )
        if budget is not None:
            if self._read_only:
                text = budget.take_output(text)
            else:  # a write's confirmation (its memory's id) is never cut
                budget.charge_output(text)
        return ToolResult(ok=True, text=text)

    async def _run_within_budget(self, arguments: ToolArguments, context: ToolContext) -> str:
        budget = context.budget
        if budget is None:
            return await self.run(arguments, context)
        with budget.running():
            if not self._read_only:
                # A write is never cut off half way: its result must be known.
                return await self.run(arguments, context)
            deadline = asyncio.timeout(budget.remaining_seconds)
            try:
                async with deadline:
                    return await self.run(arguments, context)
            except SpadeMemoryError:
                raise  # the tool's own error (e.g. a peer that did not answer in time)
            except TimeoutError:
                if deadline.expired():
                    raise
                raise _InnerTimeout from None


class _InnerTimeout(SpadeMemoryError):
    """A timeout raised by the memory itself, not by the request's time budget."""

    def __init__(self) -> None:
        super().__init__("the memory timed out; try again later")
