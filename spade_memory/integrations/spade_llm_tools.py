"""spade_memory's memory tools as spade_llm ``LLMTool`` objects.

``spade_llm_tools(manager)`` gives ``store_memory``, ``search_memories``,
``list_memories``, ``remember_interaction_info`` and ``forget_memory`` as
``spade_llm.tools.LLMTool`` objects bound to one agent's :class:`MemoryManager`.
Their names and arguments are those of spade_llm's own memory tools (each schema
is a superset: spade_llm's arguments are all accepted), and every call goes
through spade_memory's validation, so bad input gets a clear error text for the
LLM and writes nothing.

spade_llm's ``LLMBehaviour`` tells each tool the conversation it runs in
(``set_conversation_id``) before every LLM request, and ``LLMAgent`` hands it the
agent (``set_agent``); the tools use these for the conversation of
``remember_interaction_info``, for the sender recorded with a stored memory, and to
start a fresh per-request budget (``MemoryConfig.tools``). When the sender of the
conversation is known, the tools act for it as the LLMAgent's do
(:class:`~spade_memory.disclosure.Disclosure`): they read and forget only what it
sees, and what it tells is stored in its scope (``MemoryConfig.scope``). The sender is
that of the newest message of the conversation. spade_llm's conversation id is an XMPP
thread the sender chose; another sender reusing it gets a conversation of its own
for these tools, but spade_llm itself still shows it the thread's earlier messages
(and its interaction memory's notes), so prefer ``ScopePolicy(mode="per_sender")``
(the default) there.

spade_llm imports LiteLLM, which fetches a model price list from the network on
import unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is set: this module sets it to
``True`` (if unset) before importing spade_llm, so importing it never reaches the
network. Set it to ``False`` first to have LiteLLM's remote list.
"""

from __future__ import annotations

import importlib
import logging
import os
import warnings
from collections.abc import Sequence
from typing import Any

from ..disclosure import Disclosure
from ..errors import ConfigError
from ..identity import normalize_jid, thread_conversation_id
from ..manager import MemoryManager
from ..tools import MemoryTool, RequestBudget, ToolContext

__all__ = [
    "INSTALL_HINT",
    "SpadeLLMMemoryTool",
    "ToolBinding",
    "conversation_senders",
    "import_spade_llm",
    "require_spade_llm",
    "spade_llm_tools",
]

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    'spade_llm is needed for this; install it with: pip install "spade-memory[spade-llm]"'
)

_NOTE_DESCRIPTION = (
    "Write a short note about the conversation you are having right now with another "
    "agent: what was agreed, asked, promised or left open. For knowledge that should "
    "outlive this conversation use store_memory."
)


