"""What each memory page shows, as JSON-ready data read through ``MemoryManager``.

Every page of the inspector is one of these functions rendered by a template, and
the same data is the page's JSON (``?format=json``). The inspector is the agent
operator's: it sees every scope, counts no access, and forms nothing.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..errors import InvalidToolInput
from ..limits import LIMITS
from ..manager import MEMORY_STATUSES
from .communities import graph_document

if TYPE_CHECKING:
    from ..manager import MemoryManager
    from ..models import Memory, ScoreExplanation

__all__ = [
    "conversation_view",
    "conversations_view",
    "graph_view",
    "list_view",
    "maintenance_view",
    "memory_dict",
    "memory_view",
    "node_view",
    "overview_view",
    "search_view",
]

Query = Mapping[str, str]

_PAGE = 50
_MESSAGES = 500


def memory_dict(memory: Memory) -> dict[str, Any]:
    """A memory's fields, with its times also as UTC dates."""
    data = memory.to_dict()
    for key in ("created_at", "updated_at", "last_accessed"):
        data[f"{key}_text"] = _when(data[key])
    return data


def _when(value: float | None) -> str | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _int(query: Query, name: str, default: int, *, low: int, high: int) -> int:
    text = query.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidToolInput(f"{name} must be a whole number, got {text!r}") from None
    if not low <= value <= high:
        raise InvalidToolInput(f"{name} must be between {low} and {high}, got {value}")
    return value


def _optional(query: Query, name: str) -> str | None:
    text = query.get(name, "").strip()
    return text or None


def _day(query: Query, name: str) -> date | None:
    text = _optional(query, name)
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidToolInput(f"{name} must be a date (YYYY-MM-DD), got {text!r}") from None


def _explanation(explanation: ScoreExplanation | None) -> dict[str, Any] | None:
    if explanation is None:
        return None
    data = dataclasses.asdict(explanation)
    data["routes"] = list(explanation.routes)
    return data


async def overview_view(manager: MemoryManager) -> dict[str, Any]:
    """The agent's memory in numbers and its newest memories."""
    stats = await manager.stats()
    return {
        "agent": manager.jid,
        "stats": dataclasses.asdict(stats),
        "activity": await manager.activity(),
        "categories": list(manager.categories),
        "recent": [memory_dict(m) for m in await manager.list(limit=10)],
    }


async def search_view(manager: MemoryManager, query: Query) -> dict[str, Any]:
    """A search with every result's explanation (route and stage scores, the weights)
    and where its time went; the search counts no access."""
    text = query.get("q", "").strip()
    limit = _int(query, "limit", 10, low=1, high=LIMITS.search_limit)
    category = _optional(query, "category")
    data: dict[str, Any] = {
        "agent": manager.jid,
        "query": text,
        "limit": limit,
        "category": category,
        "categories": list(manager.categories),
        "results": [],
        "timings": None,
    }
    if not text:
        return data
    results, timings = await manager.search_with_timings(
        text, limit=limit, category=category, explain=True, record_access=False
    )
    data["results"] = [
        {
            "score": result.score,
            "memory": memory_dict(result.memory),
            "explanation": _explanation(result.explanation),
        }
        for result in results
    ]
    data["timings"] = dataclasses.asdict(timings)
    return data


async def list_view(manager: MemoryManager, query: Query) -> dict[str, Any]:
    """Memories, newest first, by category, status and the days they were stored."""
    category = _optional(query, "category")
    status = _optional(query, "status") or "active"
    if status not in (*MEMORY_STATUSES, "all"):
        raise InvalidToolInput(f"status must be one of active, archived, all; got {status!r}")
    since, until = _day(query, "from"), _day(query, "to")
    limit = _int(query, "limit", _PAGE, low=1, high=LIMITS.list_limit)
    offset = _int(query, "offset", 0, low=0, high=10**9)
    start = None if since is None else _midnight(since)
    end = None if until is None or until == date.max else _midnight(until + timedelta(days=1))
    listed = functools.partial(
        manager.list,
        category,
        status=None if status == "all" else status,
        created_from=start,
        created_to=end,
    )
    # one more than shown tells whether a next page exists; at the largest page, that
    # one is asked apart (the memory lists at most LIMITS.list_limit at once)
    asked = min(limit + 1, LIMITS.list_limit)
    memories = await listed(limit=asked, offset=offset)
    more = len(memories) > limit or (
        asked == limit == len(memories) and bool(await listed(limit=1, offset=offset + limit))
    )
    memories = memories[:limit]
    return {
        "agent": manager.jid,
        "category": category,
        "status": status,
        "from": None if since is None else since.isoformat(),
        "to": None if until is None else until.isoformat(),
        "limit": limit,
        "offset": offset,
        "more": more,
        "categories": list(manager.categories),
        "statuses": [*MEMORY_STATUSES, "all"],
        "memories": [memory_dict(m) for m in memories],
    }


