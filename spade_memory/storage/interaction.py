"""Interaction memory: notes about conversations with other agents, kept as JSON.

One JSON file per agent holds every conversation's notes (its format, and how it
is read and written under its lock, are in :mod:`spade_memory.storage.interaction_file`).

Every change is appended to the file's journal and fsynced in a worker thread
(the journal is folded into a new snapshot of the whole file, written atomically,
once it outgrows it), and a call returns only once its change is on disk. Changes
that arrive while a write is running are written together by the next write
(group commit, :class:`spade_memory.storage.batching.Batcher`). A write that fails
raises :class:`StorageError` to every caller whose change was in it, and those
changes are undone in memory, so the store always shows its last durable state
plus the changes still waiting to be written. A caller cancelled while its change
waits takes it back (it is never written); once its write began, the change is
written.

Each write holds an exclusive lock (``.<file name>.lock`` beside the file) and
applies its changes to the file as it is then, so processes sharing one agent's
memory never overwrite each other's notes.

The file is created by the first note, not on open: opening a new agent's memory
writes nothing here (a new agent's memory is known to exist from the registry of
its memory root, not from this file).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidToolInput, StorageError, StoreClosedError
from ..identity import MAX_JID_CHARS, normalize_jid
from ..limits import LIMITS
from ..models import InteractionNote
from ..validation import check_text
from .batching import Batcher, Pending
from .interaction_file import (
    FORMAT_TAG,
    FORMAT_VERSION,
    Stamp,
    empty_document,
    open_file,
    read_agent_of,
    save_merged,
    snapshot_document,
)
from .note_changes import AddNotes, Change, ClearConversation, Conversations

__all__ = [
    "FORMAT_TAG",
    "FORMAT_VERSION",
    "MAX_CONVERSATION_ID_CHARS",
    "InteractionStore",
    "check_imported_notes",
    "empty_document",
    "read_agent_of",
    "snapshot_document",
]

logger = logging.getLogger(__name__)

MAX_CONVERSATION_ID_CHARS = LIMITS.conversation_id_chars
MAX_AUTHOR_CHARS = MAX_JID_CHARS


def _check_author(author: object) -> str | None:
    if author is None:
        return None
    return check_text("author", author, max_chars=MAX_AUTHOR_CHARS)


def _check_time(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidToolInput(f"created_at must be a finite number of seconds, got {value!r}")
    return float(value)


def check_imported_notes(
    data: object, *, max_note_chars: int, clock: Callable[[], float] = time.time
) -> list[InteractionNote]:
    """The notes of an export (``{conversation id: [note, ...]}``), checked as a note
    is checked when added: conversation id, content (at most ``max_note_chars``),
    author and time (``clock``'s for a note without one). Writes nothing.

    Raises:
        InvalidToolInput: the data is malformed, naming the note ("note 2 of
            conversation 'c1' is invalid: ...", counted from 1).
    """
    if not isinstance(data, Mapping):
        raise InvalidToolInput("import data must map conversation ids to lists of notes")
    checked: list[InteractionNote] = []
    for conversation_id, notes in data.items():
        try:
            conversation = check_text(
                "conversation_id", conversation_id, max_chars=MAX_CONVERSATION_ID_CHARS
            )
        except InvalidToolInput as exc:
            shown = conversation_id[:80] if isinstance(conversation_id, str) else conversation_id
            raise InvalidToolInput(
                f"the notes of conversation {shown!r} are invalid: {exc}"
            ) from None
        if isinstance(notes, str | bytes) or not isinstance(notes, Sequence):
            raise InvalidToolInput(
                f"the notes of conversation {conversation[:80]!r} must be a list"
            )
        for number, entry in enumerate(notes, 1):
            try:
                checked.append(_imported_note(conversation, entry, max_note_chars, clock))
            except InvalidToolInput as exc:
                raise InvalidToolInput(
                    f"note {number} of conversation {conversation[:80]!r} is invalid: {exc}"
                ) from None
    return checked


def _imported_note(
    conversation: str, entry: object, max_note_chars: int, clock: Callable[[], float]
) -> InteractionNote:
    if not isinstance(entry, Mapping):
        raise InvalidToolInput(f"it is not an object, got {type(entry).__name__}")
    unknown = set(entry) - {"content", "author", "created_at", "conversation_id"}
    if unknown:
        raise InvalidToolInput(
            f"unknown fields {sorted(map(str, unknown))}; accepted: content, author, created_at"
        )
    if entry.get("conversation_id", conversation) != conversation:
        raise InvalidToolInput("it names another conversation")
    content = check_text("content", entry.get("content"), max_chars=max_note_chars)
    created = entry.get("created_at")
    when = float(clock()) if created is None else _check_time(created)
    return InteractionNote(conversation, content, _check_author(entry.get("author")), when)


class InteractionStore:
    """The interaction notes of one agent, in a JSON file or only in memory.

    Open with :meth:`open`; close with :meth:`aclose`.
    """

    def __init__(
        self,
        path: Path | None,
        agent: str,
        conversations: Conversations,
        *,
        clock: Callable[[], float],
        max_note_chars: int,
        on_file_created: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._path = path
        self._on_file_created = on_file_created
        self._file_seen = False  # the file was there on open or written since
        self._agent = agent
        self._clock = clock
        self._max_note_chars = max_note_chars
        self._durable: Conversations = {k: list(v) for k, v in conversations.items()}
        self._view: Conversations = {k: list(v) for k, v in conversations.items()}
        self._batcher: Batcher[Change, None] = Batcher(
            self._write, name=f"spade_memory interactions {agent}"
        )
        self._writing: list[Change] = []  # the changes of the write under way
        self._closed = False
        self._stamp: Stamp | None = None  # of the file as last read or written here

    @classmethod
    async def open(
        cls,
        path: Path | None,
        *,
        agent: str,
        clock: Callable[[], float] = time.time,
        max_note_chars: int = LIMITS.note_chars,
        on_file_created: Callable[[], Awaitable[None]] | None = None,
    ) -> InteractionStore:
        """Open the interaction memory of ``agent``.

        Args:
            path: the JSON file; ``None`` keeps the notes in memory only (nothing
                touches the disk). A missing file holds no notes; the first note
                creates it.
            agent: the agent's JID; the file must belong to it.
            clock: the time source of new notes.
            max_note_chars: the longest note accepted.
            on_file_created: awaited once after the first write that creates the
                file (so the base memory can record that the file must be there);
                a failure is logged, never raised to the note's writer.

        Raises:
            StorageCorrupted: the file was damaged; it was quarantined.
            StorageError: the file could not be read or created.
            InvalidAgentId: ``agent`` is not a valid JID.
        """
        bare = normalize_jid(agent)
        if not isinstance(max_note_chars, int) or isinstance(max_note_chars, bool):
            raise InvalidToolInput(f"max_note_chars must be an integer, got {max_note_chars!r}")
        if max_note_chars < 1:
            raise InvalidToolInput(f"max_note_chars must be >= 1, got {max_note_chars}")
        if path is None:
            return cls(None, bare, {}, clock=clock, max_note_chars=max_note_chars)
        path = Path(path)
        loaded, stamp = await asyncio.to_thread(open_file, path, bare)
        store = cls(
            path,
            bare,
            loaded,
            clock=clock,
            max_note_chars=max_note_chars,
            on_file_created=on_file_created,
        )
        store._stamp = stamp
        store._file_seen = stamp is not None
        return store

    @property
    def file_exists(self) -> bool:
        """Whether the notes file was there on open or has been written since."""
        return self._file_seen

    @property
    def agent(self) -> str:
        """The bare JID of the agent whose notes these are."""
        return self._agent

    @property
    def path(self) -> Path | None:
        """The JSON file, or ``None`` for an in-memory store."""
        return self._path

    @property
    def closed(self) -> bool:
        return self._closed

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError(
                f"the interaction memory of {self._agent} is closed; open it again to use it"
            )

    def _conversation_id(self, conversation_id: object) -> str:
        return check_text("conversation_id", conversation_id, max_chars=MAX_CONVERSATION_ID_CHARS)

    async def add(
        self, conversation_id: str, content: str, *, author: str | None = None
    ) -> InteractionNote:
        """Add a note to a conversation and return it once it is durable.

        Raises:
            InvalidToolInput: an argument is invalid; nothing was written.
            StorageError: the write failed; the note was not kept.
            StoreClosedError: the store is closed.
        """
        self._ensure_open()
        conversation = self._conversation_id(conversation_id)
        text = check_text("content", content, max_chars=self._max_note_chars)
        note = InteractionNote(conversation, text, _check_author(author), float(self._clock()))
        await self._commit(AddNotes((note,)))
        return note

    def add_soon(
        self, conversation_id: str, content: str, *, author: str | None = None
    ) -> tuple[InteractionNote, asyncio.Task[None] | None]:
        """Add a note now, for callers that cannot await: it shows at once in what
        :meth:`get` and :meth:`current` give, and the returned task makes it durable
        (``None`` for an in-memory store). Must run inside an event loop.

        Raises:
            InvalidToolInput: an argument is invalid; nothing was added.
            StoreClosedError: the store is closed.
        """
        self._ensure_open()
        conversation = self._conversation_id(conversation_id)
        text = check_text("content", content, max_chars=self._max_note_chars)
        note = InteractionNote(conversation, text, _check_author(author), float(self._clock()))
        return note, self._commit_soon(AddNotes((note,)))

    def clear_soon(self, conversation_id: str) -> tuple[int, asyncio.Task[None] | None]:
        """:meth:`clear` for callers that cannot await (see :meth:`add_soon`)."""
        self._ensure_open()
        conversation = self._conversation_id(conversation_id)
        removed = len(self._view.get(conversation, []))
        if not removed:
            return 0, None
        return removed, self._commit_soon(ClearConversation(conversation))

    def current(self) -> dict[str, list[InteractionNote]]:
        """Every conversation's notes as :meth:`get` gives them, without awaiting."""
        self._ensure_open()
        return {conversation: list(notes) for conversation, notes in self._view.items()}

    async def get(self, conversation_id: str, *, limit: int | None = None) -> list[InteractionNote]:
        """The notes of a conversation, oldest first; ``limit`` keeps the newest."""
        self._ensure_open()
        conversation = self._conversation_id(conversation_id)
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise InvalidToolInput(f"limit must be a non-negative integer or None, got {limit!r}")
        notes = self._view.get(conversation, [])
        if limit is not None:
            notes = notes[len(notes) - limit :] if limit else []
        return list(notes)

    async def clear(self, conversation_id: str) -> int:
        """Remove every note of a conversation; return how many were removed."""
        self._ensure_open()
        conversation = self._conversation_id(conversation_id)
        removed = len(self._view.get(conversation, []))
        if not removed:
            return 0

        await self._commit(ClearConversation(conversation))
        return removed

    async def conversations(self) -> list[str]:
        """The ids of the conversations that have notes, sorted."""
        self._ensure_open()
        return sorted(self._view)

    async def counts(self) -> tuple[int, int]:
        """``(conversations, notes)``."""
        self._ensure_open()
        return len(self._view), sum(len(notes) for notes in self._view.values())

    async def export(self) -> dict[str, list[dict[str, Any]]]:
        """Every conversation's notes as plain dicts, ready for JSON."""
        self._ensure_open()
        return {
            conversation: [
                {"content": n.content, "author": n.author, "created_at": n.created_at}
                for n in notes
            ]
            for conversation, notes in sorted(self._view.items())
        }

    async def import_notes(self, data: Mapping[str, Sequence[Mapping[str, Any]]]) -> int:
        """Add notes from :meth:`export` output; return how many were new.

        A note equal (content, author, time) to one already in its conversation is
        skipped, so importing the same export twice adds nothing. All notes are
        checked before anything is written; one bad note rejects the whole import.

        Raises:
            InvalidToolInput: the data is malformed (naming the note); nothing was
                written.
            StorageError: the write failed; nothing was imported.
        """
        return await self.add_imported(self.check_import(data))

    def check_import(
        self, data: Mapping[str, Sequence[Mapping[str, Any]]]
    ) -> list[InteractionNote]:
        """The notes of :meth:`export` output, checked as :meth:`import_notes` checks
        them (this store's longest note, its clock for a note without a time); writes
        nothing.

        Raises:
            InvalidToolInput: the data is malformed, naming the note.
        """
        self._ensure_open()
        return check_imported_notes(data, max_note_chars=self._max_note_chars, clock=self._clock)

    async def add_imported(self, notes: Sequence[InteractionNote]) -> int:
        """Add notes :meth:`check_import` gave; return how many were new (see
        :meth:`import_notes`).

        Raises:
            StorageError: the write failed; nothing was imported.
        """
        self._ensure_open()
        known = {
            (n.conversation_id, n.content, n.author, n.created_at)
            for notes in self._view.values()
            for n in notes
        }
        fresh: list[InteractionNote] = []
        for note in notes:
            key = (note.conversation_id, note.content, note.author, note.created_at)
            if key not in known:
                known.add(key)
                fresh.append(note)
        if not fresh:
            return 0

        await self._commit(AddNotes(tuple(fresh), sort=True))
        return len(fresh)

    async def _commit(self, change: Change) -> None:
        change(self._view)
        if self._path is not None:
            await self._persist(change)

    def _commit_soon(self, change: Change) -> asyncio.Task[None] | None:
        loop = None
        if self._path is not None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                # refused before anything shows: a change shown but never written
                # would be gone at the next open
                raise InvalidToolInput(
                    "a note is written in the background of an event loop: call this "
                    "from async code (inside the agent), or use add_note"
                ) from None
        change(self._view)
        if loop is None:
            return None
        return loop.create_task(self._persist(change))

    async def _persist(self, change: Change) -> None:
        try:
            await self._batcher.submit(change)
        except asyncio.CancelledError:
            self._show()  # without the change if it was taken back before its write
            raise

    def _show(self) -> None:
        """Show the durable state plus the changes being written and still waiting."""
        view = {k: list(v) for k, v in self._durable.items()}
        for change in self._writing:
            change(view)
        for pending in self._batcher.queue:
            pending.item(view)
        self._view = {k: v for k, v in view.items() if v}

    async def _write(self, batch: list[Pending[Change, None]]) -> None:
        """Write the changes of ``batch`` (one file rewrite for all of them)."""
        assert self._path is not None
        path = self._path
        self._writing = [pending.item for pending in batch]
        try:
            target, self._stamp = await asyncio.to_thread(
                functools.partial(
                    save_merged,
                    path,
                    self._agent,
                    self._durable,
                    self._stamp,
                    self._writing,
                )
            )
        except Exception as exc:
            self._writing = []
            self._show()
            cause = exc.__cause__ if isinstance(exc, StorageError) and exc.__cause__ else exc
            reason = getattr(cause, "strerror", None) or str(cause) or type(cause).__name__
            logger.error("could not save interaction memory %s: %s", path, reason)
            raise StorageError(
                f"could not save interaction memory {path}: {reason}; the change was not "
                "kept. Check free disk space and permissions, then retry"
            ) from exc
        self._writing = []
        self._durable = target
        # Show what the file holds now (other processes' notes too), plus the
        # changes still waiting to be written.
        self._show()
        for pending in batch:
            pending.resolve(None)
        if not self._file_seen:
            self._file_seen = True
            if self._on_file_created is not None:
                try:
                    await self._on_file_created()
                except Exception as exc:  # the notes are durable: only the mark failed
                    logger.warning(
                        "could not record that %s was created (%s); the next open records it",
                        path,
                        exc,
                    )

    async def aclose(self) -> None:
        """Wait for pending writes, then close. Calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        await self._batcher.drain()

    async def __aenter__(self) -> InteractionStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
