"""Importing what spade_llm agents remembered: its memory files into spade_memory.

:func:`import_spade_llm` reads a folder of spade_llm memory files (every
``*_base_memory.db`` and ``*_interactions.json``, :mod:`spade_memory.storage.spade_llm_files`
says their layout) and adds their memories and notes to the memories of the same
agents under a spade_memory root, agent by agent, by JID:

- a base-memory row becomes a memory of the same category, content, context,
  confidence, creation time, last access and access count; spade_llm's id (and the
  file it came from) stays in ``metadata["spade_llm"]``;
- an interaction note becomes a note of the same conversation (spade_llm's
  ``"a@x_b@y"`` ids become spade_memory's id of that pair of agents; other ids are
  kept as they are) and time.

Importing twice adds nothing: each memory gets a ``uid`` made from its agent and
spade_llm id, and a note equal to one already kept is skipped. What cannot be
mapped (an agent id that is not a JID, a category the memory does not have, an
empty or oversized text, a note without text) is left out and listed in the report;
a file that cannot be read is listed with one line saying why.

Nothing here needs spade_llm installed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import MemoryConfig
from ..errors import InvalidAgentId, InvalidToolInput, SpadeMemoryError, StorageError
from ..identity import conversation_id_for, normalize_jid
from ..maintenance.transfer import EXPORT_FORMAT
from ..manager import MemoryManager
from ..storage.spade_llm_files import (
    BASE_MEMORY_SUFFIX,
    INTERACTIONS_SUFFIX,
    SpadeLlmMemoryRow,
    read_base_memory,
    read_interactions,
    seconds_of,
)

__all__ = [
    "AgentImport",
    "SpadeLlmImport",
    "import_spade_llm",
    "spade_llm_conversation",
    "spade_llm_uid",
]

logger = logging.getLogger(__name__)


def spade_llm_uid(jid: str, spade_llm_id: str) -> str:
    """The uid a spade_llm memory gets: the same for the same agent and id, every run."""
    digest = hashlib.sha256(f"{jid}\n{spade_llm_id}".encode()).hexdigest()[:32]
    return f"spade_llm-{digest}"


@dataclass
class AgentImport:
    """What one agent received.

    Attributes:
        jid: the agent's bare JID.
        memories_added: memories new to its memory.
        memories_present: memories already imported before (skipped).
        notes_added: interaction notes new to its memory.
        notes_present: notes already kept (skipped).
    """

    jid: str
    memories_added: int = 0
    memories_present: int = 0
    notes_added: int = 0
    notes_present: int = 0


@dataclass
class SpadeLlmImport:
    """The report of one import.

    Attributes:
        agents: what each agent received, by JID.
        unmapped: one line per memory, note or file left out, saying why.
        unreadable: one line per file that could not be read.
    """

    agents: dict[str, AgentImport] = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "agents": {jid: vars(agent) for jid, agent in self.agents.items()},
            "unmapped": list(self.unmapped),
            "unreadable": list(self.unreadable),
        }


@dataclass
class _Pending:
    memories: list[dict[str, Any]] = field(default_factory=list)
    notes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


async def import_spade_llm(
    directory: Path | str,
    config: MemoryConfig,
    *,
    progress: Callable[[str], object] | None = None,
) -> SpadeLlmImport:
    """Add the memories and notes of spade_llm's files in ``directory`` to the agents'
    memories under ``config``'s root.

    Args:
        directory: the folder holding spade_llm's ``*_base_memory.db`` and
            ``*_interactions.json`` files (spade_llm's ``memory_path``).
        config: where and how the agents' memories are kept.
        progress: called with each agent's JID before its memory is written.

    Returns:
        What each agent received and what was left out.

    Raises:
        StorageError: ``directory`` is not a folder or holds no spade_llm file.
    """
    folder = Path(directory).expanduser()
    if not folder.is_dir():
        raise StorageError(f"{folder} is not a folder")
    databases = sorted(folder.glob("*" + BASE_MEMORY_SUFFIX))
    notes_files = sorted(folder.glob("*" + INTERACTIONS_SUFFIX))
    if not databases and not notes_files:
        raise StorageError(
            f"{folder} holds no spade_llm memory file "
            f"(*{BASE_MEMORY_SUFFIX}, *{INTERACTIONS_SUFFIX})"
        )
    report = SpadeLlmImport()
    pending: dict[str, _Pending] = {}
    for database in databases:
        try:
            rows = await asyncio.to_thread(read_base_memory, database)
        except StorageError as exc:
            report.unreadable.append(str(exc))
            continue
        for row in rows:
            _take_memory(database.name, row, config, pending, report)
    for notes_file in notes_files:
        try:
            notes = await asyncio.to_thread(read_interactions, notes_file)
        except StorageError as exc:
            report.unreadable.append(str(exc))
            continue
        try:
            jid = normalize_jid(notes.agent_id or "")
        except InvalidAgentId:
            report.unmapped.append(
                f"{notes_file.name}: agent_id {notes.agent_id!r} is not a JID; its notes "
                "were left out"
            )
            continue
        report.unmapped.extend(f"{notes_file.name}: {left}" for left in notes.left_out)
        target = pending.setdefault(jid, _Pending())
        fallback = notes_file.stat().st_mtime
        for conversation, entries in notes.conversations.items():
            mapped = spade_llm_conversation(conversation)
            for number, entry in enumerate(entries, 1):
                content = entry.get("content")
                if not isinstance(content, str) or not content.strip():
                    report.unmapped.append(
                        f"{notes_file.name}: note {number} of {conversation!r} has no text"
                    )
                    continue
                when = seconds_of(entry.get("timestamp"))
                target.notes.setdefault(mapped, []).append(
                    {"content": content, "created_at": when if when is not None else fallback}
                )
    for jid in sorted(pending):
        if progress is not None:
            progress(jid)
        report.agents[jid] = await _write(jid, pending[jid], config, report)
    return report


def _take_memory(
    file_name: str,
    row: SpadeLlmMemoryRow,
    config: MemoryConfig,
    pending: dict[str, _Pending],
    report: SpadeLlmImport,
) -> None:
    where = f"{file_name}: memory {row.id}"
    try:
        jid = normalize_jid(row.agent_id)
    except InvalidAgentId:
        report.unmapped.append(f"{where}: agent_id {row.agent_id!r} is not a JID")
        return
    if row.category not in config.categories:
        report.unmapped.append(
            f"{where}: category {row.category!r} is not one of MemoryConfig.categories "
            f"({', '.join(config.categories)})"
        )
        return
    if not row.content.strip():
        report.unmapped.append(f"{where}: empty content")
        return
    if len(row.content) > config.max_content_chars:
        report.unmapped.append(
            f"{where}: content of {len(row.content)} characters is longer than "
            f"MemoryConfig.max_content_chars ({config.max_content_chars})"
        )
        return
    created = seconds_of(row.created_at)
    accessed = seconds_of(row.last_accessed)
    confidence = row.confidence if row.confidence is not None else 1.0
    pending.setdefault(jid, _Pending()).memories.append(
        {
            "uid": spade_llm_uid(jid, row.id),
            "category": row.category,
            "content": row.content,
            "context": row.context or None,
            "confidence": min(max(confidence, 0.0), 1.0),
            "created_at": created,
            "updated_at": created,
            "last_accessed": accessed,
            "access_count": max(row.access_count or 0, 0),
            "metadata": {"spade_llm": {"id": row.id, "file": file_name}},
        }
    )


def spade_llm_conversation(conversation: str) -> str:
    """spade_memory's id of a spade_llm conversation id ``"a@x_b@y"`` (else the same id)."""
    for position, char in enumerate(conversation):
        if char != "_":
            continue
        left, right = conversation[:position], conversation[position + 1 :]
        if "@" in left and "@" in right:
            try:
                return conversation_id_for(left, right)
            except InvalidAgentId:
                continue
    return conversation


async def _write(
    jid: str, pending: _Pending, config: MemoryConfig, report: SpadeLlmImport
) -> AgentImport:
    result = AgentImport(jid)
    notes_total = sum(len(notes) for notes in pending.notes.values())
    async with await MemoryManager.open(jid, config) as memory:
        document: dict[str, Any] = {
            "format": EXPORT_FORMAT,
            "version": 1,
            "agent": jid,
            "memories": pending.memories,
            "notes": {},
        }
        try:
            added, _ = await memory.import_data(document)
        except InvalidToolInput:
            added = 0  # one bad memory refuses the lot: take them one by one
            for item in pending.memories:
                try:
                    one, _ = await memory.import_data({**document, "memories": [item]})
                except InvalidToolInput as exc:
                    spade_llm_id = item["metadata"]["spade_llm"]["id"]
                    report.unmapped.append(f"{jid}: memory {spade_llm_id}: {exc}")
                    continue
                added += one
        result.memories_added = added
        result.memories_present = len(pending.memories) - added
        for conversation, notes in pending.notes.items():
            try:
                _, fresh = await memory.import_data(
                    {**document, "memories": [], "notes": {conversation: notes}}
                )
            except (InvalidToolInput, SpadeMemoryError):
                fresh = 0  # one bad note refuses the lot: take them one by one
                for number, note in enumerate(notes, 1):
                    try:
                        _, one = await memory.import_data(
                            {**document, "memories": [], "notes": {conversation: [note]}}
                        )
                    except (InvalidToolInput, SpadeMemoryError) as exc:
                        report.unmapped.append(f"{jid}: note {number} of {conversation!r}: {exc}")
                        notes_total -= 1
                        continue
                    fresh += one
            result.notes_added += fresh
        result.notes_present = notes_total - result.notes_added
        await memory.flush()
    logger.info(
        "%s: %d memories and %d notes imported from spade_llm", jid, added, result.notes_added
    )
    return result
