"""A read-only look into one agent's base memory: its rows read in place, nothing written.

:meth:`MemoryView.open` opens the database file read-only (a plain ``sqlite3``
connection: no store, no writer, no engine) when it is a memory that needs
nothing done on opening: the current schema, owned by the agent, a sound
write-ahead log, its rows matching their checksums. Otherwise it returns
``None`` and the caller opens the memory as a store
(:meth:`BaseMemoryStore.open <spade_memory.storage.base.BaseMemoryStore.open>`),
which migrates it, moves a damaged file aside, or refuses another agent's file,
each with its own error.

The reads are the store's own functions (:mod:`.memory_reads`,
:class:`.atoms.AtomReads`, :func:`.checksums.verify`) over :meth:`MemoryView.fetchall`.
While open, a view holds an open marker (:mod:`.open_marker`): a restore refuses
the memory as it does while a store has it open.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..config import StorageConfig
from ..errors import StorageError, StoreClosedError
from . import checksums
from .open_marker import OpenMarker
from .schema import SCHEMA_VERSION
from .wal import check_wal

__all__ = ["MemoryView"]


class MemoryView:
    """One agent's base memory opened read-only. Open with :meth:`open`."""

    def __init__(self, db: sqlite3.Connection, marker: OpenMarker, *, label: str) -> None:
        self._db = db
        self._marker = marker
        self._label = label
        self._closed = False

    @classmethod
    async def open(cls, path: Path, *, agent: str, storage: StorageConfig) -> MemoryView | None:
        """A read-only view of ``agent``'s database ``path``, or ``None`` when the file
        needs what only a store's open does (see the module's docstring).

        Raises:
            StorageCorrupted: its write-ahead log was damaged; it was moved aside
                (as a store's open does).
            StorageError: the log could not be checked, or the open marker not made.
        """
        if not path.exists():
            return None
        try:
            await asyncio.to_thread(check_wal, path)
        except OSError as exc:
            raise StorageError(
                f"could not check the write-ahead log of {path.name}: {exc}"
            ) from exc
        marker = await asyncio.to_thread(OpenMarker.hold, path)
        try:
            db = await asyncio.to_thread(_connect, path, storage)
        except (sqlite3.Error, OSError):
            marker.release()
            return None
        view = cls(db, marker, label=path.name)
        try:
            usable = await view._usable(agent, storage)
        except (sqlite3.Error, StorageError):
            usable = False
        except BaseException:
            await view.aclose()
            raise
        if not usable:
            await view.aclose()
            return None
        return view

    async def _usable(self, agent: str, storage: StorageConfig) -> bool:
        """Whether a store's open would find nothing to do: no migration, no claim,
        no damage (its checks, read only)."""
        (version,) = (await self.fetchall("PRAGMA user_version"))[0]
        if version != SCHEMA_VERSION or await self.meta_get("agent") != agent:
            return False
        if storage.quick_check_on_open:
            problems = [str(row[0]) for row in await self.fetchall("PRAGMA quick_check")]
            if problems != ["ok"]:
                return False
        # altered, unsummed or lost rows: the store's open refuses or records them
        found = await checksums.verify(
            self.fetchall, whole_below=storage.verify_all_checksums_below
        )
        return not found

    async def __aenter__(self) -> MemoryView:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection and release the open marker; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.to_thread(self._db.close)
        finally:
            self._marker.release()

    @property
    def closed(self) -> bool:
        return self._closed

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run one read query (the ``Fetch`` of the store's read functions).

        Raises:
            StorageError: the query failed.
            StoreClosedError: the view is closed.
        """
        if self._closed:
            raise StoreClosedError(f"the view of {self._label} is closed")
        try:
            return await asyncio.to_thread(_rows, self._db, sql, params)
        except sqlite3.Error as exc:
            raise StorageError(f"{self._label}: query failed: {exc}") from exc

    async def meta_get(self, key: str) -> str | None:
        rows = await self.fetchall("SELECT value FROM meta WHERE key = ?", (key,))
        return None if not rows else str(rows[0][0])


def _connect(path: Path, storage: StorageConfig) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    try:
        db.execute(f"PRAGMA busy_timeout = {int(storage.busy_timeout_ms)}")
        checksums.register(db)  # what the checksum comparison computes
        db.execute("SELECT count(*) FROM sqlite_master").fetchall()
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.close()
        raise
    return db


def _rows(db: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    return db.execute(sql, params).fetchall()