def _midnight(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


async def memory_view(manager: MemoryManager, memory_id: int) -> dict[str, Any]:
    """One memory: its fields, atoms, graph neighbours and the messages it came from."""
    memory = await manager.get(memory_id)
    neighbours = await manager.neighbours(memory.id)  # waits for the derivation of its atoms
    atoms = await manager.atoms(memory.id)
    related = {m.id: m for m in await _memories(manager, [i for i, _ in neighbours.related])}
    sources = await manager.history.sources(memory.id)
    return {
        "agent": manager.jid,
        "memory": memory_dict(memory),
        "categories": list(manager.categories),
        "atoms": [
            {**dataclasses.asdict(atom), "expires_at_text": _when(atom.expires_at)}
            for atom in atoms
        ],
        "entities": [dataclasses.asdict(node) for node in neighbours.nodes],
        "relations": [
            {"source": s, "relation": r, "target": t, "weight": w}
            for s, r, t, w in neighbours.edges
        ],
        "related": [
            {"shared": shared, "memory": memory_dict(related[i])}
            for i, shared in neighbours.related
            if i in related
        ],
        "sources": [{**m.to_dict(), "at_text": _when(m.at)} for m in sources],
    }


async def _memories(manager: MemoryManager, ids: list[int]) -> list[Memory]:
    from ..errors import MemoryNotFound

    found: list[Memory] = []
    for memory_id in ids:
        try:
            found.append(await manager.get(memory_id))
        except MemoryNotFound:  # forgotten meanwhile
            continue
    return found


async def conversations_view(manager: MemoryManager) -> dict[str, Any]:
    """The kept conversations, and the conversations with notes."""
    kept = await manager.history.conversations()
    with_notes = await manager.conversations()
    kept_ids = {info.conversation_id for info in kept}
    return {
        "agent": manager.jid,
        "conversations": [
            {
                **dataclasses.asdict(info),
                "first_at_text": _when(info.first_at),
                "last_at_text": _when(info.last_at),
                "notes": info.conversation_id in with_notes,
            }
            for info in kept
        ],
        "notes_only": sorted(c for c in with_notes if c not in kept_ids),
    }


async def conversation_view(manager: MemoryManager, query: Query) -> dict[str, Any]:
    """One conversation: its kept messages (the newest 500) and its notes."""
    conversation_id = query.get("id", "")
    if not conversation_id.strip():
        raise InvalidToolInput("give the conversation as ?id=...")
    info = await manager.history.info(conversation_id)
    messages = await manager.history.messages(conversation_id, limit=_MESSAGES)
    notes = await manager.notes(conversation_id)
    return {
        "agent": manager.jid,
        "id": conversation_id,
        "info": None if info is None else dataclasses.asdict(info),
        "messages": [{**m.to_dict(), "at_text": _when(m.at)} for m in messages],
        "notes": [{**n.to_dict(), "created_at_text": _when(n.created_at)} for n in notes],
    }


async def maintenance_view(manager: MemoryManager) -> dict[str, Any]:
    """What maintenance is doing (with its progress), when each job last ran, the counts."""
    status = manager.maintenance_status
    last_runs = await manager.maintenance.last_runs()
    percent = None
    if status.total:
        percent = round(100 * min(status.done, status.total) / status.total)
    return {
        "agent": manager.jid,
        "status": status.to_dict(),
        "percent": percent,
        "last_runs": {job: {"at": at, "text": _when(at)} for job, at in last_runs.items()},
        "stats": dataclasses.asdict(await manager.stats()),
        "activity": await manager.activity(),
    }


async def graph_view(manager: MemoryManager, query: Query) -> dict[str, Any]:
    """The busiest entities and their relations, with Louvain communities."""
    # a conversation id as given: " c1" is not "c1" (ids are kept as written)
    conversation = query.get("conversation") or None
    node_type = _optional(query, "type")
    max_nodes = _int(query, "nodes", 150, low=1, high=LIMITS.graph_view_nodes)
    overview = await manager.graph_overview(
        max_nodes=max_nodes, conversation=conversation, node_type=node_type
    )
    document = await graph_document(overview)
    conversations = [info.conversation_id for info in await manager.history.conversations()]
    return {
        "agent": manager.jid,
        "conversation": conversation,
        "type": node_type,
        "nodes_asked": max_nodes,
        "types": await manager.graph_node_types(),
        "conversations": conversations,
        **document,
    }


async def node_view(manager: MemoryManager, node_id: int) -> dict[str, Any]:
    """One entity and the newest memories that name it."""
    node, memories = await manager.node_memories(node_id)
    return {
        "agent": manager.jid,
        "node": dataclasses.asdict(node),
        "memories": [memory_dict(m) for m in memories],
    }
