"""The behaviour answering memory queries and receiving shared memories over XMPP.

:class:`SharingResponder` receives every message of the sharing protocols
(:func:`~spade_memory.spade.sharing.protocol.protocol_template`). Answers to this
agent's own requests go to the waiting caller; requests are checked in this
order, and the first check that fails is the only answer:

1. the sender (the bare JID the server gave) passes the rate limit, else ``refuse``;
2. the agent listens to the sender (``ScopePolicy.senders``), and the sender may
   ask anything at all (queries) or is accepted (shares), else ``refuse`` —
   nothing about the body is revealed to it;
3. the body parses strictly, else ``failure`` with the reason;
4. the category is visible to the sender (queries) or kept by this memory
   (shares), else ``refuse``.

A query is answered with the best matches among the categories the sender may
see, and among those only the memories its viewer sees
(:class:`~spade_memory.disclosure.Disclosure`: never what another partner told
the agent privately), as :meth:`~spade_memory.manager.MemoryManager.recall` gives
them (only the live sentences of each memory), bounded by ``SharingConfig``
(results, characters per content, bytes). A share is stored with its provenance:
``source_sender`` is the sender, and the metadata holds ``shared_by``,
``shared_at`` and the sender's memory id and uid; it is scoped as anything the
sender tells the agent (``ScopePolicy.mode``: by default private to the sender).
No input makes the behaviour stop: an unexpected error is logged and answered
with ``failure``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from spade.behaviour import CyclicBehaviour
from spade.message import Message

from ...config import SharingConfig
from ...disclosure import Disclosure
from ...errors import InvalidAgentId, InvalidToolInput, ProtocolError
from ...identity import normalize_jid, thread_conversation_id
from .client import PendingAnswers
from .policy import SharingPolicy
from .protocol import (
    ANSWER_PERFORMATIVES,
    FAILURE,
    INFORM,
    PERFORMATIVE,
    PROTOCOL,
    QUERY_PROTOCOL,
    QUERY_REF,
    REFUSE,
    REQUEST,
    SHARE_PROTOCOL,
    SharedResult,
    build_answer,
    make_answer,
    parse_query,
    parse_shared_memory,
    reason_body,
    receipt_body,
)

if TYPE_CHECKING:
    from ...manager import MemoryManager
    from ...models import SearchResult

__all__ = ["SharingResponder"]

logger = logging.getLogger(__name__)


class SharingResponder(CyclicBehaviour):  # type: ignore[misc]
    """Answer memory queries and store accepted shared memories.

    Args:
        memory: returns the agent's open memory.
        config: who may ask what, and the limits of an answer.
        categories: the memory's categories.
        receive_timeout: seconds each wait for a message lasts before looping.
        clock: seconds, monotonic, for the rate limit.
        disclosure: who sees what; default: the policy of the memory's config.
    """

    def __init__(
        self,
        memory: Callable[[], MemoryManager],
        config: SharingConfig,
        categories: tuple[str, ...],
        *,
        receive_timeout: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        disclosure: Disclosure | None = None,
    ) -> None:
        super().__init__()
        self._memory = memory
        self._disclosure = disclosure
        self.config = config
        self.policy = SharingPolicy(config, categories, clock=clock)
        self.pending = PendingAnswers()
        self.receive_timeout = receive_timeout

    async def run(self) -> None:
        msg = await self.receive(timeout=self.receive_timeout)
        if msg is None or self.is_killed():
            return
        await self.handle(msg)

    @property
    def disclosure(self) -> Disclosure:
        """Who sees what: the policy given, else the one of the memory's config."""
        if self._disclosure is None:
            self._disclosure = Disclosure(self._memory().config)
        return self._disclosure

    async def on_end(self) -> None:
        self.pending.close()

    async def handle(self, msg: Message) -> None:
        """Route one protocol message: an answer to its caller, a request to its handler."""
        performative = msg.get_metadata(PERFORMATIVE)
        if performative in ANSWER_PERFORMATIVES:
            if not self.pending.resolve(msg):
                logger.debug("%s: dropping an answer nobody waits for: %s", self.agent.jid, msg)
            return
        try:
            sender = normalize_jid(msg.sender)
        except InvalidAgentId:
            logger.warning("dropping a memory-sharing message with no valid sender")
            return
        try:
            performative, body = await self._answer(msg, sender)
        except Exception as exc:
            logger.exception("%s: failed to answer %s", self.agent.jid, sender)
            performative = FAILURE
            body = reason_body(f"internal error ({type(exc).__name__}); try again later")
        try:
            await self.send(make_answer(msg, performative, body))
        except Exception:
            logger.exception("%s: could not send the answer to %s", self.agent.jid, sender)

    async def _answer(self, msg: Message, sender: str) -> tuple[str, str]:
        wait = self.policy.throttle(sender)
        if wait > 0:
            return REFUSE, reason_body(
                f"rate limit: too many memory requests; try again in {wait:.0f} s"
            )
        if not self.disclosure.admits(sender):
            return REFUSE, reason_body(f"this agent does not take messages from {sender}")
        protocol = msg.get_metadata(PROTOCOL)
        performative = msg.get_metadata(PERFORMATIVE)
        if protocol == QUERY_PROTOCOL:
            if not self.policy.may_query(sender):
                return REFUSE, reason_body(f"{sender} is not allowed to query this memory")
            if performative != QUERY_REF:
                return FAILURE, reason_body(
                    f"a memory query must have performative {QUERY_REF}, got {performative!r}"
                )
            return await self._query(msg, sender)
        if protocol == SHARE_PROTOCOL:
            if not self.policy.accepts_from(sender):
                return REFUSE, reason_body(f"this agent does not accept memories from {sender}")
            if performative != REQUEST:
                return FAILURE, reason_body(
                    f"a shared memory must have performative {REQUEST}, got {performative!r}"
                )
            return await self._store(msg, sender)
        return FAILURE, reason_body(f"unknown protocol {protocol!r}")

    # -- queries -----------------------------------------------------------------

    async def _query(self, msg: Message, sender: str) -> tuple[str, str]:
        try:
            query = parse_query(msg.body)
        except ProtocolError as exc:
            return FAILURE, reason_body(f"bad query: {exc}")
        visible = self.policy.visible_categories(sender)
        if query.category is not None:
            if query.category not in visible:
                return REFUSE, reason_body(f"category {query.category} is not shared with {sender}")
            visible = (query.category,)
        limit = min(query.limit, self.config.max_results)
        try:
            results = await self._search(query.query, visible, limit, sender)
        except InvalidToolInput as exc:
            return FAILURE, reason_body(f"bad query: {exc}")
        manager = self._memory()
        shared = [self._shared(manager.jid, result) for result in results]
        body = build_answer(
            shared,
            max_bytes=self.config.max_answer_bytes,
            max_chars=self.config.max_content_chars,
        )
        logger.info("%s: answered %s with %d memories", manager.jid, sender, len(shared))
        return INFORM, body

    async def _search(
        self, query: str, categories: tuple[str, ...], limit: int, sender: str
    ) -> list[SearchResult]:
        # recall, not search: a superseded or lapsed sentence is never shared; one
        # search over the visible categories, so that scores compare; only what the
        # sender's viewer sees (not in any conversation: no conversation memory)
        viewer = self.disclosure.viewer(sender)
        return await self._memory().recall(query, limit=limit, categories=categories, viewer=viewer)

    @staticmethod
    def _shared(owner: str, result: SearchResult) -> SharedResult:
        memory = result.memory
        provenance: dict[str, str | float | None] = {
            "owner": owner,
            "source_sender": memory.source_sender,
            "created_at": memory.created_at,
            "updated_at": memory.updated_at,
        }
        shared_by = memory.metadata.get("shared_by")
        if isinstance(shared_by, str):
            provenance["shared_by"] = shared_by
        return SharedResult(
            id=memory.id,
            category=memory.category,
            content=memory.content,
            score=round(float(result.score), 6),
            provenance=provenance,
        )

    # -- shares ------------------------------------------------------------------

    async def _store(self, msg: Message, sender: str) -> tuple[str, str]:
        manager = self._memory()
        try:
            shared = parse_shared_memory(
                msg.body, max_content_chars=manager.config.max_content_chars
            )
        except ProtocolError as exc:
            return FAILURE, reason_body(f"bad shared memory: {exc}")
        if shared.category not in manager.categories:
            return REFUSE, reason_body(
                f"this memory has no category {shared.category}; "
                f"its categories are {', '.join(manager.categories)}"
            )
        try:
            stored = await manager.store(
                shared.content,
                category=shared.category,
                context=shared.context,
                confidence=shared.confidence,
                importance=shared.importance,
                # the request's thread, bound to its sender: a thread is the sender's
                # choice, and must never name another's conversation here
                source_conversation=(
                    thread_conversation_id(manager.jid, sender, str(msg.thread))
                    if msg.thread
                    else None
                ),
                source_sender=sender,
                scope=self.disclosure.scope_for(sender),
                metadata={
                    "shared_by": sender,
                    "shared_at": manager.now(),
                    "shared_memory_id": shared.id,
                    "shared_memory_uid": shared.uid,
                    "shared_created_at": shared.created_at,
                },
            )
        except InvalidToolInput as exc:
            return FAILURE, reason_body(f"bad shared memory: {exc}")
        logger.info("%s: stored memory %d shared by %s", manager.jid, stored.id, sender)
        return INFORM, receipt_body(stored.id)
