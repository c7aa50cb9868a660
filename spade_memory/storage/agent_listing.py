"""The agents of a memory root with their files' sizes, memory counts and last activity.

One reader for every listing of a root (``spade-memory ls``, the agents page of
``spade-memory serve``), so that they count the same files:

- the database and its write-ahead log (``-wal``; its ``-shm`` index holds no data),
- the notes file and its journal,
- the vector snapshot,

and the backups under ``backup/``. Nothing is opened as a memory: no engine, no
index, no notes parser, and no file changed: the memories are counted by
:func:`.file_peek.count_memories_readonly`, which neither checkpoints a running
agent's log nor creates or writes a sidecar file.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..identity import AgentIdentity
from .backup_files import list_backups
from .file_peek import count_memories_readonly
from .registry import Registry

__all__ = ["AgentListing", "list_agents"]

_JOURNAL_SUFFIX = ".journal"  # notes_journal.JOURNAL_SUFFIX (that module loads pydantic)
_WAL_SUFFIX = "-wal"


@dataclass(frozen=True, slots=True)
class AgentListing:
    """One agent of a memory root, as its files show it."""

    jid: str
    stem: str
    memories: int | None
    """Memories of any status; ``None`` without a database, or one that cannot be read."""
    database_bytes: int
    """The database and its write-ahead log."""
    notes_bytes: int
    """The notes file and its journal."""
    snapshot_bytes: int
    """The vector snapshot."""
    backups: int
    last_activity: float | None
    """The newest modification time of those files (seconds since the epoch)."""

    @property
    def total_bytes(self) -> int:
        return self.database_bytes + self.notes_bytes + self.snapshot_bytes

    def as_dict(self) -> dict[str, Any]:
        """The fields and ``bytes`` (the total), for JSON."""
        return {
            "jid": self.jid,
            "stem": self.stem,
            "memories": self.memories,
            "bytes": self.total_bytes,
            "database_bytes": self.database_bytes,
            "notes_bytes": self.notes_bytes,
            "snapshot_bytes": self.snapshot_bytes,
            "backups": self.backups,
            "last_activity": self.last_activity,
        }


def list_agents(root: Path, agents: dict[str, str] | None = None) -> list[AgentListing]:
    """The agents of ``root`` by JID.

    Args:
        root: the memory root.
        agents: its ``{stem: JID}`` registry when the caller has read it already.
    """
    if agents is None:
        agents = Registry(root).agents()
    backups = Counter(info.stem for info in list_backups(root))
    rows = [
        _listing(root, AgentIdentity(jid=jid, stem=stem), backups[stem])
        for stem, jid in agents.items()
    ]
    return sorted(rows, key=lambda row: (row.jid, row.stem))


def _listing(root: Path, identity: AgentIdentity, backups: int) -> AgentListing:
    database = root / identity.database_name
    groups = {
        "database": (database, root / (identity.database_name + _WAL_SUFFIX)),
        "notes": (
            root / identity.interactions_name,
            root / (identity.interactions_name + _JOURNAL_SUFFIX),
        ),
        "snapshot": (root / identity.snapshot_name,),
    }
    sizes: dict[str, int] = {}
    times: list[float] = []
    for group, paths in groups.items():
        sizes[group] = 0
        for path in paths:
            try:
                info = path.stat()
            except OSError:
                continue
            sizes[group] += info.st_size
            times.append(info.st_mtime)
    return AgentListing(
        jid=identity.jid,
        stem=identity.stem,
        memories=count_memories_readonly(database) if database.exists() else None,
        database_bytes=sizes["database"],
        notes_bytes=sizes["notes"],
        snapshot_bytes=sizes["snapshot"],
        backups=backups,
        last_activity=max(times, default=None),
    )
