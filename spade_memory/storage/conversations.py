"""The conversation store: the messages of each conversation an agent takes part in.

It lives in the agent's base-memory database (so it shares its isolation, its
durability, its in-memory mode and its one write path). Three tables (schema v9):

- ``conversations``: one row per conversation id, with the partner (``peer``), a
  ``revision`` (a reset starts the next one) and ``formed_through``, the cursor of
  memory formation: the id of the last message formed into memories;
- ``conversation_messages``: the messages, ids growing (never reused);
- ``memory_sources``: the messages each formed memory came from. They never enter
  retrieval; they let a reader see where a memory came from, and let forgetting a
  conversation find what was formed only from it.

A window of messages formed into memories commits in one transaction with its
memories, their sources and the moved cursor (:class:`FormedWindow`), after checking
that the conversation is still at the revision and cursor the window was read at:
a crash loses no window and forms none twice, and a conversation reset or forgotten
meanwhile discards the window.
"""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..models import ConversationInfo, ConversationMessage, Role
from .memory_writes import InsertTransaction, delete_rows
from .sql import chunks, placeholders

if TYPE_CHECKING:
    from .base import BaseMemoryStore

__all__ = [
    "ConversationStore",
    "FormedWindow",
    "HistoryExport",
    "ImportedSource",
    "Pending",
]

_MESSAGE_COLUMNS = (
    "m.id, c.conversation_id, m.role, m.sender, m.text, m.at, m.message_id, m.revision"
)
_SESSION = (
    "INSERT INTO conversations (conversation_id, peer, created_at, updated_at) "
    "VALUES (?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
    "updated_at = max(updated_at, excluded.updated_at) "
    "RETURNING id, revision, formed_through"
)
_INSERT_MESSAGE = (
    "INSERT OR IGNORE INTO conversation_messages "
    "(session_id, revision, role, sender, text, at, message_id) VALUES (?, ?, ?, ?, ?, ?, ?) "
    "RETURNING id"
)
# A message without an XMPP id kept already: the same writer, words and time.
_SAME_MESSAGE = (
    "SELECT id FROM conversation_messages WHERE session_id = ? AND message_id IS NULL "
    "AND role = ? AND sender = ? AND text = ? AND at = ? LIMIT 1"
)
_SERIALS_TRIED = 1_000


def _serial(kept: str | None, message_id: str) -> int:
    """N of a message kept as ``"id#N"`` (1 for the id itself, or another)."""
    tail = (kept or "")[len(message_id) + 1 :]
    return int(tail) if tail.isdigit() and len(tail) < 10 else 1


# The messages kept under an XMPP id: the first, then "id#2", "id#3" ... (not LIKE:
# an id may hold "%" or "_").
_UNDER_XMPP_ID = (
    f"SELECT {_MESSAGE_COLUMNS} FROM conversation_messages AS m "
    "JOIN conversations AS c ON c.id = m.session_id WHERE m.session_id = ? "
    "AND (m.message_id = ? OR substr(m.message_id, 1, ?) = ?) ORDER BY m.id"
)
# The oldest messages past the newest ``keep`` of a conversation, formed already
# (id <= the cursor): through the (session_id, id) index, no count of the rest.
_PRUNE = (
    "DELETE FROM conversation_messages WHERE session_id = ? AND id <= ? AND id < "
    "(SELECT id FROM conversation_messages WHERE session_id = ? ORDER BY id DESC "
    "LIMIT 1 OFFSET ?)"
)
# What was formed from this conversation only: a formed source here, none elsewhere.
_FORMED_ONLY_HERE = (
    "SELECT DISTINCT s.memory_id FROM memory_sources AS s WHERE s.session_id = ? "
    "AND s.formed = 1 AND NOT EXISTS (SELECT 1 FROM memory_sources AS o "
    "WHERE o.memory_id = s.memory_id AND o.session_id != s.session_id)"
)
_FORMED_ELSEWHERE_NOW = (
    "UPDATE memory_sources SET formed = 1 WHERE session_id != ? AND formed = 0 "
    "AND memory_id IN (SELECT memory_id FROM memory_sources WHERE session_id = ? AND formed = 1)"
)
_INFO = (
    "SELECT c.conversation_id, c.peer, c.revision, c.formed_through, "
    "(SELECT count(*) FROM conversation_messages WHERE session_id = c.id), "
    "(SELECT min(at) FROM conversation_messages WHERE session_id = c.id), "
    "(SELECT max(at) FROM conversation_messages WHERE session_id = c.id), "
    "(SELECT count(*) FROM conversation_messages WHERE session_id = c.id "
    "AND id > c.formed_through AND revision = c.revision) FROM conversations AS c"
)


