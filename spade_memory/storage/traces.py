"""What in a memory root shows that an agent's memory existed: its traces.

An agent whose database is missing is a new agent only if nothing else of its
memory is left. These are its traces: its entry in the root's registry, its
notes file, its FAISS snapshot, files of it moved aside as damaged
(``*.corrupt-*``) and its backups under ``backup/``. Opening a memory reads them
to tell a lost memory from a new one (:func:`find_traces`).

The cheap traces (the registry entry and two file names) are checked on every
open; the root and its backup folder are listed only when a trace is needed for
a decision or a report, since listing a root that holds many agents' files costs
each open time in proportion to their number.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from ..identity import AgentIdentity
from .backup_files import BackupInfo, list_backups

__all__ = ["Traces", "find_traces", "quarantined_files"]


@dataclass(frozen=True, slots=True)
class Traces:
    """What is left of an agent's memory in its root (besides its database)."""

    registered: bool
    """Its file stem is in ``.memory_metadata.json``."""
    notes: Path | None
    """Its notes file, if present."""
    snapshot: Path | None
    """Its FAISS snapshot, if present."""
    quarantined: tuple[Path, ...] = ()
    """Its database and notes files moved aside as damaged, oldest first."""
    backups: tuple[BackupInfo, ...] = ()
    """Its backups, oldest first."""
    listed: bool = False
    """Whether ``quarantined`` and ``backups`` were looked for."""

    def __bool__(self) -> bool:
        return bool(
            self.registered or self.notes or self.snapshot or self.quarantined or self.backups
        )

    def describe(self) -> str:
        """The traces in a few words, for a log line or an error."""
        parts: list[str] = []
        if self.registered:
            parts.append("it is registered in .memory_metadata.json")
        if self.notes is not None:
            parts.append(f"its notes file {self.notes.name} is there")
        if self.snapshot is not None:
            parts.append(f"its vector snapshot {self.snapshot.name} is there")
        if self.quarantined:
            names = ", ".join(path.name for path in self.quarantined)
            parts.append(f"files of it were moved aside as damaged ({names})")
        if self.backups:
            parts.append(f"{len(self.backups)} backup(s) of it are in backup/")
        return "; ".join(parts) if parts else "nothing of it is left"


def quarantined_files(root: Path, identity: AgentIdentity) -> tuple[Path, ...]:
    """The agent's database and notes files moved aside as damaged, oldest first."""
    found: list[Path] = []
    for name in (identity.database_name, identity.interactions_name):
        found.extend(root.glob(glob.escape(name) + ".corrupt-*"))
    # The name ends in a UTC stamp (and a counter): sort by it, not by the prefix.
    return tuple(sorted(found, key=lambda path: (path.name.rsplit(".corrupt-", 1)[1], path.name)))


def find_traces(root: Path, identity: AgentIdentity, *, registered: bool, listing: bool) -> Traces:
    """The traces of ``identity``'s memory under ``root`` (blocking).

    Args:
        root: the memory root.
        identity: the agent.
        registered: whether the registry lists it (read by the caller).
        listing: also list the root and ``backup/`` for quarantined files and backups.
    """
    notes = root / identity.interactions_name
    snapshot = root / identity.snapshot_name
    return Traces(
        registered=registered,
        notes=notes if os.path.lexists(notes) else None,
        snapshot=snapshot if os.path.lexists(snapshot) else None,
        quarantined=quarantined_files(root, identity) if listing else (),
        backups=tuple(list_backups(root, stem=identity.stem)) if listing else (),
        listed=listing,
    )