def import_spade_llm(name: str) -> Any:
    """Import module ``name`` of spade_llm without letting LiteLLM reach the network.

    Raises:
        ImportError: spade_llm (or one of its dependencies) is not installed.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with warnings.catch_warnings():
        # LiteLLM reads its bundled price list through a deprecated importlib API.
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"litellm\b")
        return importlib.import_module(name)


_MISSING: ImportError | None
_LLMToolBase: Any
try:
    _LLMToolBase = import_spade_llm("spade_llm.tools").LLMTool
    _MISSING = None
except ImportError as exc:  # spade_llm is an optional extra
    _LLMToolBase = object
    _MISSING = exc


def require_spade_llm() -> None:
    """Raise a clear ImportError when spade_llm could not be imported."""
    if _MISSING is not None:
        raise ImportError(f"{INSTALL_HINT} ({_MISSING})") from _MISSING


class ToolBinding:
    """What the memory tools of one agent share: the manager, the conversation, a budget.

    Args:
        manager: the agent's open memory.
        conversation_id: the conversation to note things in until spade_llm sets one.
        sender: the JID of the agent being talked with (kept as its normalised bare
            JID); by default it is read from the spade_llm agent's context for the
            current conversation.
        budget: start a per-request budget (``manager.config.tools``) each time
            spade_llm begins a request; ``False`` leaves the tools unlimited.

    Raises:
        InvalidAgentId: ``sender`` is not a JID.
    """

    def __init__(
        self,
        manager: MemoryManager,
        *,
        conversation_id: str | None = None,
        sender: str | None = None,
        budget: bool = True,
    ) -> None:
        self.manager = manager
        self.conversation_id = conversation_id
        self.sender = None if sender is None else normalize_jid(sender)
        self.agent: Any = None
        self._use_budget = budget
        self._budget: RequestBudget | None = None

    def begin(self, conversation_id: str) -> None:
        """A new LLM request in ``conversation_id`` starts: a fresh budget."""
        self.conversation_id = conversation_id
        if self._use_budget:
            self._budget = RequestBudget(self.manager.config.tools)

    def current_sender(self) -> str | None:
        """The bare JID of the agent being answered now, if known: the sender of the
        newest message of the current conversation in the spade_llm agent's context
        (not of its first: another sender may reuse a thread)."""
        if self.sender is not None:
            return self.sender
        found = self._senders()
        return found[1] if found is not None else None

    def context(self) -> ToolContext:
        """The :class:`ToolContext` of a call made now: for the sender, when known.

        A sender writing in a conversation another sender started (a thread it
        reused) gets a conversation of its own, bound to it as the LLMAgent's
        conversations are (:func:`~spade_memory.identity.thread_conversation_id`):
        it neither reads nor writes the first sender's notes or conversation scope.
        """
        sender = self.current_sender()
        conversation_id = self.conversation_id
        if sender is None:
            return ToolContext(self.manager, conversation_id=conversation_id, budget=self._budget)
        found = self._senders() if self.sender is None else None
        if found is not None and conversation_id is not None and found[0] != sender:
            conversation_id = thread_conversation_id(self.manager.jid, sender, conversation_id)
        disclosure = Disclosure(self.manager.config)
        return ToolContext(
            self.manager,
            conversation_id=conversation_id,
            sender=sender,
            budget=self._budget,
            viewer=disclosure.viewer(sender, conversation_id),
            scope=disclosure.scope_for(sender, conversation_id),
        )

    def _senders(self) -> tuple[str | None, str] | None:
        """Who started the current conversation and who wrote its newest message
        (:func:`conversation_senders`)."""
        if self.conversation_id is None:
            return None
        return conversation_senders(self.agent, self.conversation_id)


def conversation_senders(agent: Any, conversation_id: str) -> tuple[str | None, str] | None:
    """Who started a conversation of a spade_llm agent (``None`` if unknown) and who
    wrote its newest message, from the agent's context; ``None`` when no sender is
    known (no agent, no context, no message)."""
    context = getattr(agent, "context", None)
    if context is None:
        return None
    try:
        history = context.get_conversation_history(conversation_id)
        newest = next((m.get("sender") for m in reversed(history) if m.get("role") == "user"), None)
        first = context.get_tracing_metadata(conversation_id).get("sender_id")
        first = normalize_jid(first) if first else None
        if newest:
            return first, normalize_jid(newest)
        return (first, first) if first else None
    except Exception:  # the sender is a nicety; a tool call must not fail for it
        logger.debug("no sender known for %s", conversation_id, exc_info=True)
        return None


class SpadeLLMMemoryTool(_LLMToolBase):  # type: ignore[misc]
    """One spade_memory tool as a spade_llm ``LLMTool``.

    ``await tool.execute(**arguments)`` validates the arguments, runs the tool on
    the bound manager and returns the text for the LLM; it never raises for bad
    input or a failing memory (the text says what went wrong).

    Args:
        tool: the spade_memory tool.
        binding: the manager, conversation and budget this tool shares with the others.
    """

    def __init__(self, tool: MemoryTool, binding: ToolBinding) -> None:
        require_spade_llm()
        self.memory_tool = tool
        self.binding = binding
        description = _NOTE_DESCRIPTION if tool.name == "remember_interaction_info" else None
        super().__init__(
            name=tool.name,
            description=description or tool.description,
            parameters=tool.parameters,
            func=self._call,
        )

    def set_conversation_id(self, conversation_id: str) -> None:
        """Called by spade_llm's ``LLMBehaviour`` before each LLM request."""
        self.binding.begin(conversation_id)

    def set_agent(self, agent: Any) -> None:
        """Called by spade_llm's ``LLMAgent`` when the tool is registered: from then
        on, a tool of spade_llm's with this tool's name takes its place."""
        self.binding.agent = agent
        _distinct_tools(agent)

    async def execute(self, /, **arguments: Any) -> str:
        """Run the tool as spade_llm does, ``await tool.execute(**arguments)``."""
        return await self._call(**arguments)

    async def _call(self, /, **arguments: Any) -> str:
        result = await self.memory_tool.call(arguments, self.binding.context())
        return result.text

    def __repr__(self) -> str:
        return f"<SpadeLLMMemoryTool {self.memory_tool.name} of {self.binding.manager.jid}>"