_LATEST_FIRST = " ORDER BY c.updated_at DESC, c.id DESC"


@dataclass(frozen=True, slots=True)
class HistoryExport:
    """The kept conversations as plain data, and where each memory came from.

    Attributes:
        conversations: each conversation's id, partner and messages, oldest first.
        sources: per memory id, its sources: ``conversation_id``, ``message`` (the
            message's position in its conversation's ``messages``; ``None`` when
            retention dropped it) and ``formed`` (formed from it, or told again).
    """

    conversations: list[dict[str, Any]]
    sources: dict[int, list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class ImportedSource:
    """A memory's source from an export, its memory found here.

    Attributes:
        memory_id: the memory, here.
        conversation_id: the conversation it came from.
        message: the message's position in that conversation's exported messages,
            ``None`` when it was dropped by retention before the export.
        formed: formed from the message (else told again by it).
    """

    memory_id: int
    conversation_id: str
    message: int | None
    formed: bool


def _message(row: Sequence[Any]) -> ConversationMessage:
    return ConversationMessage(
        id=int(row[0]),
        conversation_id=str(row[1]),
        role=cast(Role, str(row[2])),
        sender=str(row[3]),
        text=str(row[4]),
        at=float(row[5]),
        message_id=None if row[6] is None else str(row[6]),
        revision=int(row[7]),
    )


def _info(row: Sequence[Any]) -> ConversationInfo:
    return ConversationInfo(
        conversation_id=str(row[0]),
        peer=str(row[1]),
        revision=int(row[2]),
        formed_through=int(row[3]),
        messages=int(row[4]),
        first_at=None if row[5] is None else float(row[5]),
        last_at=None if row[6] is None else float(row[6]),
        pending=int(row[7]),
    )


def _kept_already(
    db: sqlite3.Connection, session_id: int, message: Mapping[str, Any]
) -> int | None:
    """The id of an exported message kept here already: the same XMPP id, or without
    one the same role, sender, text and time; ``None`` when it is new."""
    if message["message_id"] is not None:
        row = db.execute(
            "SELECT id FROM conversation_messages WHERE session_id = ? AND message_id = ?",
            (session_id, message["message_id"]),
        ).fetchone()
    else:
        row = db.execute(
            _SAME_MESSAGE,
            (session_id, message["role"], message["sender"], message["text"], float(message["at"])),
        ).fetchone()
    return None if row is None else int(row[0])


def _prune(db: sqlite3.Connection, session_id: int, through: int, keep: int) -> int:
    """Drop the oldest messages of a conversation past the newest ``keep``, only those
    with ids up to ``through``; how many went."""
    return int(db.execute(_PRUNE, (session_id, through, session_id, keep - 1)).rowcount)


@dataclass(frozen=True, slots=True)
class Pending:
    """The messages of a conversation not yet formed into memories, as read at one time.

    Attributes:
        session_id: the conversation's row.
        revision: its revision when read.
        formed_through: its cursor when read.
        peer: the partner of the conversation.
        messages: the messages after the cursor, oldest first.
    """

    session_id: int
    revision: int
    formed_through: int
    peer: str
    messages: tuple[ConversationMessage, ...]


# The window's last message is still kept, in that conversation at that revision.
# Message ids are never reused (AUTOINCREMENT), but a forgotten conversation's row id
# is: the next new conversation takes it at revision 1, cursor 0, as it was.
_WINDOW_KEPT = (
    "SELECT 1 FROM conversation_messages WHERE id = ? AND session_id = ? AND revision = ?"
)


@dataclass(slots=True)
class FormedWindow:
    """The transaction that commits a window formed into memories.

    Inside one transaction: the conversation must still be at ``revision`` with its
    cursor at ``formed_through`` and still hold the message ``through`` (else nothing
    is written and the call returns ``None``); then the memories (``insert``, may be
    ``None`` for a window that gave none), a source row per memory and message
    (``sources``: one tuple of message ids per item of ``insert``), the cursor moved
    to ``through``, and the oldest formed messages past ``keep`` dropped.
    """

    session_id: int
    revision: int
    formed_through: int
    through: int
    insert: InsertTransaction | None
    sources: Sequence[tuple[int, ...]]
    keep: int

    def __call__(self, db: sqlite3.Connection) -> list[int] | None:
        row = db.execute(
            "SELECT revision, formed_through FROM conversations WHERE id = ?", (self.session_id,)
        ).fetchone()
        if row is None or int(row[0]) != self.revision or int(row[1]) != self.formed_through:
            return None  # reset, forgotten or formed by another writer meanwhile
        kept = db.execute(_WINDOW_KEPT, (self.through, self.session_id, self.revision))
        if kept.fetchone() is None:
            return None  # forgotten, its row id since given to a new conversation
        ids: list[int] = []
        if self.insert is not None:
            (before,) = db.execute(
                "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'memories'"
            ).fetchone()
            ids = self.insert(db)
            rows = [
                (memory_id, message, self.session_id, int(memory_id > int(before)))
                for memory_id, messages in zip(ids, self.sources, strict=True)
                for message in messages
            ]
            db.executemany(
                "INSERT OR IGNORE INTO memory_sources (memory_id, message_id, session_id, formed) "
                "VALUES (?, ?, ?, ?)",
                rows,
            )
        db.execute(
            "UPDATE conversations SET formed_through = ? WHERE id = ?",
            (self.through, self.session_id),
        )
        _prune(db, self.session_id, self.through, self.keep)
        return ids


class ConversationStore:
    """The conversations of one agent, kept in its base-memory database.

    Args:
        base: the agent's base store (its connection, its writer).
    """

    def __init__(self, base: BaseMemoryStore) -> None:
        self._base = base

    async def append(
        self,
        conversation_id: str,
        *,
        peer: str,
        role: Role,
        sender: str,
        text: str,
        at: float,
        message_id: str | None,
        keep: int,
        formed_floor: bool,
    ) -> ConversationMessage:
        """Keep one message. A message whose XMPP id is kept already with the same
        role, sender and text is that message delivered again: it is returned as kept;
        another one under the same id is kept under ``"id#2"``, ``"id#3"`` ...

        The oldest messages past the newest ``keep`` go in the same transaction:
        with ``formed_floor``, only those formed into memories already.
        """

        def work(db: sqlite3.Connection) -> ConversationMessage:
            session_id, revision, formed_through = db.execute(
                _SESSION, (conversation_id, peer, at, at)
            ).fetchone()
            kept_id = message_id
            row = db.execute(
                _INSERT_MESSAGE,
                (session_id, revision, role, sender, text, at, message_id),
            ).fetchone()
            if row is None:  # a message with this XMPP id is kept already
                # Ids are unique within one XMPP stream only (a client numbering its
                # messages starts again after a reconnect): each other message under
                # the id is kept as "id#2", "id#3" ..., and one of them delivered again
                # (the same role, sender and text) is that message.
                assert message_id is not None
                under = [
                    _message(found)
                    for found in db.execute(
                        _UNDER_XMPP_ID,
                        (session_id, message_id, len(message_id) + 1, message_id + "#"),
                    )
                ]
                for kept in under:
                    if (kept.role, kept.sender, kept.text) == (role, sender, text):
                        return kept  # the same message, delivered again
                serial = max((_serial(k.message_id, message_id) for k in under), default=1)
                kept_id, row = None, None
                while row is None and serial < _SERIALS_TRIED:  # "id#N" taken by a client
                    serial += 1
                    kept_id = f"{message_id}#{serial}"
                    row = db.execute(
                        _INSERT_MESSAGE, (session_id, revision, role, sender, text, at, kept_id)
                    ).fetchone()
                if row is None:  # kept without an id, never refused
                    kept_id = None
                    row = db.execute(
                        _INSERT_MESSAGE, (session_id, revision, role, sender, text, at, None)
                    ).fetchone()
            message = ConversationMessage(
                id=int(row[0]),
                conversation_id=conversation_id,
                role=role,
                sender=sender,
                text=text,
                at=at,
                message_id=kept_id,
                revision=int(revision),
            )
            _prune(db, int(session_id), int(formed_through) if formed_floor else message.id, keep)
            return message

        return await self._base.run_write(work, "keeping a conversation message")

    async def messages(
        self,
        conversation_id: str,
        *,
        limit: int | None = None,
        revision: int | None = None,
        after: int = 0,
    ) -> builtins.list[ConversationMessage]:
        """The newest ``limit`` kept messages (all when ``None``), oldest first; only
        those of ``revision`` when given, only those with ids above ``after``."""
        sql = (
            f"SELECT {_MESSAGE_COLUMNS} FROM conversation_messages AS m "
            "JOIN conversations AS c ON c.id = m.session_id "
            "WHERE c.conversation_id = ? AND m.id > ?"
        )
        params: list[Any] = [conversation_id, after]
        if revision is not None:
            sql += " AND m.revision = ?"
            params.append(revision)
        sql += " ORDER BY m.id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = await self._base.fetchall(sql, params)
        return [_message(row) for row in reversed(rows)]

    async def following(self, message: ConversationMessage) -> ConversationMessage | None:
        """The message kept right after ``message`` in its conversation, or ``None``."""
        rows = await self._base.fetchall(
            f"SELECT {_MESSAGE_COLUMNS} FROM conversation_messages AS m "
            "JOIN conversations AS c ON c.id = m.session_id "
            "WHERE c.conversation_id = ? AND m.id > ? ORDER BY m.id LIMIT 1",
            (message.conversation_id, message.id),
        )
        return _message(rows[0]) if rows else None

    async def revision(self, conversation_id: str) -> int | None:
        """The conversation's revision, ``None`` when it is not kept."""
        rows = await self._base.fetchall(
            "SELECT revision FROM conversations WHERE conversation_id = ?", (conversation_id,)
        )
        return int(rows[0][0]) if rows else None

    async def conversations(self, *, peer: str | None = None) -> builtins.list[ConversationInfo]:
        """Every kept conversation (of ``peer`` only, when given), the latest first."""
        sql, params = _INFO, []
        if peer is not None:
            sql += " WHERE c.peer = ?"
            params.append(peer)
        rows = await self._base.fetchall(sql + _LATEST_FIRST, params)
        return [_info(row) for row in rows]

    async def info(self, conversation_id: str) -> ConversationInfo | None:
        """One conversation in numbers, ``None`` when it is not kept."""
        rows = await self._base.fetchall(_INFO + " WHERE c.conversation_id = ?", (conversation_id,))
        return _info(rows[0]) if rows else None

    async def with_pending(self) -> builtins.list[str]:
        """The conversations with messages not yet formed into memories."""
        rows = await self._base.fetchall(
            "SELECT c.conversation_id FROM conversations AS c WHERE EXISTS (SELECT 1 FROM "
            "conversation_messages AS m WHERE m.session_id = c.id AND m.id > c.formed_through) "
            "ORDER BY c.updated_at",
        )
        return [str(row[0]) for row in rows]

    async def pending(self, conversation_id: str) -> Pending | None:
        """The messages of the conversation not yet formed, with its revision and cursor
        as read together; ``None`` when it is not kept. A message of an earlier
        revision is never formed (set aside by a reset, here or where it was
        imported from), wherever it stands."""

        def read(db: sqlite3.Connection) -> Pending | None:
            row = db.execute(
                "SELECT id, revision, formed_through, peer FROM conversations "
                "WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            if row is None:
                return None
            session_id, revision, formed_through, peer = row
            messages = db.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM conversation_messages AS m "
                "JOIN conversations AS c ON c.id = m.session_id "
                "WHERE m.session_id = ? AND m.id > ? AND m.revision = ? ORDER BY m.id",
                (session_id, formed_through, revision),
            ).fetchall()
            return Pending(
                int(session_id),
                int(revision),
                int(formed_through),
                str(peer),
                tuple(_message(message) for message in messages),
            )

        return await self._base.run_read(read)

    async def commit_window(self, window: FormedWindow) -> list[int] | None:
        """Commit a formed window (see :class:`FormedWindow`); its memory ids, or
        ``None`` when the conversation moved on and nothing was written."""
        return await self._base.run_write(window, "forming memories")

    async def reset(self, conversation_id: str, *, now: float) -> int | None:
        """Start the conversation anew: the next revision, and its messages not yet
        formed will never be (a window being formed is discarded). Its messages and
        what was formed stay. The new revision, ``None`` when it is not kept."""

        def work(db: sqlite3.Connection) -> int | None:
            row = db.execute(
                "UPDATE conversations SET revision = revision + 1, updated_at = ?, "
                "formed_through = max(formed_through, coalesce((SELECT max(id) FROM "
                "conversation_messages WHERE session_id = conversations.id), 0)) "
                "WHERE conversation_id = ? RETURNING revision",
                (now, conversation_id),
            ).fetchone()
            return None if row is None else int(row[0])

        return await self._base.run_write(work, "resetting a conversation")

    async def forget(self, conversation_id: str, *, agent: str) -> tuple[int, list[int]]:
        """Remove the conversation, its messages and the memories formed only from it
        (with their graphs, atoms, vectors and sources), in one transaction.

        Returns:
            How many messages went, and the ids of the memories that went.
        """

        def work(db: sqlite3.Connection) -> tuple[int, list[int]]:
            row = db.execute(
                "SELECT id FROM conversations WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()
            if row is None:
                return 0, []
            session_id = int(row[0])
            doomed = [int(found[0]) for found in db.execute(_FORMED_ONLY_HERE, (session_id,))]
            gone = [memory_id for memory_id in doomed if delete_rows(memory_id, agent, db)]
            # A memory formed here that another conversation told again stays, for
            # what that one said: it is formed from that one now, and goes with it.
            db.execute(_FORMED_ELSEWHERE_NOW, (session_id, session_id))
            messages = db.execute(
                "DELETE FROM conversation_messages WHERE session_id = ?", (session_id,)
            ).rowcount
            db.execute("DELETE FROM memory_sources WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM conversations WHERE id = ?", (session_id,))
            return int(messages), gone

        return await self._base.run_write(work, "forgetting a conversation")

    async def source_ids(self, memory_ids: Sequence[int]) -> dict[int, tuple[int, ...]]:
        """The ids of the messages each memory was formed from or told again by
        (memories without sources are left out)."""
        found: dict[int, list[int]] = {}
        for chunk in chunks(list(memory_ids)):
            rows = await self._base.fetchall(
                "SELECT memory_id, message_id FROM memory_sources WHERE message_id > 0 "
                f"AND memory_id IN ({placeholders(len(chunk))}) ORDER BY memory_id, message_id",
                chunk,
            )
            for memory_id, message_id in rows:
                found.setdefault(int(memory_id), []).append(int(message_id))
        return {memory_id: tuple(ids) for memory_id, ids in found.items()}

    async def sources(self, memory_id: int) -> builtins.list[ConversationMessage]:
        """The kept messages a memory was formed from or told again by, oldest first
        (a message dropped by retention is no longer there)."""
        rows = await self._base.fetchall(
            f"SELECT {_MESSAGE_COLUMNS} FROM memory_sources AS s "
            "JOIN conversation_messages AS m ON m.id = s.message_id "
            "JOIN conversations AS c ON c.id = m.session_id "
            "WHERE s.memory_id = ? ORDER BY m.id",
            (memory_id,),
        )
        return [_message(row) for row in rows]

    async def export(self) -> HistoryExport:
        """Every conversation with its messages, the oldest conversation first, and where
        each memory came from, as plain data (for export), read in one consistent view.

        A message is ``formed`` when it is at or before the cursor: formed into
        memories, or set aside by a reset, never to be formed. A source names its
        conversation and the message's position among that conversation's exported
        messages (``None`` when retention dropped the message).
        """

        def work(db: sqlite3.Connection) -> HistoryExport:
            conversations: list[dict[str, Any]] = []
            positions: dict[int, tuple[str, dict[int, int]]] = {}
            for info in reversed([_info(row) for row in db.execute(_INFO + _LATEST_FIRST)]):
                rows = db.execute(
                    f"SELECT {_MESSAGE_COLUMNS} FROM conversation_messages AS m "
                    "JOIN conversations AS c ON c.id = m.session_id "
                    "WHERE c.conversation_id = ? ORDER BY m.id",
                    (info.conversation_id,),
                ).fetchall()
                messages = [_message(row) for row in rows]
                conversations.append(
                    {
                        "conversation_id": info.conversation_id,
                        "peer": info.peer,
                        "messages": [
                            {
                                "role": message.role,
                                "sender": message.sender,
                                "text": message.text,
                                "at": message.at,
                                "message_id": message.message_id,
                                "formed": message.id <= info.formed_through,
                                "before_reset": message.revision < info.revision,
                            }
                            for message in messages
                        ],
                    }
                )
                (session_id,) = db.execute(
                    "SELECT id FROM conversations WHERE conversation_id = ?",
                    (info.conversation_id,),
                ).fetchone()
                positions[int(session_id)] = (
                    info.conversation_id,
                    {message.id: at for at, message in enumerate(messages)},
                )
            sources: dict[int, list[dict[str, Any]]] = {}
            for memory_id, message_id, session_id, formed in db.execute(
                "SELECT memory_id, message_id, session_id, formed FROM memory_sources "
                "ORDER BY memory_id, message_id"
            ):
                if int(session_id) not in positions:
                    continue
                conversation_id, at = positions[int(session_id)]
                sources.setdefault(int(memory_id), []).append(
                    {
                        "conversation_id": conversation_id,
                        "message": at.get(int(message_id)),
                        "formed": bool(formed),
                    }
                )
            return HistoryExport(conversations=conversations, sources=sources)

        return await self._base.run_read(work)

    async def import_messages(
        self,
        conversations: Sequence[Mapping[str, Any]],
        sources: Sequence[ImportedSource] = (),
    ) -> int:
        """Add exported conversations (checked by the caller), and the sources of the
        memories formed from them, in one transaction.

        A message kept already is skipped: the same XMPP id in the same conversation,
        or, without an id, the same role, sender, text and time; importing twice
        changes nothing. Messages formed where they were exported are not formed
        again: the cursor moves over those that follow it without a gap (a message
        of this memory not formed yet, before them, keeps them pending with it).
        A message that came before a reset where it was exported (``before_reset``)
        is kept in the revision before this conversation's (so it is not replayed),
        the copy of it kept here already too.

        A source links its memory to the message at its position (the one kept
        already, when the message was skipped). A source whose message retention had
        dropped before the export still ties the memory to its conversation, so that
        forgetting the conversation forgets what was formed only from it: it is kept
        with the conversation's id, negated, as its message.

        Returns:
            How many messages were added.
        """

        def work(db: sqlite3.Connection) -> int:
            added = 0
            kept: dict[str, tuple[int, list[int]]] = {}  # id, the row of each position
            for conversation in conversations:
                messages = conversation["messages"]
                if not messages:
                    continue
                first = min(float(m["at"]) for m in messages)
                last = max(float(m["at"]) for m in messages)
                session_id, revision, formed_through = db.execute(
                    _SESSION, (conversation["conversation_id"], conversation["peer"], first, last)
                ).fetchone()
                rows: list[int] = []
                kept[str(conversation["conversation_id"])] = (int(session_id), rows)
                formed: set[int] = set()
                for message in messages:
                    row = _kept_already(db, int(session_id), message)
                    set_aside = bool(message.get("before_reset"))
                    if row is None:
                        inserted = db.execute(
                            _INSERT_MESSAGE,
                            (
                                session_id,
                                int(revision) - 1 if set_aside else revision,
                                message["role"],
                                message["sender"],
                                message["text"],
                                float(message["at"]),
                                message["message_id"],
                            ),
                        ).fetchone()
                        row = int(inserted[0])
                        added += 1
                        if message["formed"]:
                            formed.add(row)
                    elif set_aside:
                        db.execute(
                            "UPDATE conversation_messages SET revision = ? "
                            "WHERE id = ? AND revision = ?",
                            (int(revision) - 1, row, revision),
                        )
                    rows.append(row)
                cursor = int(formed_through)
                if formed:
                    later = db.execute(
                        "SELECT id FROM conversation_messages WHERE session_id = ? AND id > ? "
                        "ORDER BY id",
                        (session_id, cursor),
                    )
                    for (message_id,) in later:
                        if int(message_id) not in formed:
                            break
                        cursor = int(message_id)
                db.execute(
                    "UPDATE conversations SET formed_through = ? WHERE id = ?", (cursor, session_id)
                )
            links = []
            for source in sources:
                if source.conversation_id not in kept:
                    continue
                session_id, rows = kept[source.conversation_id]
                message = -session_id if source.message is None else rows[source.message]
                links.append((source.memory_id, message, session_id, int(source.formed)))
            db.executemany(
                "INSERT OR IGNORE INTO memory_sources (memory_id, message_id, session_id, formed) "
                "VALUES (?, ?, ?, ?)",
                links,
            )
            return added

        return await self._base.run_write(work, "importing conversations")
