"""Facts read from a base memory file without opening the memory.

For listings and for choosing an embedder before a memory is opened: a plain
``sqlite3`` connection reads one figure and is closed. A file that cannot be
read gives ``None``; the caller checks the file exists (connecting creates it).
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "categories",
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


def categories(path: Path) -> tuple[str, ...]:
    """The categories of the database file: those its memory was opened with, then
    any other its memories have (none when it is missing or unreadable)."""
    if not path.is_file():
        return ()
    try:
        connection = sqlite3.connect(path, timeout=_TIMEOUT)
        try:
            named = [str(r[0]) for r in connection.execute("SELECT name FROM categories")]
            used = connection.execute("SELECT DISTINCT category FROM memories").fetchall()
        finally:
            connection.close()
    except sqlite3.Error:
        return ()
    found = dict.fromkeys(named)
    found.update(dict.fromkeys(str(r[0]) for r in used))
    return tuple(found)


def count_memories(path: Path) -> int | None:
    """How many memories (of any status) the database file holds."""
    value = _one(path, "SELECT count(*) FROM memories")
    return None if value is None else int(value)


def main_fingerprint(path: Path) -> str | None:
    """The embedder fingerprint of most stored vectors, else the one that wrote
    vectors last or was named before any (kept in ``meta``); ``None`` when the
    memory never had an embedder."""
    from .embeddings import LAST_EMBEDDER_SQL, MAIN_FINGERPRINT_SQL

    value = _one(path, MAIN_FINGERPRINT_SQL)
    if value is None:
        value = _one(path, LAST_EMBEDDER_SQL)
    return None if value is None else str(value)


def count_memories_readonly(path: Path) -> int | None:
    """How many memories the file holds, read without changing any file: no
    checkpoint, no sidecar created, its ``-shm`` index not written. For listings
    of agents that may be running, and for a file moved aside as damaged.

    A log (``-wal``) with its index (``-shm``) is read through that index opened
    read-only, which a running writer allows; a log without its index (left by a
    killed writer, or copied without it) from a private copy of the two files,
    since SQLite would create the index beside them; a database without a log
    (closed cleanly) as an immutable file. ``None`` when the file cannot be read,
    or was written while it was read without its index.
    """
    return _read_only(path, "SELECT count(*) FROM memories")


def _read_only(path: Path, sql: str) -> int | None:
    wal, shm = _sidecar(path, "-wal"), _sidecar(path, "-shm")
    if _sidecar(path, "-journal").exists():
        return None  # a rollback journal to replay first: only opening the memory can
    if wal.exists() and shm.exists():
        return _count(f"{path.resolve().as_uri()}?mode=ro&readonly_shm=1", sql)
    before = [_stamp(p) for p in (path, wal, shm)]
    if wal.exists():
        with tempfile.TemporaryDirectory(prefix="spade-memory-peek-") as folder:
            copy = Path(folder) / path.name
            try:
                shutil.copyfile(path, copy)
                shutil.copyfile(wal, _sidecar(copy, "-wal"))
            except OSError:
                return None
            value = _count(f"{copy.as_uri()}?mode=ro", sql)
    else:
        value = _count(f"{path.resolve().as_uri()}?mode=ro&immutable=1", sql)
    return value if [_stamp(p) for p in (path, wal, shm)] == before else None


def _count(uri: str, sql: str) -> int | None:
    try:
        connection = sqlite3.connect(uri, uri=True, timeout=_TIMEOUT)
    except sqlite3.Error:
        return None
    try:
        row = connection.execute(sql).fetchone()
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return None if row is None else int(row[0])


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def count_without_vector(path: Path, fingerprint: str) -> int | None:
    """How many memories (of any status) have no vector of ``fingerprint``."""
    value = _one(
        path,
        "SELECT count(*) FROM memories AS m LEFT JOIN embeddings AS e "
        "ON e.memory_id = m.id AND e.fingerprint = ? WHERE e.memory_id IS NULL",
        (fingerprint,),
    )
    return None if value is None else int(value)
