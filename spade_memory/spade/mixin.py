"""MemoryMixin: give any SPADE agent class a long-term memory.

```python
from spade.agent import Agent
from spade_memory import MemoryConfig
from spade_memory.spade import MemoryMixin

class Planner(MemoryMixin, Agent):
    async def setup(self):
        await self.memory.store("Planning starts on Mondays", category="pattern")

planner = Planner("planner@example.org", "secret", memory=MemoryConfig(root="./memory"))
await planner.start()      # the memory opens before the agent connects
...
await planner.stop()       # the memory closes, even if stopping the agent fails
```

The memory opens in SPADE's ``_hook_plugin_before_connection`` hook, so it is
ready in ``setup()`` and in every behaviour, and closes in ``stop()``. The agent
also runs the memory's
:class:`~spade_memory.spade.maintenance_behaviour.MaintenanceBehaviour` (unless
``MemoryConfig.maintenance.behaviour`` is off); ``stop()`` ends it, waiting for a
run in progress, before the memory closes. With ``MemoryConfig.sharing`` set, the
agent also answers the memory-sharing protocol (:mod:`spade_memory.spade.sharing`),
exposes ``self.sharing`` and adds the tools ``ask_agent_memory`` and
``share_memory``; protocol messages reach only that responder, never the other
behaviours. A message of a protocol no behaviour speaks — a ``spade-memory``
protocol of another version, or with sharing off, or any ``protocol`` no behaviour's
template takes (the LLM conversation takes none) — is answered FIPA
``not-understood`` (:mod:`spade_memory.spade.not_understood`), within the per-sender
rate limit of ``MemoryConfig.chat``. The agent's web interface gains a "Memory"
entry (:mod:`spade_memory.web`) once ``agent.web.start(...)`` runs. The mixin cooperates with other
plugin mixins: it calls the next class's hooks and ``stop()`` through
``super()``. Put it before ``Agent`` in the bases.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..config import MemoryConfig
from ..disclosure import Disclosure
from ..errors import ConfigError, SharingError, StoreClosedError
from ..limits import LIMITS
from ..manager import MemoryManager
from ..web.agent_pages import AgentPages, add_memory_pages
from .maintenance_behaviour import MaintenanceBehaviour
from .not_understood import NotUnderstood, carries_protocol
from .rate_limit import RateLimiter
from .sharing.client import MemorySharing
from .sharing.protocol import is_memory_protocol, is_protocol_message, protocol_template
from .sharing.responder import SharingResponder

if TYPE_CHECKING:
    from ..tools import MemoryTool

__all__ = ["MemoryMixin"]

logger = logging.getLogger(__name__)


class MemoryMixin:
    """Adds ``self.memory`` (a :class:`~spade_memory.manager.MemoryManager`) to an agent.

    Args:
        *args: passed on to the next class (``Agent(jid, password, ...)``).
        memory: where and how this agent's memory is kept; default
            ``MemoryConfig()`` (the per-user data folder).
        **kwargs: passed on to the next class.
    """

    jid: Any
    if TYPE_CHECKING:  # provided by spade.agent.Agent

        def add_behaviour(self, behaviour: Any, template: Any = None) -> None: ...
        def remove_behaviour(self, behaviour: Any) -> None: ...
        def has_behaviour(self, behaviour: Any) -> bool: ...
        def submit(self, coro: Any) -> Any: ...

        behaviours: list[Any]
        traces: Any

    def __init__(self, *args: Any, memory: MemoryConfig | None = None, **kwargs: Any) -> None:
        if memory is not None and not isinstance(memory, MemoryConfig):
            raise TypeError(f"memory must be a MemoryConfig, got {type(memory).__name__}")
        self._memory_config = memory if memory is not None else MemoryConfig()
        self._memory_manager: MemoryManager | None = None
        self._maintenance_behaviour: MaintenanceBehaviour | None = None
        self._sharing: MemorySharing | None = None
        self._sharing_responder: SharingResponder | None = None
        self.disclosure = Disclosure(self._memory_config)
        """Who sees what of this agent's memory (``MemoryConfig.scope`` and ``sharing``)."""
        chat = self._memory_config.chat
        self.chat_limiter = RateLimiter(rate_per_minute=chat.rate_per_minute, burst=chat.burst)
        """The per-sender token bucket of chat messages and ``not-understood`` answers."""
        self._not_understood: NotUnderstood | None = None
        super().__init__(*args, **kwargs)
        self.memory_pages: AgentPages | None = add_memory_pages(self, lambda: self.memory)
        """The memory pages of the agent's web interface ("Memory" in its menu, under
        ``/spade/memory``; served once ``agent.web.start(...)`` runs); ``None`` when the
        agent has no web interface."""

    @property
    def memory_config(self) -> MemoryConfig:
        """The configuration the memory opens with."""
        return self._memory_config

    @property
    def memory(self) -> MemoryManager:
        """The agent's memory, open while the agent runs.

        Raises:
            StoreClosedError: the agent has not started yet, or has stopped.
        """
        manager = self._memory_manager
        if manager is None or manager.closed:
            raise StoreClosedError(
                f"the memory of agent {self.jid} is not open: it opens when the agent "
                "starts (await agent.start()) and closes when it stops"
            )
        return manager

    @property
    def memory_tools(self) -> list[MemoryTool]:
        """The LLM memory tools bound to this agent's memory.

        Raises:
            StoreClosedError: the agent is not running.
        """
        tools = self.memory.tools()
        if self._sharing is not None:
            tools.extend(self._sharing.tools())
        return tools

    @property
    def sharing(self) -> MemorySharing:
        """Ask other agents' memories and share memories with them (see ``SharingConfig``).

        Raises:
            ConfigError: ``MemoryConfig.sharing`` is not set.
            StoreClosedError: the agent is not running.
        """
        if self._memory_config.sharing is None:
            raise ConfigError(
                f"memory sharing is off for {self.jid}: set MemoryConfig(sharing=SharingConfig())"
            )
        self.memory  # noqa: B018  (raises when the memory is not open)
        assert self._sharing is not None
        return self._sharing

    async def _hook_plugin_before_connection(self, *args: Any, **kwargs: Any) -> None:
        """SPADE calls this before connecting: run the next hook, then open the memory."""
        following = getattr(super(), "_hook_plugin_before_connection", None)
        if following is not None:
            await following(*args, **kwargs)
        if self._memory_manager is None or self._memory_manager.closed:
            self._memory_manager = await MemoryManager.open(self.jid, self._memory_config)
            logger.info("memory of %s opened", self._memory_manager.jid)
        maintenance = self._memory_config.maintenance
        if maintenance.behaviour and self._maintenance_behaviour is None:
            self._maintenance_behaviour = MaintenanceBehaviour(
                lambda: self.memory, period=maintenance.tick_seconds
            )
            self.add_behaviour(self._maintenance_behaviour)  # started with the agent
        sharing = self._memory_config.sharing
        if sharing is not None and self._sharing_responder is None:
            responder = SharingResponder(
                lambda: self.memory,
                sharing,
                self._memory_config.categories,
                disclosure=self.disclosure,
            )
            self._sharing_responder = responder
            self._sharing = MemorySharing(
                jid=str(self.jid),
                config=sharing,
                memory=lambda: self.memory,
                send=responder.send,
                pending=responder.pending,
                policy=responder.policy,
            )
            self.add_behaviour(responder, protocol_template())
        if self._not_understood is None:
            self._not_understood = NotUnderstood(self.chat_limiter)
            self.add_behaviour(self._not_understood)

    def dispatch(self, msg: Any) -> list[Any]:
        """Route a message: memory-sharing ones to the sharing responder, other protocol
        messages to the behaviours that speak them, the rest as SPADE does.

        A protocol message nobody speaks goes to the ``not-understood`` answerer.
        """
        if is_memory_protocol(msg):
            responder = self._sharing_responder
            if responder is not None and is_protocol_message(msg):
                return [self.submit(responder.enqueue(msg))]
            return self._not_understood_by_all(msg)
        if not carries_protocol(msg):
            return super().dispatch(msg)  # type: ignore[misc,no-any-return]
        takers = [
            behaviour
            for behaviour in self.behaviours
            if getattr(behaviour, "takes_protocol_messages", True) and behaviour.match(msg)
        ]
        if not takers:
            return self._not_understood_by_all(msg)
        tasks = []
        for behaviour in takers:
            tasks.append(self.submit(behaviour.enqueue(msg)))
            self.traces.append(msg, category=str(behaviour))
        return tasks

    def _not_understood_by_all(self, msg: Any) -> list[Any]:
        answerer = self._not_understood
        if answerer is None:
            logger.debug("%s: not started; dropping %s", self.jid, msg)
            return []
        return [self.submit(answerer.enqueue(msg))]

    def _message_received(self, stanza: Any) -> list[Any]:
        """An XMPP error bouncing a sharing request ends that request; others go on.

        Every other message is dispatched as SPADE does, with the stanza's id as its
        ``xmpp_id`` (``None`` when it has none).
        """
        if stanza["type"] == "error":
            from spade.message import Message

            msg = Message.from_node(stanza)
            if is_protocol_message(msg):
                responder = self._sharing_responder
                if responder is not None and msg.thread:
                    condition = stanza["error"]["condition"] or "error"
                    responder.pending.fail(
                        msg.thread,
                        SharingError(
                            f"{msg.sender.bare} could not be reached ({condition}): "
                            "check the address; the agent may not exist or be offline"
                        ),
                    )
                return []
            if self._bounced(msg, str(stanza["error"]["condition"] or "error")):
                return []
            return super()._message_received(stanza)  # type: ignore[misc,no-any-return]
        from spade.message import Message

        msg = Message.from_node(stanza)
        # SPADE's message drops the stanza's id; the conversation store keeps it, so a
        # message delivered twice is kept once
        msg.xmpp_id = str(stanza["id"] or "")[: LIMITS.message_id_chars] or None
        return self.dispatch(msg)

    def _bounced(self, msg: Any, condition: str) -> bool:
        """An XMPP error sent back ``msg`` (not a sharing message): ``True`` when it was
        handled here and goes to no behaviour. Here it goes on to SPADE's dispatch
        as before; :class:`~spade_memory.spade.llm_agent.LLMAgent` ends the ask it
        answers and keeps every such error from its chat."""
        return False

    async def start(self, *args: Any, **kwargs: Any) -> None:
        """Start the agent; if starting fails, the memory it opened is closed again."""
        try:
            await super().start(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            await self._close_memory()
            raise

    async def stop(self) -> None:
        """Stop the agent, then close its memory (also when stopping the agent fails)."""
        try:
            await super().stop()  # type: ignore[misc]
        finally:
            await self._close_memory()

    async def _close_memory(self) -> None:
        answerer, self._not_understood = self._not_understood, None
        if answerer is not None:
            answerer.kill()
            if self.has_behaviour(answerer) and not answerer.is_running:
                self.remove_behaviour(answerer)
        responder, self._sharing_responder, self._sharing = self._sharing_responder, None, None
        if responder is not None:
            responder.kill()
            responder.pending.close()
            if self.has_behaviour(responder) and not responder.is_running:
                self.remove_behaviour(responder)
        behaviour, self._maintenance_behaviour = self._maintenance_behaviour, None
        if behaviour is not None:
            await behaviour.stop()  # a run in progress is cancelled and awaited
            if self.has_behaviour(behaviour):
                self.remove_behaviour(behaviour)
        manager, self._memory_manager = self._memory_manager, None
        if manager is not None and not manager.closed:
            await manager.aclose()
            logger.info("memory of %s closed", manager.jid)
