"""What a consistency check found and what it mended."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CHECK_KINDS", "ConsistencyReport"]

CHECK_KINDS: dict[str, str] = {
    "fts_missing": "memories without a keyword-index row",
    "fts_orphaned": "keyword-index rows of no memory",
    "fts_stale": "keyword-index rows that do not match their memory's text",
    "vectors_orphaned": "vectors of no memory",
    "vectors_malformed": "vectors of the wrong length or with non-finite values",
    "vectors_missing": "memories without a vector (the embedder picks them up)",
    "vectors_wrong_fingerprint": "vectors made by another embedder (embedded again)",
    "vectors_wrong_dimension": "vectors of the embedder's fingerprint but another length "
    "(deleted, embedded again)",
    "index_missing": "stored vectors missing from the FAISS index",
    "index_extra": "FAISS ids with no stored vector",
    "index_stale": "FAISS vectors that differ from the stored ones",
    "graph_orphaned": "graph rows of no memory, and nodes nothing refers to",
    "graph_missing": "memories without their graph",
    "integrity": "SQLite integrity problems (indexes are rebuilt; damaged tables need a backup)",
    "rows_altered": "memories whose row no longer matches the checksum written with it, "
    "or a checksum whose memory vanished (damage SQLite cannot see: restore a backup)",
}
_SAMPLE = 20


@dataclass
class ConsistencyReport:
    """What a check found and what it mended.

    Attributes:
        found: how many of each kind of problem (kinds: :data:`CHECK_KINDS`).
        fixed: how many of each were mended (or handed to the background embedder).
        samples: up to 20 memory ids per kind, to look at.
        messages: problems that are not counted by memory (integrity messages).
        deep: whether the slow checks ran (token and vector comparison, integrity).
        repair: whether problems were mended.
    """

    deep: bool = False
    repair: bool = False
    found: dict[str, int] = field(default_factory=dict)
    fixed: dict[str, int] = field(default_factory=dict)
    samples: dict[str, builtins.list[int]] = field(default_factory=dict)
    messages: builtins.list[str] = field(default_factory=list)

    def add(self, kind: str, ids: Sequence[int] = (), *, count: int | None = None) -> None:
        """Record ``count`` (default ``len(ids)``) problems of ``kind``."""
        number = len(ids) if count is None else count
        if number <= 0:
            return
        self.found[kind] = self.found.get(kind, 0) + number
        sample = self.samples.setdefault(kind, [])
        sample.extend(int(i) for i in ids[: max(0, _SAMPLE - len(sample))])

    def mend(self, kind: str, count: int) -> None:
        if count > 0:
            self.fixed[kind] = self.fixed.get(kind, 0) + count

    @property
    def problems(self) -> int:
        """How many problems were found."""
        return sum(self.found.values())

    @property
    def remaining(self) -> int:
        """How many found problems were not mended."""
        return sum(max(0, n - self.fixed.get(kind, 0)) for kind, n in self.found.items())

    @property
    def clean(self) -> bool:
        """Nothing was found."""
        return self.problems == 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "deep": self.deep,
            "repair": self.repair,
            "problems": self.problems,
            "remaining": self.remaining,
            "found": dict(self.found),
            "fixed": dict(self.fixed),
            "samples": {kind: list(ids) for kind, ids in self.samples.items()},
            "messages": list(self.messages),
        }
