"""Upkeep of a memory: consistency check and repair, rebuilds, backups, decay, consolidation.

Each open :class:`~spade_memory.manager.MemoryManager` carries a
:class:`Maintenance` (``manager.maintenance``); the ``spade-memory`` command and the
maintenance behaviour drive it.
"""

from __future__ import annotations

from .backup import (
    BACKUP_FOLDER,
    BackupInfo,
    list_backups,
    prune_backups,
    restore_backup,
)
from .consistency import CHECK_KINDS, ConsistencyChecker, ConsistencyReport
from .consolidation import (
    ConsolidationResult,
    Merge,
    chance_similarity,
    validate_merge,
)
from .decay import (
    CleanupResult,
    DecayResult,
    decayed_importance,
    is_protected,
)
from .rebuild import (
    REBUILD_KINDS,
    Progress,
    Rebuilder,
    RebuildKind,
    RebuildResult,
)
from .service import Maintenance, MaintenanceState, MaintenanceStatus

__all__ = [
    "BACKUP_FOLDER",
    "CHECK_KINDS",
    "REBUILD_KINDS",
    "BackupInfo",
    "CleanupResult",
    "ConsistencyChecker",
    "ConsistencyReport",
    "ConsolidationResult",
    "DecayResult",
    "Maintenance",
    "MaintenanceState",
    "MaintenanceStatus",
    "Merge",
    "Progress",
    "RebuildKind",
    "RebuildResult",
    "Rebuilder",
    "chance_similarity",
    "decayed_importance",
    "is_protected",
    "list_backups",
    "prune_backups",
    "restore_backup",
    "validate_merge",
]
