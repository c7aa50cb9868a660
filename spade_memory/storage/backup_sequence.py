"""The order backups of a memory were taken in, whatever the clock said at the time.

The time in a backup's name comes from the system clock, which can jump ahead or
back; the order of backups cannot rest on it. Each backup therefore takes a number,
its sequence, which grows with every backup of the agent and is written into its
name (``….s{N}.db``, :mod:`spade_memory.storage.backup_files`), so that listing
the backups reads names only.

The number is taken in one write transaction from a counter kept in the live
database's own ``meta`` table (:data:`~spade_memory.storage.schema.BACKUP_SEQUENCE_KEY`),
and is never below one more than the largest number among the agent's backups
already in the folder:

- the counter survives restarts and clock changes, and goes into every backup with
  the rest of the database; backups moved away and brought back later still sort
  before the ones taken meanwhile;
- the floor from the folder covers a database that went back in time: one restored
  from an older backup (by hand or on open of a lost memory) holds that backup's
  counter, and the backups taken after the restore must sort after every backup
  already there, the ``pre-restore`` copy among them.

Two processes backing up one memory at once take different numbers: the counter
moves inside ``BEGIN IMMEDIATE``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .schema import BACKUP_SEQUENCE_KEY

__all__ = ["recorded_sequence", "take_sequence"]

_TIMEOUT = 10.0  # seconds to wait for a writer holding the database

_TAKE = (
    "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
    # meta holds text: compared as numbers (text sorts after any number)
    "value = max(CAST(value AS INTEGER) + 1, CAST(excluded.value AS INTEGER))"
)
_READ = "SELECT value FROM meta WHERE key = ?"


def take_sequence(db: sqlite3.Connection, *, after: int) -> int:
    """The next backup number of the database on ``db``, counted as taken.

    It is above every number the database gave before and above ``after`` (the
    largest number among the backups already there). Runs a whole transaction of
    its own: ``db`` must have none open.

    Raises:
        sqlite3.Error: the counter could not be moved (nothing was changed).
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(_TAKE, (BACKUP_SEQUENCE_KEY, after + 1))
        (value,) = db.execute(_READ, (BACKUP_SEQUENCE_KEY,)).fetchone()
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return int(value)


def recorded_sequence(database: Path) -> int:
    """The last backup number the closed database file gave (0 when it gave none or
    cannot be read); nothing is written. The caller checks the file is there
    (connecting would create it)."""
    try:
        connection = sqlite3.connect(database, timeout=_TIMEOUT)
        try:
            row = connection.execute(_READ, (BACKUP_SEQUENCE_KEY,)).fetchone()
        finally:
            connection.close()
    except sqlite3.Error:
        return 0
    try:
        return 0 if row is None else int(row[0])
    except ValueError:
        return 0
