"""LLMAgent: a SPADE agent whose LLM answers its messages and keeps a long-term memory.

```python
from spade_memory import LLMAgent, MemoryConfig, OpenAICompatibleLLM

agent = LLMAgent(
    "alice@localhost", "secret",
    llm=OpenAICompatibleLLM(base_url="http://localhost:11434/v1", model="qwen2.5"),
    memory=MemoryConfig(root="./memory"),
)
await agent.start()
```

Every message the agent receives is answered by its LLM, which sees the recalled
memory and may call the memory tools (``store_memory``, ``search_memories``,
``list_memories``, ``remember_interaction_info``, ``forget_memory``) plus any extra
tools given. Without ``llm`` the offline :class:`~spade_memory.llm.ScriptedLLM` is
used. An LLM client passed in stays the caller's to close; the agent does not
close it on ``stop()``, so the agent can start again with it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from spade.agent import Agent
from spade.message import Message
from spade.template import Template

from ..config import MemoryConfig
from ..errors import StoreClosedError
from ..llm import LLMClient
from ..testing.scripted_llm import ScriptedLLM
from ..tools import build_memory_tools
from .conversation import AgentTool, ConversationBehaviour
from .mixin import MemoryMixin

__all__ = ["LLMAgent"]

logger = logging.getLogger(__name__)

PRESENCE_SYNC_SECONDS = 10.0


class LLMAgent(MemoryMixin, Agent):  # type: ignore[misc]
    """A SPADE agent answering messages with an LLM that uses its memory.

    Args:
        jid: the agent's XMPP address, ``name@domain``.
        password: its XMPP password.
        llm: the chat model; default an offline ``ScriptedLLM``.
        system_prompt: the system message; ``{name}`` becomes the agent's name.
            Default: :data:`~spade_memory.spade.DEFAULT_SYSTEM_PROMPT`.
        tools: extra tools offered to the model besides the memory tools: objects
            with ``name``, ``schema()`` and ``async call(arguments, context)``.
        memory: where and how the memory is kept (see ``MemoryConfig``).
        template: only messages matching it reach the LLM.
        max_tool_rounds: rounds of tool calls per message.
        history_turns: earlier exchanges per conversation replayed to the model.
        turn_timeout: seconds one incoming message may take to answer (every LLM
            request and tool call included); past it the sender is told so.
            ``None`` for no limit.
        max_concurrent_turns: conversations answered at once; the messages of one
            conversation are answered one after the other, in order, so a slow
            turn holds up its own conversation only.
        **agent_kwargs: passed to ``spade.agent.Agent`` (``port``, ``verify_security``).

    Raises:
        ValueError: two tools share a name (extra tools may not reuse a memory
            tool's name), ``max_tool_rounds`` is negative or
            ``max_concurrent_turns`` is below 1.
        TypeError: an extra tool lacks ``name``, ``schema()`` or ``call()``.
    """

    def __init__(
        self,
        jid: str,
        password: str,
        *,
        llm: LLMClient | None = None,
        system_prompt: str | None = None,
        tools: Sequence[AgentTool] = (),
        memory: MemoryConfig | None = None,
        template: Template | None = None,
        max_tool_rounds: int = 4,
        history_turns: int = 3,
        turn_timeout: float | None = 60.0,
        max_concurrent_turns: int = 4,
        **agent_kwargs: Any,
    ) -> None:
        if max_tool_rounds < 0:
            raise ValueError(f"max_tool_rounds must be >= 0, got {max_tool_rounds}")
        if max_concurrent_turns < 1:
            raise ValueError(f"max_concurrent_turns must be >= 1, got {max_concurrent_turns}")
        extra = tuple(tools)
        for tool in extra:
            if not isinstance(tool, AgentTool):
                raise TypeError(f"{tool!r} is not a tool: it needs name, schema() and async call()")
        names = [tool.name for tool in extra]
        if len(set(names)) != len(names):
            raise ValueError(f"extra tool names must be distinct, got {names}")
        super().__init__(jid, password, memory=memory, **agent_kwargs)
        reserved = {tool.name for tool in build_memory_tools(self.memory_config.categories)}
        clashes = sorted(reserved & set(names))
        if clashes:
            raise ValueError(
                f"extra tools reuse memory tool names: {', '.join(clashes)}; rename them"
            )
        self.llm: LLMClient = llm if llm is not None else ScriptedLLM()
        self.system_prompt = system_prompt
        self.template = template
        self.max_tool_rounds = max_tool_rounds
        self.history_turns = history_turns
        self.turn_timeout = turn_timeout
        self.max_concurrent_turns = max_concurrent_turns
        self._extra_tools = extra
        self._tools: tuple[AgentTool, ...] = ()
        self._conversation: ConversationBehaviour | None = None

    @property
    def tools(self) -> tuple[AgentTool, ...]:
        """The tools the LLM is offered: the memory tools, then the extra tools."""
        return self._tools

    @property
    def conversation(self) -> ConversationBehaviour:
        """The behaviour answering messages (set in ``setup()``).

        Raises:
            StoreClosedError: the agent has not started.
        """
        if self._conversation is None:
            raise StoreClosedError(f"agent {self.jid} has not started; await agent.start() first")
        return self._conversation

    async def _hook_plugin_after_connection(self, *args: Any, **kwargs: Any) -> None:
        """SPADE calls this once connected: run the next hook, then sync with the server."""
        following = getattr(super(), "_hook_plugin_after_connection", None)
        if following is not None:
            await following(*args, **kwargs)
        await self._presence_seen()

    async def _presence_seen(self) -> None:
        """Wait until the server has handled this session's first presence.

        SPADE sends the presence when the session starts but does not wait for
        it; until the server has it, messages to this agent's bare JID find no
        available session. A server answers a stream's stanzas in order, so a
        ping answered means the presence was handled.
        """
        client = self.client
        if client is None:
            return
        try:
            await client["xep_0199"].ping(timeout=PRESENCE_SYNC_SECONDS)
        except Exception as exc:  # an old server without ping: carry on
            logger.debug("%s: server ping after connecting failed: %r", self.jid, exc)

    async def setup(self) -> None:
        """Register the tools (memory tools once, by name) and the conversation behaviour."""
        await super().setup()
        memory_tools: list[AgentTool] = list(self.memory_tools)
        self._tools = (*memory_tools, *self._extra_tools)
        previous = self._conversation
        if previous is not None:
            previous.kill()
            if self.has_behaviour(previous) and not previous.is_running:
                self.remove_behaviour(previous)
        self._conversation = ConversationBehaviour(
            llm=self.llm,
            tools=self._tools,
            system_prompt=self.system_prompt,
            max_tool_rounds=self.max_tool_rounds,
            history_turns=self.history_turns,
            turn_timeout=self.turn_timeout,
            max_concurrent_turns=self.max_concurrent_turns,
            limiter=self.chat_limiter,
            disclosure=self.disclosure,
        )
        self.add_behaviour(self._conversation, self.template)

    def _bounced(self, msg: Message, condition: str) -> bool:
        """An XMPP error never reaches the chat: the server sent back a message of
        this agent's (its own words, not the partner's). The ask it answers fails."""
        conversation = self._conversation
        if conversation is not None:
            conversation.bounced(msg, condition)
        logger.debug("%s: an XMPP error (%s) sent back %s", self.jid, condition, msg)
        return True

    async def stop(self) -> None:
        """Stop answering (the turns under way and queued are cancelled, waiting asks
        fail), then stop the agent and close its memory."""
        conversation = self._conversation
        if conversation is not None:
            conversation.kill()
            await conversation.stop_answering()
        await super().stop()

    async def ask(self, to: str, text: str, *, timeout: float = 30.0, **kwargs: Any) -> Message:
        """Send ``text`` to agent ``to`` and wait for its answer.

        See :meth:`ConversationBehaviour.ask` for the keyword arguments. A tool
        may call it from inside this agent's LLM turn: answers are taken while
        turns run, and the wait counts against ``turn_timeout``.

        Raises:
            StoreClosedError: the agent is not running.
            TimeoutError: no answer within ``timeout`` seconds.
            AskFailed: the server sent the message back (no such agent, not
                reachable), or the agent stopped while waiting.
        """
        if not self.is_alive():
            raise StoreClosedError(f"agent {self.jid} is not running; start it before asking")
        return await self.conversation.ask(to, text, timeout=timeout, **kwargs)
