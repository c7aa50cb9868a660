"""Asking another agent's memory, and sharing a memory with it: send, then await the answer.

Each request goes out on a fresh XMPP thread; :class:`PendingAnswers` hands the
answer on that thread to the caller waiting for it, but only when it comes from
the agent that was asked (the bare JID the server gave as its sender).

```python
answer = await agent.sharing.ask("bob@example.org", "release date", category="fact")
for result in answer.results:
    print(result.content, result.provenance["owner"])
stored_id = await agent.sharing.share("bob@example.org", memory_id=3)
```
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from spade.message import Message

from ...config import SharingConfig
from ...disclosure import Disclosure
from ...errors import (
    InvalidAgentId,
    ProtocolError,
    SharingError,
    SharingRefused,
    SharingTimeout,
    StoreClosedError,
)
from ...identity import normalize_jid
from .protocol import (
    FAILURE,
    INFORM,
    NOT_UNDERSTOOD,
    PERFORMATIVE,
    QUERY_PROTOCOL,
    QUERY_REF,
    REFUSE,
    REQUEST,
    SHARE_PROTOCOL,
    MemoryQuery,
    QueryAnswer,
    SharedMemory,
    make_request,
    parse_answer,
    parse_reason,
    parse_receipt,
)

if TYPE_CHECKING:
    from ...manager import MemoryManager
    from ...models import Viewer
    from ...tools import MemoryTool
    from .policy import SharingPolicy

__all__ = ["MemorySharing", "PendingAnswers"]

logger = logging.getLogger(__name__)

Send = Callable[[Message], Awaitable[None]]


class PendingAnswers:
    """The requests waiting for an answer, by thread id."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[str, asyncio.Future[Message]]] = {}

    def expect(self, thread: str, peer: str) -> asyncio.Future[Message]:
        """Register a request on ``thread`` to ``peer`` (a normalised bare JID)."""
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[thread] = (peer, future)
        return future

    def discard(self, thread: str) -> None:
        self._waiting.pop(thread, None)

    def resolve(self, msg: Message) -> bool:
        """Give ``msg`` to the request it answers; ``False`` if none waits for it."""
        entry = self._waiting.get(msg.thread or "")
        if entry is None:
            return False
        peer, future = entry
        try:
            sender = normalize_jid(msg.sender)
        except InvalidAgentId:
            return False
        if sender != peer:
            logger.warning(
                "dropping an answer on thread %s from %s: the question went to %s",
                msg.thread,
                sender,
                peer,
            )
            return False
        if not future.done():
            future.set_result(msg)
        return True

    def fail(self, thread: str, error: Exception) -> bool:
        """End the request on ``thread`` with ``error`` (its message could not be delivered)."""
        entry = self._waiting.get(thread)
        if entry is None or entry[1].done():
            return False
        entry[1].set_exception(error)
        return True

    def close(self) -> None:
        """Fail every waiting request: the agent is stopping."""
        for thread, (peer, future) in list(self._waiting.items()):
            if not future.done():
                future.set_exception(
                    StoreClosedError(f"the agent stopped while waiting for {peer} to answer")
                )
            self._waiting.pop(thread, None)


