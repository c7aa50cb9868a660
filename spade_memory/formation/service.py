"""Memory formation in the background: kept conversations become memories, a window at a time.

:class:`Formation` watches the conversation store. After each kept message it
reads the conversation's messages not yet formed, and forms every window that is
closed (:func:`~spade_memory.formation.windows.closed_windows`: enough rounds, a new
day, a silence); an open window with a silence ahead gets a timer. Conversations
form concurrently (at most ``_CONCURRENT`` at once: an LLM turn of one never holds
up another), one window after the other within each.

A window is formed outside any transaction (rules, or an LLM:
:func:`~spade_memory.formation.llm_formation.form_window`), then committed in one
transaction with its memories, their sources and the moved cursor
(:class:`~spade_memory.storage.conversations.FormedWindow`). That transaction
first checks the conversation is where it was read: a reset or forget meanwhile,
or another process forming the same window, discards it. A crash before the
commit leaves the window pending; it is formed again after the next open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..config import FormationConfig
from ..engine.engine import Engine
from ..errors import InvalidToolInput, SpadeMemoryError
from ..models import ConversationMessage, Scope
from ..storage.conversations import FormedWindow, Pending
from ..storage.memory_rows import IndexedText, NewMemory
from ..storage.memory_writes import InsertTransaction
from ..text.quoting import CUT_MARK
from .formed import FormedMemory
from .llm_formation import form_window
from .windows import closed_windows, next_closing

__all__ = ["Formation", "FormationReport"]

logger = logging.getLogger(__name__)

_CONCURRENT = 4
"""Conversations formed at once (each may wait on an LLM)."""
_UNREPORTED_IDS = 10_000
"""Ids of memories formed in the background kept for the next report, at most."""


@dataclass(slots=True)
class FormationReport:
    """What one run of memory formation did.

    Attributes:
        windows: windows formed and committed.
        memories: memories written by them (new ones).
        reinforced: memories that existed and were told again instead.
        by_llm: windows the LLM formed (the others by rules).
        discarded: windows formed but not committed (the conversation was reset or
            forgotten meanwhile, or another process formed them first).
        memory_ids: the memories written or told again, each once (of windows
            formed in the background since the last report, the newest 10,000).
    """

    windows: int = 0
    memories: int = 0
    reinforced: int = 0
    by_llm: int = 0
    discarded: int = 0
    memory_ids: list[int] = field(default_factory=list)

    def add(self, other: FormationReport) -> None:
        self.windows += other.windows
        self.memories += other.memories
        self.reinforced += other.reinforced
        self.by_llm += other.by_llm
        self.discarded += other.discarded
        seen = set(self.memory_ids)  # a memory told again in a later window: once
        self.memory_ids.extend(i for i in other.memory_ids if i not in seen)


class Formation:
    """Forms the windows of kept conversations into memories.

    Args:
        engine: the memory's wired parts.
        config: when and how to form (``MemoryConfig.formation``).
        scope_for: the scope of what a partner tells the agent in a conversation
            (the agent's :class:`~spade_memory.config.ScopePolicy`).
    """

    def __init__(
        self,
        engine: Engine,
        config: FormationConfig,
        scope_for: Callable[[str, str], Scope],
    ) -> None:
        self._engine = engine
        self._config = config
        self._scope_for = scope_for
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._slots = asyncio.Semaphore(_CONCURRENT)
        self._closed = False
        self._unreported = FormationReport()  # formed in the background since form_pending

    @property
    def config(self) -> FormationConfig:
        return self._config

    def forms(self, peer: str) -> bool:
        """Whether conversations with ``peer`` are formed into memories."""
        return self._config.form and self._config.captures(peer)

    # -- in the background ---------------------------------------------------------

    def kick(self, conversation_id: str) -> None:
        """A message was kept in ``conversation_id``: form what is closed, soon."""
        if self._closed or not self._config.form:
            return
        timer = self._timers.pop(conversation_id, None)
        if timer is not None:
            timer.cancel()
        running = self._tasks.get(conversation_id)
        if running is not None and not running.done():
            self._again.add(conversation_id)
            return
        task = asyncio.get_running_loop().create_task(
            self._background(conversation_id), name=f"forming {conversation_id}"
        )
        self._tasks[conversation_id] = task

    async def resume(self) -> None:
        """Look again at every conversation with messages not yet formed (after open)."""
        if not self._config.form:
            return
        for conversation_id in await self._engine.conversations.with_pending():
            self.kick(conversation_id)

    async def _background(self, conversation_id: str) -> None:
        try:
            while True:
                self._again.discard(conversation_id)
                async with self._slots:
                    self._unreported.add(await self.form(conversation_id, everything=False))
                    # an agent that never asks keeps counts, not every id it ever formed
                    del self._unreported.memory_ids[:-_UNREPORTED_IDS]
                if conversation_id not in self._again or self._closed:
                    return
        except asyncio.CancelledError:
            raise
        except SpadeMemoryError as exc:
            if not self._closed and not self._engine.closed:
                logger.warning(
                    "%s: forming memories of %s failed: %s", self._engine.jid, conversation_id, exc
                )
        except Exception:
            if not self._closed and not self._engine.closed:
                logger.exception(
                    "%s: forming memories of %s failed", self._engine.jid, conversation_id
                )
        finally:
            if self._tasks.get(conversation_id) is asyncio.current_task():
                del self._tasks[conversation_id]

    def _wake_later(self, conversation_id: str, at: float) -> None:
        if self._closed:
            return
        delay = max(0.0, at - self._engine.now()) + 0.05
        loop = asyncio.get_running_loop()
        self._timers[conversation_id] = loop.call_later(delay, self.kick, conversation_id)

    # -- forming -----------------------------------------------------------------

    async def form(self, conversation_id: str, *, everything: bool) -> FormationReport:
        """Form the closed windows of one conversation (every window, open ones too,
        with ``everything``); one run at a time per conversation."""
        lock = self._locks.setdefault(conversation_id, asyncio.Lock())
        async with lock:
            report = FormationReport()
            pending = await self._engine.conversations.pending(conversation_id)
            if pending is None or not pending.messages or not self.forms(pending.peer):
                return report
            idle = self._config.idle_minutes * 60.0
            windows = closed_windows(
                pending.messages,
                window_rounds=self._config.window_rounds,
                idle_seconds=idle,
                now=self._engine.now(),
                everything=everything,
            )
            cursor = pending.formed_through
            for window in windows:
                done = await self._form_window(pending, cursor, window)
                if done is None:
                    report.discarded += 1
                    logger.debug(
                        "%s: a window of %s was discarded (reset, forgotten or formed elsewhere)",
                        self._engine.jid,
                        conversation_id,
                    )
                    return report
                report.add(done)
                cursor = window[-1].id
            formed = {message.id for window in windows for message in window}
            rest = [message for message in pending.messages if message.id not in formed]
            if rest and not everything:
                closing = next_closing(rest, idle_seconds=idle)
                if closing is not None:
                    self._wake_later(conversation_id, closing)
            return report

    async def _form_window(
        self, pending: Pending, cursor: int, window: Sequence[ConversationMessage]
    ) -> FormationReport | None:
        engine = self._engine
        formed, path = await form_window(
            window, config=self._config, categories=engine.config.categories
        )
        conversation_id = window[0].conversation_id
        scope = self._scope_for(pending.peer, conversation_id)
        now = engine.now()
        formed, prepared, explicit = self._storable(formed, window, pending.peer, scope, now)
        insert: InsertTransaction | None = None
        if prepared:
            graphs = await engine.input.graphs_for([new for new, _ in prepared], explicit)
            insert = InsertTransaction.of(prepared, engine.base.agent, graphs, now)
        ids = await engine.conversations.commit_window(
            FormedWindow(
                session_id=pending.session_id,
                revision=pending.revision,
                formed_through=cursor,
                through=window[-1].id,
                insert=insert,
                sources=[memory.sources for memory in formed],
                keep=self._config.max_messages,
            )
        )
        if ids is None:
            return None
        if ids:
            engine.notify_changed(marked=True)
        reinforced = set(insert.reinforced) if insert is not None else set()
        return FormationReport(
            windows=1,
            memories=len({i for i in ids if i not in reinforced}),
            reinforced=len(reinforced),
            by_llm=int(path == "llm"),
            memory_ids=sorted(set(ids)),
        )

    def _storable(
        self,
        formed: Sequence[FormedMemory],
        window: Sequence[ConversationMessage],
        peer: str,
        scope: Scope,
        now: float,
    ) -> tuple[list[FormedMemory], list[tuple[NewMemory, IndexedText]], list[tuple[Any, Any]]]:
        """The formed memories the agent's memory takes, checked as ``store_many``
        checks its items, with their checked rows and graph input.

        Each memory is told when the newest message it was formed from was said (not
        later than ``now``): a window formed late (after a restart, on opening, or
        from imported messages) has the times of its words. Its atoms start their
        lives when it is formed, as an imported memory's do: a conversation brought
        from elsewhere does not arrive lapsed.

        A text over the memory's ``max_content_chars`` is cut (with ``…``); a memory
        still refused (a model's fact holding a control character, say) is left out
        with a warning, so one bad memory never holds the window, and every later
        one of its conversation, back.
        """
        limit = self._engine.config.max_content_chars
        by_id = {message.id: message for message in window}
        kept: list[FormedMemory] = []
        prepared: list[tuple[NewMemory, IndexedText]] = []
        explicit: list[tuple[Any, Any]] = []
        for memory in formed:
            if len(memory.content) > limit:
                memory = replace(memory, content=memory.content[: limit - 1] + CUT_MARK)
            item = _item(memory, window[0].conversation_id, _teller(memory, by_id, peer), scope)
            try:
                checked, graph_input = self._engine.input.items(
                    [item], _said_at(memory, by_id, now)
                )
            except InvalidToolInput as exc:
                logger.warning(
                    "%s: a memory formed from %s was left out: %s",
                    self._engine.jid,
                    window[0].conversation_id,
                    exc,
                )
                continue
            kept.append(memory)
            prepared.extend(checked)
            explicit.extend(graph_input)
        return kept, prepared, explicit

    async def settle(self) -> None:
        """Wait for the runs under way: the windows closed so far are formed (an LLM
        that does not answer falls back to the rules within ``llm_timeout``)."""
        running = [task for task in self._tasks.values() if not task.done()]
        if running:  # those under way now: a busy agent's later messages are not waited for
            await asyncio.wait(running)

    async def form_pending(self) -> FormationReport:
        """Form every message not yet formed, in every conversation, now.

        The background runs under way are waited for first; the report holds what
        they formed since the last call too (a memory opened forms what was left
        closed in the background at once: its windows are reported here).
        """
        await self.settle()
        report, self._unreported = self._unreported, FormationReport()
        for conversation_id in await self._engine.conversations.with_pending():
            report.add(await self.form(conversation_id, everything=True))
        return report

    # -- closing -----------------------------------------------------------------

    async def aclose(self, *, finish: bool = False) -> None:
        """Stop forming: timers cancelled, a formation under way cancelled (its window
        stays pending and is formed after the next open).

        With ``finish`` (a memory closing, when ``FormationConfig.form_on_close``),
        what is still pending is formed first, as a silence would close its windows,
        within ``FormationConfig.llm_timeout`` seconds in all; what does not finish
        in time (or when the close is cancelled) stays pending for the next open.
        """
        try:
            if finish and not self._closed and self._config.form and self._config.form_on_close:
                try:
                    async with asyncio.timeout(self._config.llm_timeout):
                        await self.form_pending()
                except TimeoutError:
                    logger.warning(
                        "%s: forming the pending conversation windows took over %g s at close; "
                        "the rest is formed after the next open",
                        self._engine.jid,
                        self._config.llm_timeout,
                    )
                except Exception as exc:  # closing goes on; the windows stay pending
                    logger.warning(
                        "%s: could not form the pending conversation windows at close: %s",
                        self._engine.jid,
                        exc,
                    )
        finally:  # cancelled while forming (the loop ends): stopped all the same
            self._closed = True
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
            tasks = [task for task in self._tasks.values() if not task.done()]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._tasks.clear()


def _teller(memory: FormedMemory, window: Mapping[int, ConversationMessage], peer: str) -> str:
    """Who told a formed memory: the sender of its first source message the partner
    wrote (a fact from the agent's question and the partner's answer is the
    partner's), else of its first source message, else the partner."""
    sources = [window[i] for i in memory.sources if i in window]
    told = next((message for message in sources if message.role == "user"), None)
    if told is not None:
        return told.sender
    return sources[0].sender if sources else peer


def _item(
    memory: FormedMemory, conversation_id: str, sender: str, scope: Scope
) -> Mapping[str, Any]:
    """The ``store_many`` item of a formed memory: told by ``sender``, in the scope
    of what the partner tells."""
    item: dict[str, Any] = {
        "content": memory.content,
        "category": memory.category,
        "context": memory.context,
        "importance": memory.importance,
        "confidence": memory.confidence,
        "source_conversation": conversation_id,
        "source_sender": sender,
        "metadata": {"formed": memory.kind},
        "scope": scope,
    }
    if memory.entities:
        item["entities"] = list(memory.entities)
    return item


def _said_at(memory: FormedMemory, by_id: Mapping[int, ConversationMessage], now: float) -> float:
    """When ``memory`` was told: the time of the newest message it was formed from (of
    the window's newest when it names none), never later than ``now``."""
    times = [by_id[source].at for source in memory.sources if source in by_id]
    said = max(times) if times else max(message.at for message in by_id.values())
    return min(said, now)
