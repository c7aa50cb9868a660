"""Facts read from a base memory file without opening the memory.

For listings and for choosing an embedder before a memory is opened: a plain
``sqlite3`` connection reads one figure and is closed. A file that cannot be
read gives ``None``; the caller checks the file exists (connecting creates it).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

__all__ = [
    "count_memories",
    "count_memories_readonly",
    "count_without_vector",
    "main_fingerprint",
]

_TIMEOUT = 10.0  # seconds to wait for a writer holding the database


def _one(path: Path, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the first row of ``sql`` on ``path``; ``None`` when unreadable."""
    try:
        connection = sqlite3.connect(path, timeout=_TIMEOUT)
        try:
            row = connection.execute(sql, params).fetchone()
        finally:
            connection.close()
    except sqlite3.Error:
        return None
    return None if row is None else row[0]


def count_memories(path: Path) -> int | None:
    """How many memories (of any status) the database file holds."""
    value = _one(path, "SELECT count(*) FROM memories")
    return None if value is None else int(value)


def main_fingerprint(path: Path) -> str | None:
    """The embedder fingerprint of most stored vectors, else the one that wrote
    vectors last (kept in ``meta``); ``None`` when the memory never had a vector."""
    from .embeddings import LAST_EMBEDDER_SQL, MAIN_FINGERPRINT_SQL

    value = _one(path, MAIN_FINGERPRINT_SQL)
    if value is None:
        value = _one(path, LAST_EMBEDDER_SQL)
    return None if value is None else str(value)


def count_memories_readonly(path: Path) -> int | None:
    """How many memories the file holds, read without changing it in any way (no
    checkpoint, no new sidecar file): for a file moved aside as damaged."""
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = connection.execute("SELECT count(*) FROM memories").fetchone()
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return None if row is None else int(row[0])


def count_without_vector(path: Path, fingerprint: str) -> int | None:
    """How many memories (of any status) have no vector of ``fingerprint``."""
    value = _one(
        path,
        "SELECT count(*) FROM memories AS m LEFT JOIN embeddings AS e "
        "ON e.memory_id = m.id AND e.fingerprint = ? WHERE e.memory_id IS NULL",
        (fingerprint,),
    )
    return None if value is None else int(value)