class MemorySharing:
    """This agent's side of the protocol: ask other memories, share memories with others.

    Args:
        jid: this agent's bare JID.
        config: the sharing configuration (timeouts, private categories, allow-lists).
        memory: returns this agent's open memory.
        send: sends a message from this agent (a behaviour's ``send``).
        pending: where answers are matched to the requests waiting for them.
    """

    def __init__(
        self,
        *,
        jid: str,
        config: SharingConfig,
        memory: Callable[[], MemoryManager],
        send: Send,
        pending: PendingAnswers,
        policy: SharingPolicy,
    ) -> None:
        self.jid = normalize_jid(jid)
        self.config = config
        self._policy = policy
        self._memory = memory
        self._send = send
        self._pending = pending
        self._tools: list[MemoryTool] | None = None

    def tools(self) -> list[MemoryTool]:
        """The LLM tools ``ask_agent_memory`` and ``share_memory`` bound to this agent."""
        if self._tools is None:
            from .tools import build_sharing_tools

            self._tools = build_sharing_tools(self)
        return list(self._tools)

    def _peer(self, agent: str) -> str:
        peer = normalize_jid(agent)
        if peer == self.jid:
            raise SharingError(
                f"{peer} is this agent itself; search your own memory with search_memories"
            )
        return peer

    async def _request(
        self, peer: str, protocol: str, performative: str, body: str, timeout: float | None
    ) -> Message:
        wait = self.config.ask_timeout_seconds if timeout is None else timeout
        msg = make_request(peer, protocol, performative, body)
        thread = str(msg.thread)
        future = self._pending.expect(thread, peer)
        try:
            await self._send(msg)
            async with asyncio.timeout(wait):
                answer = await future
        except TimeoutError:
            raise SharingTimeout(
                f"{peer} did not answer within {wait:g} s: it may not exist, be offline, "
                "or not share its memory; check the address or try again later"
            ) from None
        finally:
            self._pending.discard(thread)
        performative = answer.get_metadata(PERFORMATIVE) or ""
        if performative == REFUSE:
            raise SharingRefused(f"{peer} refused: {parse_reason(answer.body)}")
        if performative == FAILURE:
            raise SharingError(f"{peer} could not answer: {parse_reason(answer.body)}")
        if performative == NOT_UNDERSTOOD:
            raise SharingError(
                f"{peer} does not answer memory requests (not understood: "
                f"{parse_reason(answer.body)}); it may not share its memory"
            )
        if performative != INFORM:
            raise ProtocolError(f"{peer} answered with performative {performative!r}")
        return answer

    async def ask(
        self,
        agent: str,
        query: str,
        *,
        category: str | None = None,
        limit: int = 5,
        timeout: float | None = None,
    ) -> QueryAnswer:
        """Ask ``agent``'s memory for ``query``.

        Args:
            agent: the JID of the agent to ask.
            query: what to look for.
            category: only memories of this category (of the other agent's).
            limit: how many results at most (the owner may send fewer).
            timeout: seconds to wait; default ``config.ask_timeout_seconds``.

        Raises:
            InvalidAgentId: ``agent`` is not a JID.
            ProtocolError: the query is invalid, or the answer is malformed.
            SharingRefused: the agent refused (not allowed, private, rate limit).
            SharingTimeout: no answer in time.
            SharingError: the agent could not answer.
        """
        peer = self._peer(agent)
        body = MemoryQuery(query=query, category=category, limit=limit).to_body()
        answer = await self._request(peer, QUERY_PROTOCOL, QUERY_REF, body, timeout)
        try:
            parsed = parse_answer(answer.body)
        except ProtocolError as exc:
            raise ProtocolError(f"{peer} sent a malformed answer: {exc}") from None
        if len(parsed.results) <= limit:
            return parsed
        # an agent that sends more than asked for: what was asked for, no more
        extra = len(parsed.results) - limit
        return dataclasses.replace(
            parsed, results=parsed.results[:limit], truncated=True, omitted=parsed.omitted + extra
        )

    async def share(
        self,
        agent: str,
        memory_id: int,
        *,
        timeout: float | None = None,
        viewer: Viewer | None = None,
    ) -> int:
        """Send memory ``memory_id`` to ``agent``, which stores it if it accepts it.

        Only a memory ``agent`` may see is sent: of a category it may query (see
        ``SharingConfig.allow``), never a private category, and never what another
        partner told this agent privately (:class:`~spade_memory.disclosure.Disclosure`).

        Args:
            agent: the receiver's JID.
            memory_id: this agent's memory to send.
            timeout: seconds to wait for the receipt (default ``ask_timeout_seconds``).
            viewer: whom this share is made for (the partner of the conversation an
                LLM shares it in): it must see the memory too; ``None``: the agent.

        Returns:
            The id ``agent`` stored it under.

        Raises:
            MemoryNotFound: this agent has no such memory (or ``viewer`` does not see it).
            SharingRefused: this agent's policy forbids it, or ``agent`` refused.
            SharingTimeout: no answer in time.
            SharingError: ``agent`` could not store it.
        """
        peer = self._peer(agent)
        manager = self._memory()
        stored = await manager.get(memory_id, viewer=viewer)
        if stored.category in self.config.private_categories:
            raise SharingRefused(
                f"memory {memory_id} is in the private category {stored.category}, "
                "which is never shared"
            )
        if not self._policy.may_see(peer, stored.category):
            raise SharingRefused(
                f"{peer} may not see memories of category {stored.category} (it is not "
                "on that category's allow-list), so memory "
                f"{memory_id} is not shared with it"
            )
        if not Disclosure(manager.config).viewer(peer).sees(stored):
            raise SharingRefused(
                f"memory {memory_id} was told to this agent by someone else, privately; "
                f"it is not shared with {peer}"
            )
        # what a query would show of it: a superseded or lapsed sentence never leaves
        memory = await manager.recall_memory(memory_id)
        if memory is None:
            raise SharingRefused(
                f"memory {memory_id} is {stored.status} or none of its facts is current; "
                "it is not shared"
            )
        shared = SharedMemory(
            id=memory.id,
            uid=memory.uid,
            category=memory.category,
            content=memory.content,
            context=memory.context,
            confidence=memory.confidence,
            importance=memory.importance,
            created_at=memory.created_at,
        )
        answer = await self._request(peer, SHARE_PROTOCOL, REQUEST, shared.to_body(), timeout)
        try:
            return parse_receipt(answer.body)
        except ProtocolError as exc:
            raise ProtocolError(f"{peer} sent a malformed receipt: {exc}") from None
