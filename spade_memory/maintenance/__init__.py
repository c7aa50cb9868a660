"""Upkeep of a memory: consistency check and repair, rebuilds, backups, decay, consolidation.

Each open :class:`~spade_memory.manager.MemoryManager` carries a
:class:`Maintenance` (``manager.maintenance``); the ``spade-memory`` command and the
maintenance behaviour drive it.

The names below are imported when first used (PEP 562): listing a root's backups
does not load the checker, the rebuilds or the vector index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import on_first_use

if TYPE_CHECKING:
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

_SOURCES: dict[str, str] = {
    "BACKUP_FOLDER": "backup",
    "BackupInfo": "backup",
    "CHECK_KINDS": "consistency",
    "CleanupResult": "decay",
    "ConsistencyChecker": "consistency",
    "ConsistencyReport": "consistency",
    "ConsolidationResult": "consolidation",
    "DecayResult": "decay",
    "Maintenance": "service",
    "MaintenanceState": "service",
    "MaintenanceStatus": "service",
    "Merge": "consolidation",
    "Progress": "rebuild",
    "REBUILD_KINDS": "rebuild",
    "RebuildKind": "rebuild",
    "RebuildResult": "rebuild",
    "Rebuilder": "rebuild",
    "chance_similarity": "consolidation",
    "decayed_importance": "decay",
    "is_protected": "decay",
    "list_backups": "backup",
    "prune_backups": "backup",
    "restore_backup": "backup",
    "validate_merge": "consolidation",
}


__getattr__, __dir__ = on_first_use(globals(), _SOURCES)
