"""spade_llm's ``AgentInteractionMemory``, with the notes kept by spade_memory.

spade_llm's ``LLMAgent`` keeps what it learns in a conversation with another agent
("interaction notes") in an ``AgentInteractionMemory`` and, on every message, puts
their summary into the prompt as a system message that starts with
``"Previous interaction notes:"``. :class:`SpadeMemoryInteractionMemory` has the
same methods and the same summary, and keeps the notes in the agent's spade_memory
notes file (``MemoryManager.add_note`` / ``notes``), so they are exported,
imported and shared with the rest of its memory::

    memory = SpadeMemoryInteractionMemory(manager)
    agent = LLMAgent(jid, password, provider=provider)
    use_interaction_memory(agent, memory)   # its prompt and its remember tool

spade_llm calls these methods without awaiting: a note shows at once, and is
written to the file right after (:meth:`SpadeMemoryInteractionMemory.flush` waits
for the writes). Differences from spade_llm's file: a note's text is limited to
``MemoryConfig.max_note_chars``, and a blank note or conversation id is refused
with a message instead of being kept.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from ..errors import InvalidAgentId, InvalidToolInput, SpadeMemoryError
from ..identity import conversation_id_for
from ..manager import MemoryManager
from ..storage.interaction import InteractionStore
from ..storage.spade_llm_files import datetime_of
from .spade_llm_import import spade_llm_conversation
from .spade_llm_tools import conversation_senders, import_spade_llm, require_spade_llm

__all__ = ["SUMMARY_TITLE", "SpadeMemoryInteractionMemory", "use_interaction_memory"]

logger = logging.getLogger(__name__)

SUMMARY_TITLE = "Previous interaction notes:"
"""The first line of the summary; spade_llm looks for it to inject the notes once."""


class SpadeMemoryInteractionMemory:
    """spade_llm's ``AgentInteractionMemory`` over one agent's notes in spade_memory.

    Args:
        manager: the agent's open memory (the caller closes it, after :meth:`flush`).
    """

    def __init__(self, manager: MemoryManager) -> None:
        self._manager = manager
        self._writes: set[asyncio.Task[None]] = set()
        # the spade_llm agent it serves (use_interaction_memory): who is answered
        self.agent: Any = None

    @property
    def agent_id(self) -> str:
        """The JID of the agent whose notes these are."""
        return self._manager.jid

    @property
    def storage_path(self) -> Path | None:
        """The notes file (``None`` for an in-memory memory)."""
        return self._manager.engine.interactions.path

    @property
    def interactions(self) -> dict[str, Any]:
        """The notes in the layout of spade_llm's file: ``agent_id`` and ``interactions``."""
        return {"agent_id": self.agent_id, "interactions": self.get_all_interactions()}

    def __repr__(self) -> str:
        return f"<SpadeMemoryInteractionMemory {self.agent_id}>"

    def _store(self) -> InteractionStore:
        self._manager.engine.check_open()
        return self._manager.engine.interactions

    def _track(self, task: asyncio.Task[None] | None) -> None:
        if task is None:
            return
        self._writes.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("a note of %s was not saved: %s", self.agent_id, task.exception())

    def add_information(self, conversation_id: str, information: str) -> str:
        """Note ``information`` about a conversation; returns the confirmation for the LLM.

        The note shows at once; it is written to the notes file right after.
        """
        try:
            note, task = self._store().add_soon(conversation_id, information)
        except InvalidToolInput as exc:
            logger.warning("a note of %s was refused: %s", self.agent_id, exc)
            return f"Could not remember this information: {exc}"
        self._track(task)
        return f"Remembered information about this interaction: {note.content}"

    def get_information(self, conversation_id: str) -> list[str]:
        """The notes of a conversation, oldest first (with those ``import-spade-llm``
        brought over under spade_memory's id of an ``"a@x_b@y"`` conversation, see
        :meth:`_paired`)."""
        current = self._store().current()
        notes = list(current.get(conversation_id, []))
        paired = self._paired(conversation_id)
        if paired is not None and paired in current:
            notes = sorted([*current[paired], *notes], key=lambda note: note.created_at)
        return [note.content for note in notes]

    def _paired(self, conversation_id: str) -> str | None:
        """spade_memory's id of the two agents an ``"a@x_b@y"`` conversation names,
        whose notes it reads and clears too, or ``None``.

        spade_llm's id of a conversation is the XMPP thread its sender chose: anyone
        may write in a thread named after two others. Serving an agent
        (:func:`use_interaction_memory`), the pair's notes are the conversation's
        only when the newest message in it, as the agent's context holds it, came
        from this agent's partner of the pair; never when no sender is known.
        """
        paired = spade_llm_conversation(conversation_id)
        if paired == conversation_id:
            return None
        if self.agent is None:
            return paired  # asked by name, outside an agent
        senders = conversation_senders(self.agent, conversation_id)
        if senders is None:
            return None
        try:
            own = conversation_id_for(self.agent_id, senders[1])
        except InvalidAgentId:
            return None
        return paired if own == paired else None

    def get_all_interactions(self) -> dict[str, list[dict[str, str]]]:
        """Every conversation's notes as spade_llm keeps them: ``content`` and an ISO
        ``timestamp`` (local time)."""
        return {
            conversation: [
                {
                    "content": note.content,
                    "timestamp": datetime_of(note.created_at).isoformat(),
                }
                for note in notes
            ]
            for conversation, notes in self._store().current().items()
        }

    def clear_conversation(self, conversation_id: str) -> bool:
        """Remove the notes of a conversation; ``False`` when it had none."""
        removed = 0
        paired = self._paired(conversation_id)
        for conversation in dict.fromkeys([conversation_id, paired or conversation_id]):
            try:
                cleared, task = self._store().clear_soon(conversation)
            except InvalidToolInput:
                continue
            self._track(task)
            removed += cleared
        return removed > 0

    def get_context_summary(self, conversation_id: str) -> str | None:
        """The notes as spade_llm puts them in the prompt (``None`` without notes)::

        Previous interaction notes:
        - first note
        - second note
        """
        notes = self.get_information(conversation_id)
        if not notes:
            return None
        return "\n".join([SUMMARY_TITLE, *(f"- {note}" for note in notes)]).strip()

    async def flush(self) -> None:
        """Wait until every note added or cleared so far is written.

        Raises:
            SpadeMemoryError: a write failed (the note is not kept).
        """
        while self._writes:
            results = await asyncio.gather(*self._writes, return_exceptions=True)
            for result in results:
                if isinstance(result, SpadeMemoryError):
                    raise result


def use_interaction_memory(agent: Any, memory: SpadeMemoryInteractionMemory) -> None:
    """Give a spade_llm ``LLMAgent`` this interaction memory: its behaviour injects
    the notes' summary into the prompt, and spade_llm's ``remember_interaction_info``
    tool writes into it (the tool is added, or an existing one is replaced).

    Call it after constructing the agent and before starting it.
    """
    require_spade_llm()
    tool_class = import_spade_llm("spade_llm.memory").AgentMemoryTool
    agent.interaction_memory = memory
    memory.agent = agent
    behaviour = getattr(agent, "llm_behaviour", None)
    if behaviour is not None:
        behaviour.interaction_memory = memory
    tools: list[Any] = agent.tools
    tool = tool_class(memory)
    for position, existing in enumerate(tools):
        if getattr(existing, "name", None) == tool.name:
            tools[position] = tool
            break
    else:
        tools.append(tool)
    if behaviour is not None and behaviour.tools is not tools and tool not in behaviour.tools:
        behaviour.tools[:] = [t for t in behaviour.tools if t.name != tool.name] + [tool]
