"""Damage of a base-memory database found while it is in use.

SQLite reports some damage only when a statement reads or writes the damaged
page: an index entry that no longer matches its row, a keyword-index page whose
content was altered, pass ``PRAGMA quick_check`` at open and fail a later delete
with "database disk image is malformed". :class:`DamageGuard` treats such an
error like damage found at open: the connection is closed, the database (with
its ``-wal`` and ``-shm``) is moved aside as
:func:`~spade_memory.storage.database_open.quarantine_damaged` moves it, and the
call that met it, and every later call of the store, raise one
:class:`~spade_memory.errors.StorageCorrupted` that names the file and where it
went.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

from ..errors import StorageCorrupted
from .database_open import is_damage, quarantine_damaged

__all__ = ["DamageGuard", "damage_in"]

logger = logging.getLogger(__name__)


def damage_in(exc: BaseException) -> sqlite3.DatabaseError | None:
    """The SQLite error in ``exc`` or its causes that says the file is damaged, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sqlite3.DatabaseError) and is_damage(current):
            return current
        current = current.__cause__ or current.__context__
    return None


class DamageGuard:
    """Watches the errors of one store's connection for damage of its file.

    Args:
        path: the database file, or ``None`` for an in-memory database (then the
            store is only refused: there is nothing to move).
        label: how messages name the database.
        close: closes the store's connection (before its file is moved).
    """

    def __init__(
        self, path: Path | None, *, label: str, close: Callable[[], Awaitable[None]]
    ) -> None:
        self._path = path
        self._label = label
        self._close = close
        self._error: StorageCorrupted | None = None
        self._settled = asyncio.Event()

    @property
    def error(self) -> StorageCorrupted | None:
        """The error every call raises since damage was found; ``None`` while sound."""
        return self._error

    async def settled(self) -> None:
        """Wait until damage found (if any) has been dealt with: the connection
        closed, the file moved aside."""
        if self._error is not None:
            await self._settled.wait()

    def check(self) -> None:
        """Raise the damage error if damage was found.

        Raises:
            StorageCorrupted: the database was found damaged and moved aside.
        """
        if self._error is not None:
            raise self._error

    async def seen(self, exc: BaseException) -> StorageCorrupted | None:
        """Look at an error of the connection; on damage, close and move the file aside.

        Returns:
            The error to raise instead of ``exc`` when ``exc`` (or what caused it)
            says the file is damaged, or when damage was found before; else ``None``.
        """
        if self._error is not None:
            await self._settled.wait()
            return self._error
        damage = damage_in(exc)
        if damage is None:
            return None
        self._error = StorageCorrupted(
            f"{self._label} is damaged ({damage}); this memory is closed",
            path=self._path,
        )
        try:
            with contextlib.suppress(Exception):
                await self._close()
            self._error = await asyncio.to_thread(self._quarantine, damage)
        finally:
            self._settled.set()
        return self._error

    def _quarantine(self, damage: sqlite3.DatabaseError) -> StorageCorrupted:
        if self._path is None or not self._path.exists():
            logger.error("%s found damaged while in use: %s", self._label, damage)
            return StorageCorrupted(
                f"{self._label} was found damaged while in use ({damage}); this memory "
                "is closed and refuses further use",
                path=self._path,
            )
        try:
            moved = quarantine_damaged(self._path, damage)
        except OSError as exc:
            logger.error("%s found damaged; could not move it aside: %s", self._path, exc)
            return StorageCorrupted(
                f"{self._path} was found damaged while in use ({damage}) and could not "
                f"be moved aside ({exc}); this memory is closed and refuses further use",
                path=self._path,
            )
        return StorageCorrupted(
            f"{self._path} was found damaged while in use ({damage}); it was moved to "
            f"{moved.quarantined_to}. This memory is closed and refuses further use: "
            "close it, then restore the file from backup/ (or open again to start "
            "with an empty memory)",
            path=self._path,
            quarantined_to=moved.quarantined_to,
        )
