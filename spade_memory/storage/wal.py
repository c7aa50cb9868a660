"""A check of SQLite's write-ahead log before a database opens.

In WAL mode the last commits live only in ``<database>-wal`` until a checkpoint
copies them into the database file. SQLite ignores a log whose 32-byte header
fails its checksum, and overwrites it at the next write, so a damaged header
would silently drop every commit the log holds. :func:`check_wal` catches that
first: the log is moved aside (quarantined, never deleted) and
:class:`~spade_memory.errors.StorageCorrupted` is raised; the next open then
shows what the database file holds.

A log cut short after its header is not caught here: SQLite keeps the commits
whose frames are whole, which is what a crash leaves too. A log damaged in its
middle is: SQLite would replay it up to the damaged frame and silently drop the
intact commits after it (:mod:`spade_memory.storage.wal_frames` finds them), so
it is moved aside the same way.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StorageCorrupted
from .files import quarantine

if TYPE_CHECKING:  # its frames are read with numpy, loaded when a log holds any
    from .wal_frames import DroppedCommits

__all__ = ["check_wal", "wal_header_valid"]

logger = logging.getLogger(__name__)

_HEADER_SIZE = 32
_MAGIC_LITTLE = 0x377F0682  # checksums over little-endian words
_MAGIC_BIG = 0x377F0683  # checksums over big-endian words
_VERSION = 3007000
_READS = 3  # a header read while another process rewrites it is read again


def _checksum(data: bytes, big_endian: bool) -> tuple[int, int]:
    words = struct.unpack((">" if big_endian else "<") + f"{len(data) // 4}I", data)
    s0 = s1 = 0
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def wal_header_valid(header: bytes) -> bool:
    """Whether ``header`` (the first 32 bytes of a WAL file) is one SQLite accepts."""
    if len(header) < _HEADER_SIZE:
        return False
    magic, version, page_size = struct.unpack_from(">III", header)
    if magic not in (_MAGIC_LITTLE, _MAGIC_BIG) or version != _VERSION:
        return False
    if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        return False
    stored = struct.unpack_from(">II", header, 24)
    return _checksum(header[:24], magic == _MAGIC_BIG) == stored


def _read_header(path: Path) -> bytes | None:
    try:
        with path.open("rb") as handle:
            return handle.read(_HEADER_SIZE)
    except FileNotFoundError:
        return None


def _read_log(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _dropped(wal: Path) -> DroppedCommits | None:
    """Commits SQLite would drop from ``wal``, found alike by two reads in a row.

    Another process may append to the log, or start it anew, while it is read:
    what one read finds is only reported when the next read finds the same.
    """
    from .wal_frames import dropped_commits

    data = _read_log(wal)
    found = None if data is None else dropped_commits(data)
    for _ in range(_READS):
        if found is None:
            return None
        time.sleep(0.02)
        data = _read_log(wal)
        again = None if data is None else dropped_commits(data)
        if again == found:
            return found
        found = again
    return None


def check_wal(database: Path) -> None:
    """Refuse to open ``database`` over a damaged write-ahead log.

    Damaged means: its header fails SQLite's checks (every commit it holds would
    be dropped), or intact commits follow a damaged frame (SQLite would drop
    them). A missing log, one shorter than its header, or one torn at its end is
    what SQLite itself or a crash leaves, and is accepted.

    Raises:
        StorageCorrupted: the log was damaged; it was moved aside (with the
            ``-shm`` index that describes it).
        OSError: the log could not be read or moved.
    """
    wal = database.with_name(database.name + "-wal")
    for attempt in range(_READS):
        header = _read_header(wal)
        if header is None or len(header) < _HEADER_SIZE:
            return
        if wal_header_valid(header):
            _check_frames(database, wal)
            return
        if attempt + 1 < _READS:
            time.sleep(0.02)
    moved = quarantine(wal, "damaged write-ahead log header")
    shm = database.with_name(database.name + "-shm")
    with contextlib.suppress(OSError):
        shm.replace(moved.with_name(moved.name + "-shm"))
    raise StorageCorrupted(
        f"{wal} (the write-ahead log of {database.name}) is damaged: its header fails "
        f"SQLite's checks, so the commits it held cannot be read; it was moved to {moved}. "
        f"Opening again shows what {database.name} itself holds; restore from backup/ "
        "to get the rest back",
        path=wal,
        quarantined_to=moved,
    )


def _check_frames(database: Path, wal: Path) -> None:
    """Raise (the log moved aside) when intact commits follow a damaged frame."""
    found = _dropped(wal)
    if found is None:
        return
    moved = quarantine(
        wal, f"damaged write-ahead log: frame {found.first_damaged} of {found.frames}"
    )
    shm = database.with_name(database.name + "-shm")
    with contextlib.suppress(OSError):
        shm.replace(moved.with_name(moved.name + "-shm"))
    raise StorageCorrupted(
        f"{wal} (the write-ahead log of {database.name}) is damaged: frame "
        f"{found.first_damaged} of {found.frames} fails its checksum, and SQLite would "
        f"silently drop the {found.commits} intact commits after it; the log was moved "
        f"to {moved}. Opening again shows what {database.name} itself holds; restore "
        "from backup/ to get the rest back",
        path=wal,
        quarantined_to=moved,
    )