class _DistinctTools(list[Any]):
    """An agent's tool list in which spade_llm's own tool of a name replaces ours."""

    def append(self, tool: Any, /) -> None:
        name = getattr(tool, "name", None)
        if isinstance(tool, SpadeLLMMemoryTool):
            if any(_foreign(other, name) for other in self):
                logger.info("spade_llm already gives the agent %s; ours is left out", name)
                return
            if any(_ours(other, name) for other in self):
                return  # added twice (spade_llm's add_tool appends to a shared list twice)
        elif any(_ours(other, name) for other in self):
            logger.info("spade_llm gives the agent %s; ours is left out", name)
            self[:] = [other for other in self if not _ours(other, name)]
        super().append(tool)


def _ours(tool: Any, name: object) -> bool:
    return isinstance(tool, SpadeLLMMemoryTool) and tool.name == name


def _foreign(tool: Any, name: object) -> bool:
    return not isinstance(tool, SpadeLLMMemoryTool) and getattr(tool, "name", None) == name


def _distinct_tools(agent: Any) -> None:
    """Make ``agent.tools`` (shared with its behaviour) keep one tool per name."""
    tools = getattr(agent, "tools", None)
    if not isinstance(tools, list) or isinstance(tools, _DistinctTools):
        return
    distinct = _DistinctTools()
    for tool in tools:
        distinct.append(tool)
    agent.tools = distinct
    behaviour = getattr(agent, "llm_behaviour", None)
    if behaviour is not None and getattr(behaviour, "tools", None) is tools:
        behaviour.tools = distinct


def spade_llm_tools(
    manager: MemoryManager,
    *,
    agent: Any = None,
    names: Sequence[str] | None = None,
    conversation_id: str | None = None,
    sender: str | None = None,
    budget: bool = True,
) -> list[SpadeLLMMemoryTool]:
    """The memory tools of ``manager`` as spade_llm ``LLMTool`` objects.

    Pass them to spade_llm's agent: ``LLMAgent(..., tools=spade_llm_tools(manager))``.
    A tool is never offered twice under one name: where spade_llm registers a tool
    of the same name for the agent (its ``interaction_memory`` or
    ``agent_base_memory`` tools), spade_llm's is kept and ours left out, whether it
    comes before or after ours.

    Args:
        manager: the agent's open memory.
        agent: the spade_llm agent the tools are for, when it exists already: the
            names it has tools for are left out (add the rest with ``agent.add_tool``).
        names: which tools, by name (default: all of ``manager.tools()``).
        conversation_id, sender, budget: see :class:`ToolBinding`.

    Raises:
        ImportError: spade_llm is not installed.
        ConfigError: ``names`` holds a name that is not a memory tool.
        InvalidAgentId: ``sender`` is not a JID.
    """
    require_spade_llm()
    tools = manager.tools()
    if names is not None:
        known = {tool.name: tool for tool in tools}
        if isinstance(names, str):
            names = [names]
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ConfigError(
                f"no memory tool named {', '.join(map(repr, unknown))}; "
                f"the tools are {', '.join(known)}"
            )
        tools = [known[name] for name in dict.fromkeys(names)]
    if agent is not None:
        taken = {getattr(tool, "name", None) for tool in getattr(agent, "tools", None) or []}
        left_out = [tool.name for tool in tools if tool.name in taken]
        if left_out:
            logger.info("the agent has %s already; ours are left out", ", ".join(left_out))
        tools = [tool for tool in tools if tool.name not in taken]
    binding = ToolBinding(manager, conversation_id=conversation_id, sender=sender, budget=budget)
    if agent is not None:
        binding.agent = agent
    return [SpadeLLMMemoryTool(tool, binding) for tool in tools]
