"""Forgetting: importance decay, archiving or deleting what no longer matters, atom expiry.

- Decay: every active memory loses ``rate`` of its importance per day since the
  previous run, slowed by how often it was recalled: the days count
  ``1 / (1 + access count)``, and the access count is halved after each run, so
  old recalls fade and recent ones protect. Memories whose metadata holds
  ``{"protected": true}`` never decay and are never cleaned up.
- Cleanup: active memories at or below an importance, older than an age and not
  recalled for some days are archived (status ``archived``: kept, not searched,
  restorable) or deleted, as :class:`~spade_memory.config.MaintenanceConfig` says.
- Expiry: atoms past their lifetime are recorded dormant, then expired (see
  :mod:`spade_memory.text.atoms`).

Time is the memory's clock (injectable), never the wall clock directly.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import MaintenanceConfig
from ..errors import MemoryNotFound
from ..storage import lifecycle
from ..storage.lifecycle import DecayRow

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = [
    "CleanupResult",
    "DecayResult",
    "cleanup",
    "decay_importance",
    "decayed_importance",
    "is_protected",
    "set_status",
]

logger = logging.getLogger(__name__)

_DAY = 86_400.0
_BATCH = 500


@dataclass(frozen=True, slots=True)
class DecayResult:
    """What one decay run changed."""

    decayed: int
    protected: int
    days: float

    def to_dict(self) -> dict[str, Any]:
        return {"decayed": self.decayed, "protected": self.protected, "days": self.days}


@dataclass(frozen=True, slots=True)
class CleanupResult:
    """What one cleanup run archived or deleted (memory ids)."""

    policy: str
    archived: tuple[int, ...] = ()
    deleted: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "archived": list(self.archived),
            "deleted": list(self.deleted),
        }


def decayed_importance(importance: float, *, days: float, access_count: int, rate: float) -> float:
    """The importance after ``days`` of decay at ``rate`` per day, slowed by accesses.

    Returns ``importance * (1 - rate) ** (days / (1 + access_count))``, in [0, 1].
    """
    if days <= 0 or rate <= 0:
        return importance
    slowdown = 1.0 + max(0, int(access_count))
    return max(0.0, min(1.0, float(importance * (1.0 - rate) ** (days / slowdown))))


def _metadata(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def is_protected(metadata: Any) -> bool:
    """Whether a memory's metadata (a dict, or its JSON text) marks it protected."""
    if not isinstance(metadata, dict):
        metadata = _metadata(metadata)
    return metadata.get("protected") is True


async def decay_importance(
    engine: Engine, *, now: float, since: float, rate_per_day: float
) -> DecayResult:
    """Decay every unprotected active memory from ``since`` (or its creation) to ``now``.

    Each batch is read and written in one transaction, so a concurrent change of
    importance is never overwritten with a stale value.
    """
    decayed = protected = 0
    longest = 0.0
    last: int | None = 0

    def decide(rows: list[DecayRow]) -> list[tuple[float, int, int]]:
        nonlocal decayed, protected, longest
        updates: list[tuple[float, int, int]] = []
        for memory_id, importance, access_count, created_at, metadata in rows:
            if is_protected(metadata):
                protected += 1
                continue
            days = max(0.0, (now - max(since, float(created_at))) / _DAY)
            if days <= 0:  # no time passed (a clock set back): nothing decays
                continue
            longest = max(longest, days)
            value = decayed_importance(
                float(importance), days=days, access_count=int(access_count), rate=rate_per_day
            )
            updates.append((value, int(access_count) // 2, int(memory_id)))
        decayed += len(updates)
        return updates

    while last is not None:
        last = await lifecycle.decay_batch(engine.base, last, _BATCH, decide)
    if decayed:
        engine.notify_changed()
    logger.info("%s: importance decayed on %d memories", engine.jid, decayed)
    return DecayResult(decayed=decayed, protected=protected, days=longest)


async def set_status(
    engine: Engine, memory_ids: Sequence[int], status: str, *, now: float
) -> list[int]:
    """Archive (``"archived"``) or restore (``"active"``) memories; returns those changed.

    An archived memory keeps its text, vector and graph; it is left out of
    searches and listings until restored. ``archived_at`` in its metadata records
    when it was archived.
    """
    if status not in ("active", "archived"):
        raise ValueError(f"status must be 'active' or 'archived', got {status!r}")
    previous = "archived" if status == "active" else "active"
    wanted = list(dict.fromkeys(int(i) for i in memory_ids))

    def edit(raw: Any) -> str:
        metadata = _metadata(raw)
        if status == "archived":
            metadata["archived_at"] = now
        else:
            metadata.pop("archived_at", None)
        return json.dumps(metadata, ensure_ascii=False)

    changed = await lifecycle.set_status(
        engine.base,
        wanted,
        status,
        previous=previous,
        metadata=edit,
        accessed=now if status == "active" else None,
    )
    if changed:
        engine.notify_changed()
    return changed


async def cleanup(engine: Engine, *, now: float, config: MaintenanceConfig) -> CleanupResult:
    """Archive or delete old, unimportant, unused memories, as ``config`` says."""
    policy = config.cleanup_policy
    if policy == "off":
        return CleanupResult(policy=policy)
    rows = await lifecycle.cleanup_candidates(
        engine.base,
        max_importance=config.cleanup_max_importance,
        created_before=now - config.cleanup_min_age_days * _DAY,
        idle_since=now - config.cleanup_idle_days * _DAY,
    )
    doomed = [int(row[0]) for row in rows if not is_protected(row[1])]
    if not doomed:
        return CleanupResult(policy=policy)
    if policy == "archive":
        archived = await set_status(engine, doomed, "archived", now=now)
        logger.info("%s: archived %d unimportant memories", engine.jid, len(archived))
        return CleanupResult(policy=policy, archived=tuple(archived))
    deleted: list[int] = []
    for memory_id in doomed:
        try:
            await engine.forget(memory_id)
        except MemoryNotFound:
            continue
        deleted.append(memory_id)
    logger.info("%s: deleted %d unimportant memories", engine.jid, len(deleted))
    return CleanupResult(policy=policy, deleted=tuple(deleted))
