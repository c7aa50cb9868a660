"""The conversation history of an agent: ``MemoryManager.history``.

Every message the agent takes in or sends in a conversation can be kept here (the
conversation behaviour keeps them by itself), in the agent's own database: on
disk with its memory, or in RAM in in-memory mode. Kept messages are formed into
memories in the background (:mod:`spade_memory.formation.service`). A conversation
keeps ``FormationConfig.max_messages`` messages; older ones go once formed.
"""

from __future__ import annotations

import builtins
import math
from typing import Any

from ..engine.engine import Engine
from ..engine.memory_input import check_jid
from ..errors import InvalidToolInput
from ..limits import LIMITS
from ..models import ROLES, ConversationInfo, ConversationMessage, Role
from ..validation import check_id, check_limit, check_optional_text, check_text
from .service import Formation

__all__ = ["ConversationHistory"]


def _conversation(value: Any) -> str:
    return check_text("conversation_id", value, max_chars=LIMITS.conversation_id_chars)


class ConversationHistory:
    """The kept conversations of one agent (``MemoryManager.history``)."""

    def __init__(self, engine: Engine, formation: Formation) -> None:
        self._engine = engine
        self._formation = formation

    async def append(
        self,
        conversation_id: str,
        *,
        role: Role,
        sender: str,
        text: str,
        message_id: str | None = None,
        at: float | None = None,
        peer: str | None = None,
    ) -> ConversationMessage:
        """Keep one message of a conversation; returns it once durably committed.

        Args:
            conversation_id: the conversation (an XMPP thread's, or the stable id of
                the two bare JIDs: ``conversation_id_for``).
            role: ``"user"`` for what the partner wrote, ``"assistant"`` for the
                agent's own message.
            sender: the JID of its writer (normalised to its bare JID).
            text: the body.
            message_id: the XMPP message id; a message kept already with the same
                id in this conversation is not kept twice (the kept one is returned).
            at: when it was written (seconds since the epoch); default now.
            peer: the partner of the conversation; default the sender of a
                ``"user"`` message. Needed for an ``"assistant"`` message that
                opens a conversation.

        Raises:
            InvalidToolInput: a value is invalid; nothing was kept.
        """
        self._engine.check_open()
        conversation_id = _conversation(conversation_id)
        if role not in ROLES:
            raise InvalidToolInput(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        sender = check_jid("sender", sender)
        text = check_text("text", text, max_chars=LIMITS.message_chars)
        message_id = check_optional_text(
            "message_id", message_id, max_chars=LIMITS.message_id_chars
        )
        when = self._engine.now() if at is None else _time(at)
        if peer is not None:
            peer = check_jid("peer", peer)
        elif role == "user":
            peer = sender
        else:
            known = await self._engine.conversations.info(conversation_id)
            if known is None:
                raise InvalidToolInput(
                    f"conversation {conversation_id!r} is new: name its partner with peer=..."
                )
            peer = known.peer
        message = await self._engine.conversations.append(
            conversation_id,
            peer=peer,
            role=role,
            sender=sender,
            text=text,
            at=when,
            message_id=message_id,
            keep=self._formation.config.max_messages,
            formed_floor=self._formation.forms(peer),
        )
        self._formation.kick(conversation_id)
        return message

    async def messages(
        self, conversation_id: str, *, limit: int | None = None
    ) -> builtins.list[ConversationMessage]:
        """The newest ``limit`` kept messages of a conversation (all when ``None``),
        oldest first; ``[]`` for a conversation not kept."""
        self._engine.check_open()
        conversation_id = _conversation(conversation_id)
        if limit is not None:
            limit = check_limit("limit", limit, low=1, high=LIMITS.list_limit * 1000)
        return await self._engine.conversations.messages(conversation_id, limit=limit)

    async def answer_to(self, message: ConversationMessage) -> ConversationMessage | None:
        """The agent's answer to a partner's ``message``: the message kept right after
        it, when that is the agent's own; ``None`` when it was not answered (yet)."""
        self._engine.check_open()
        following = await self._engine.conversations.following(message)
        if following is None or following.role != "assistant":
            return None
        return following

    async def recent(
        self, conversation_id: str, *, limit: int
    ) -> builtins.list[ConversationMessage]:
        """The newest ``limit`` messages since the conversation was last reset, oldest
        first (what a conversation replays to its LLM)."""
        self._engine.check_open()
        conversation_id = _conversation(conversation_id)
        limit = check_limit("limit", limit, low=1, high=LIMITS.list_limit * 1000)
        store = self._engine.conversations
        revision = await store.revision(conversation_id)
        if revision is None:
            return []
        return await store.messages(conversation_id, limit=limit, revision=revision)

    async def conversations(self, *, peer: str | None = None) -> builtins.list[ConversationInfo]:
        """Every kept conversation (with ``peer`` only, when given), the latest first."""
        self._engine.check_open()
        return await self._engine.conversations.conversations(
            peer=None if peer is None else check_jid("peer", peer)
        )

    async def info(self, conversation_id: str) -> ConversationInfo | None:
        """One kept conversation in numbers; ``None`` when it is not kept."""
        self._engine.check_open()
        return await self._engine.conversations.info(_conversation(conversation_id))

    async def reset(self, conversation_id: str) -> bool:
        """Start a conversation anew: what it replays starts empty, and its messages not
        yet formed into memories never will be (a window being formed is discarded).
        Kept messages and formed memories stay. ``False`` when it is not kept."""
        self._engine.check_open()
        revision = await self._engine.conversations.reset(
            _conversation(conversation_id), now=self._engine.now()
        )
        return revision is not None

    async def forget(self, conversation_id: str) -> int:
        """Forget a conversation: its messages, and the memories formed only from them
        with their graph rows, atoms and vectors (a memory also formed from another
        conversation, or only told again here, stays). A window being formed is
        discarded. Older backups still hold what was forgotten until they are
        removed (``MaintenanceConfig.backup_keep_days``).

        Returns:
            How many messages were forgotten (0 when it was not kept).
        """
        self._engine.check_open()
        engine = self._engine
        removed, memory_ids = await engine.conversations.forget(
            _conversation(conversation_id), agent=engine.jid
        )
        if memory_ids:
            if engine.indexer is not None:
                engine.indexer.remove(memory_ids)
            engine.notify_changed()
        return removed

    async def sources(self, memory_id: int) -> builtins.list[ConversationMessage]:
        """The kept messages a memory was formed from (or told again by), oldest first;
        ``[]`` for a memory not formed from a conversation."""
        self._engine.check_open()
        return await self._engine.conversations.sources(check_id(memory_id))

    async def source_ids(self, memory_ids: builtins.list[int]) -> dict[int, tuple[int, ...]]:
        """The ids of the messages each memory was formed from or told again by (also
        of messages no longer kept); memories without sources are left out."""
        self._engine.check_open()
        return await self._engine.conversations.source_ids([check_id(i) for i in memory_ids])


def _time(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidToolInput(f"at must be a time in seconds since the epoch, got {value!r}")
    if value < 0:
        raise InvalidToolInput(f"at must not be before 1970, got {value!r}")
    return float(value)
