"""SQLite's own structures of the base memory: their checks and their rebuild.

``PRAGMA integrity_check`` reads every b-tree and compares each index with its
table; the full-text tables check their own index with their ``integrity-check``
command. An index (a b-tree index or a full-text index) holds nothing that its
table does not, so damage confined to one is mended by building it again
(``REINDEX``, the full-text ``rebuild`` command). Damage of the tables themselves
is not mended here: restore a backup.

Both run as one whole transaction of the store's writer, and catch SQLite's
"malformed" errors inside it: they are what these checks look for, so they are
reported as problems, never taken for damage found in use (which would move the
database aside).
"""

from __future__ import annotations

import sqlite3

__all__ = ["FTS_TABLES", "rebuild_indexes", "structure_problems"]

FTS_TABLES = ("memories_fts", "graph_entries_fts")
"""The full-text tables of the base memory."""

_SAMPLE = 50


def structure_problems(db: sqlite3.Connection) -> list[str]:
    """What ``PRAGMA integrity_check`` and the full-text checks report; empty when sound."""
    problems: list[str] = []
    try:
        rows = db.execute(f"PRAGMA integrity_check({_SAMPLE})").fetchall()
    except sqlite3.DatabaseError as exc:
        problems.append(f"integrity_check failed: {exc}")
    else:
        problems.extend(str(row[0]) for row in rows if str(row[0]) != "ok")
    for table in FTS_TABLES:
        try:
            db.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as exc:
            problems.append(f"{table}: {exc}")
    return problems


def rebuild_indexes(db: sqlite3.Connection) -> list[str]:
    """Build every index and full-text index again; the problems left afterwards.

    Runs inside the caller's transaction, in a savepoint: if a rebuild fails (the
    tables themselves are damaged), nothing is changed and the failure is one of
    the problems returned.
    """
    db.execute("SAVEPOINT rebuild_indexes")
    try:
        db.execute("REINDEX")
        for table in FTS_TABLES:
            db.execute(f"INSERT INTO {table} ({table}) VALUES ('rebuild')")
    except sqlite3.DatabaseError as exc:
        db.execute("ROLLBACK TO rebuild_indexes")
        db.execute("RELEASE rebuild_indexes")
        return [f"rebuilding the indexes failed: {exc}", *structure_problems(db)]
    db.execute("RELEASE rebuild_indexes")
    return structure_problems(db)
