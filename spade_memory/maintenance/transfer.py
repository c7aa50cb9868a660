"""Export and import of one agent's memory as a JSON-ready dict.

:func:`export_memory` gives everything an agent remembers (its memories and its
conversation notes) under a format tag and a version; :func:`import_memory`
adds such an export, of any agent, to a memory. Import is idempotent: memories
whose ``uid`` is already present are skipped. The command-line ``export`` and
``import`` commands and the ``spade_llm`` backend are built on these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..engine.memory_input import MemoryInput
from ..errors import InvalidToolInput
from ..storage.base import IndexedText, NewMemory

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["EXPORT_FORMAT", "export_memory", "import_memory"]

EXPORT_FORMAT = "spade_memory.export"
_EXPORT_VERSION = 1


async def export_memory(engine: Engine) -> dict[str, Any]:
    """Everything the engine's agent remembers, as a JSON-ready dict."""
    memories = [memory.to_dict() async for memory in engine.base.iter_all()]
    return {
        "format": EXPORT_FORMAT,
        "version": _EXPORT_VERSION,
        "agent": engine.jid,
        "memories": memories,
        "notes": await engine.interactions.export(),
    }


async def import_memory(
    data: Mapping[str, Any], engine: Engine
) -> tuple[int, int]:
    """Add memories and notes from :func:`export_memory` output of any agent.

    Memories whose ``uid`` already exists are skipped, so importing twice
    changes nothing. Returns ``(memories added, notes added)``.

    Args:
        data: the export.
        engine: the memory it goes into (each memory is checked as ``store`` would).

    Raises:
        InvalidToolInput: the data is not an export; nothing was written.
    """
    if not isinstance(data, Mapping) or data.get("format") != EXPORT_FORMAT:
        raise InvalidToolInput(f"not a spade_memory export (format must be {EXPORT_FORMAT!r})")
    if data.get("version") != _EXPORT_VERSION:
        raise InvalidToolInput(f"unsupported export version {data.get('version')!r}")
    raw_memories = data.get("memories", [])
    raw_notes = data.get("notes", {})
    if not isinstance(raw_memories, list) or not isinstance(raw_notes, Mapping):
        raise InvalidToolInput("an export holds a list of memories and a mapping of notes")
    prepared: list[tuple[NewMemory, IndexedText]] = []
    seen: set[str] = set()
    for position, raw in enumerate(raw_memories):
        try:
            new, text = _imported(raw, engine.input, engine.now)
        except (InvalidToolInput, KeyError, TypeError, ValueError) as exc:
            raise InvalidToolInput(f"memory {position} of the export is invalid: {exc}") from None
        if new.uid in seen or await engine.base.get_by_uid(new.uid) is not None:
            continue
        seen.add(new.uid)
        prepared.append((new, text))
    graphs = await engine.input.graphs_of(
        [new for new, _ in prepared], [(None, None)] * len(prepared)
    )
    # Atoms start their lives now: an export does not carry them, and an old
    # memory moved to a new host should not arrive already expired.
    added = await engine.base.insert_many(prepared, graphs=graphs, graph_time=engine.now())
    if added:
        engine.notify_changed()
    notes = await engine.interactions.import_notes(raw_notes) if raw_notes else 0
    return len(added), notes


def _imported(
    raw: Any, memory_input: MemoryInput, clock: Callable[[], float]
) -> tuple[NewMemory, IndexedText]:
    """One exported memory, checked as ``store`` checks it, keeping its uid,
    status, times and access statistics."""
    if not isinstance(raw, Mapping):
        raise TypeError("not an object")
    new, text = memory_input.new_memory(
        raw["content"],
        category=raw.get("category", "fact"),
        context=raw.get("context"),
        confidence=raw.get("confidence", 1.0),
        importance=raw.get("importance", 0.5),
        source_conversation=raw.get("source_conversation"),
        source_sender=raw.get("source_sender"),
        metadata=raw.get("metadata") or {},
        now=float(raw.get("created_at", clock())),
    )
    uid = raw.get("uid") or new.uid
    if not isinstance(uid, str) or not 1 <= len(uid) <= 64:
        raise ValueError("uid must be a string of 1 to 64 characters")
    status = raw.get("status", "active")
    if status not in ("active", "archived"):
        raise ValueError(f"status must be active or archived, got {status!r}")
    last_accessed = raw.get("last_accessed")
    return (
        dataclasses.replace(
            new,
            uid=uid,
            status=status,
            updated_at=float(raw.get("updated_at", new.created_at)),
            last_accessed=None if last_accessed is None else float(last_accessed),
            access_count=int(raw.get("access_count", 0)),
        ),
        text,
    )
