"""The FIPA ``not-understood`` answer to a protocol message this agent does not speak.

A message carrying ``protocol`` metadata is a step of some protocol. The agent
routes it to the behaviours that speak it (the memory-sharing responder for the
``spade-memory`` protocols it knows, or a behaviour of the agent's own whose
template takes it); one that none of them takes reaches :class:`NotUnderstood`,
never the LLM conversation. It answers ``not-understood`` on the same protocol
and thread, with the reason in a JSON body ``{"reason": ...}``, so the sender
learns at once instead of waiting, and nothing the agent knows is given away.

An answer is never answered (performatives ``inform``, ``refuse``, ``failure``,
``not-understood``..., or ``in-reply-to`` set), so two agents cannot bounce
``not-understood`` between them; and each sender's answers take from a token
bucket (``ChatConfig``): past it, messages are dropped without an answer.
"""

from __future__ import annotations

import logging

from spade.behaviour import CyclicBehaviour
from spade.message import Message

from ..errors import InvalidAgentId
from ..identity import normalize_jid
from .rate_limit import RateLimiter
from .sharing.protocol import (
    IN_REPLY_TO,
    NOT_UNDERSTOOD,
    PERFORMATIVE,
    PROTOCOL,
    reason_body,
)

__all__ = ["NOT_UNDERSTOOD", "NotUnderstood", "carries_protocol", "is_answer"]

logger = logging.getLogger(__name__)

REPLY_WITH = "reply-with"
# Performatives that answer something: never answered in turn.
ANSWERS = frozenset(
    {
        "inform",
        "inform-if",
        "inform-ref",
        "confirm",
        "disconfirm",
        "agree",
        "refuse",
        "failure",
        "not-understood",
        "reject-proposal",
        "accept-proposal",
        "propose",
        "cancel",
    }
)


def carries_protocol(msg: Message) -> bool:
    """Whether ``msg`` names a protocol in its metadata."""
    protocol = msg.get_metadata(PROTOCOL)
    return isinstance(protocol, str) and bool(protocol.strip())


def is_answer(msg: Message) -> bool:
    """Whether ``msg`` answers something (so it must not be answered)."""
    performative = (msg.get_metadata(PERFORMATIVE) or "").strip().lower()
    return performative in ANSWERS or msg.get_metadata(IN_REPLY_TO) is not None


class NotUnderstood(CyclicBehaviour):  # type: ignore[misc]
    """Answer ``not-understood`` to the protocol messages the agent hands it.

    It takes no message by template (:meth:`match` is always ``False``): the
    agent's ``dispatch`` gives it the messages no other behaviour speaks.

    Args:
        limiter: the token bucket per sender these answers take from.
        receive_timeout: seconds each wait for a message lasts before looping.
    """

    def __init__(self, limiter: RateLimiter, *, receive_timeout: float = 1.0) -> None:
        super().__init__()
        self.limiter = limiter
        self.receive_timeout = receive_timeout

    def match(self, message: Message) -> bool:
        """Never: messages arrive only from the agent's ``dispatch``."""
        return False

    async def run(self) -> None:
        msg = await self.receive(timeout=self.receive_timeout)
        if msg is None or self.is_killed():
            return
        await self.handle(msg)

    async def handle(self, msg: Message) -> None:
        """Answer ``msg`` with ``not-understood``, unless it is an answer or over the limit."""
        protocol = msg.get_metadata(PROTOCOL)
        if is_answer(msg):
            logger.debug("%s: dropping an answer of protocol %r", self.agent.jid, protocol)
            return
        try:
            sender = normalize_jid(msg.sender)
        except InvalidAgentId:
            logger.debug("dropping a protocol message with no valid sender")
            return
        if self.limiter.take(sender) > 0:
            logger.debug("%s: %s is over its rate limit; no answer", self.agent.jid, sender)
            return
        reply = Message(to=str(msg.sender), thread=msg.thread)
        reply.body = reason_body(f"this agent does not speak protocol {protocol!r}")
        if protocol is not None:
            reply.set_metadata(PROTOCOL, protocol)
        reply.set_metadata(PERFORMATIVE, NOT_UNDERSTOOD)
        reply.set_metadata(IN_REPLY_TO, msg.get_metadata(REPLY_WITH) or msg.thread or "-")
        try:
            await self.send(reply)
        except Exception:
            logger.exception("%s: could not answer not-understood to %s", self.agent.jid, sender)
