"""Damage SQLite does not flag at open: found, named, quarantined, or mended.

- A flipped byte in an index page passes ``PRAGMA quick_check`` (which does not
  compare indexes with their tables) and fails a later delete with "database
  disk image is malformed". Met while the memory is in use, it is handled as at
  open: the error names the file, the database is moved aside, the memory
  refuses further use. ``check(repair=True)`` builds the damaged index again.
- Flipped bytes in the middle of the write-ahead log make SQLite stop replaying
  it at the damaged frame and drop every later commit without an error. Opening
  finds the intact commits after the damage and refuses the log, named, moved
  aside byte for byte.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest
from rel_support import crash_config, memory_text

from spade_memory.errors import StorageCorrupted
from spade_memory.identity import AgentIdentity
from spade_memory.manager import MemoryManager

JID = "hidden@localhost"
IDENTITY = AgentIdentity.of(JID)
MEMORIES = 60
_PRISTINE: dict[str, Path] = {}


async def checkpointed_root(tmp_path: Path) -> Path:
    """A copy of a root whose database file alone holds ``MEMORIES`` memories."""
    if "root" not in _PRISTINE:
        pristine = tmp_path.parent / f"{tmp_path.name}-pristine"
        async with await MemoryManager.open(JID, crash_config(pristine)) as manager:
            for seq in range(MEMORIES):
                await manager.store(memory_text(seq))
            await manager.flush()
        _PRISTINE["root"] = pristine  # closed: checkpointed, no write-ahead log left
    root = tmp_path / "memory"
    shutil.copytree(_PRISTINE["root"], root)
    return root


def leaf_pages(database: Path, name: str) -> list[int]:
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (name,)
        ).fetchall()
    return [int(row[0]) for row in rows]


def flip(database: Path, offset: int) -> None:
    data = bytearray(database.read_bytes())
    data[offset] ^= 0x01
    database.write_bytes(bytes(data))


def quick_check(database: Path) -> list[str]:
    db = sqlite3.connect(database)
    try:
        return [str(row[0]) for row in db.execute("PRAGMA quick_check")]
    finally:
        db.close()


def damage_an_index(root: Path) -> Path:
    """Flip the last byte of an index page (a row id in its last entry)."""
    database = root / IDENTITY.database_name
    with sqlite3.connect(database) as db:
        page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
    page = leaf_pages(database, "memories_by_category")[0]
    flip(database, page * page_size - 1)
    assert quick_check(database) == ["ok"], "the damage must pass quick_check"
    return database


async def test_index_damage_met_while_in_use_is_named_and_quarantined(tmp_path: Path) -> None:
    root = await checkpointed_root(tmp_path)
    database = damage_an_index(root)
    manager = await MemoryManager.open(JID, crash_config(root))  # quick_check passes
    try:
        memories = await manager.list(limit=MEMORIES)
        forgotten = 0
        with pytest.raises(StorageCorrupted) as caught:
            for memory in memories:
                await manager.forget(memory.id)
                forgotten += 1
        error = caught.value
        assert error.path is not None and error.path.name == database.name
        assert database.name in str(error)
        assert error.quarantined_to is not None and error.quarantined_to.exists()
        assert not database.exists(), "the damaged database was left in place"
        with pytest.raises(StorageCorrupted) as again:
            await manager.store(memory_text(10_000))
        assert database.name in str(again.value)
        with pytest.raises(StorageCorrupted):
            await manager.search("record")
    finally:
        await manager.aclose()  # closing a memory found damaged raises nothing
    assert list((root / ".open").iterdir()) == [], "its open marker was left held"
    with sqlite3.connect(error.quarantined_to) as moved:
        count = moved.execute("SELECT count(*) FROM memories").fetchone()[0]
    assert count == MEMORIES - forgotten, "the quarantined copy does not hold what was there"


async def test_check_with_repair_rebuilds_a_damaged_index(tmp_path: Path) -> None:
    root = await checkpointed_root(tmp_path)
    damage_an_index(root)
    async with await MemoryManager.open(JID, crash_config(root)) as manager:
        report = await manager.check(repair=True)
        assert report.found.get("integrity"), "the damaged index was not found"
        assert report.fixed.get("integrity") == report.found["integrity"], report.messages
        for memory in await manager.list(limit=MEMORIES):
            await manager.forget(memory.id)
        await manager.flush()
        assert await manager.base_store.integrity_check() == ["ok"]
        assert await manager.base_store.count() == 0


def commit_frames(wal: bytes) -> tuple[int, list[int]]:
    """The page size and the numbers (from 0) of the commit frames of the log's generation."""
    _, _, page_size, _, salt1, salt2 = struct.unpack_from(">6I", wal)
    frame = 24 + page_size
    commits = []
    for number in range((len(wal) - 32) // frame):
        _, size, one, two = struct.unpack_from(">4I", wal, 32 + number * frame)
        if (one, two) == (salt1, salt2) and size:
            commits.append(number)
    return page_size, commits


async def test_commits_after_a_damaged_wal_frame_are_not_dropped_silently(
    tmp_path: Path,
) -> None:
    live = tmp_path / "live"
    stored: list[str] = []
    config = crash_config(live)
    # no checkpoint meanwhile: one started near the end would leave the log too few commits
    config = dataclasses.replace(
        config, storage=dataclasses.replace(config.storage, wal_checkpoint_pages=1_000_000)
    )
    async with await MemoryManager.open(JID, config) as manager:
        for seq in range(120):  # 120 acknowledged commits
            stored.append((await manager.store(memory_text(seq))).content)
        await manager.flush()
        root = tmp_path / "image"
        shutil.copytree(live, root)  # as a crash leaves it: the last commits in -wal
    name = IDENTITY.database_name + "-wal"
    wal = root / name
    data = bytearray(wal.read_bytes())
    page_size, commits = commit_frames(bytes(data))
    assert len(commits) >= 3
    target = commits[max(0, len(commits) - 6)] + 1  # the first frame of a later commit
    start = 32 + target * (24 + page_size) + 24
    for position in random.Random(16).sample(range(start, start + page_size), 16):
        data[position] ^= 0xFF
    wal.write_bytes(bytes(data))
    damaged = bytes(data)
    try:
        manager = await MemoryManager.open(JID, crash_config(root))
    except StorageCorrupted as exc:
        error = exc
    else:
        async with manager:
            shown = {m.content async for m in manager.base_store.iter_all()}
        pytest.fail(f"{len(set(stored) - shown)} acknowledged memories were dropped silently")
    assert name in str(error) and error.path is not None and error.path.name == name
    assert error.quarantined_to is not None and error.quarantined_to.read_bytes() == damaged
    assert not wal.exists()
    async with await MemoryManager.open(JID, crash_config(root)) as manager:
        shown = {m.content async for m in manager.base_store.iter_all()}
    assert shown <= set(stored)


def integrity_check(database: Path) -> list[str]:
    db = sqlite3.connect(database)
    try:
        return [str(row[0]) for row in db.execute("PRAGMA integrity_check")]
    finally:
        db.close()


def alter_a_memory(root: Path) -> bytes:
    """Flip one bit of a memory's text in its table page: still text, still a sound page."""
    database = root / IDENTITY.database_name
    with sqlite3.connect(database) as db:
        page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
    data = bytearray(database.read_bytes())
    text = memory_text(7).encode()
    pages = leaf_pages(database, "memories")
    page = next(p for p in pages if text in data[(p - 1) * page_size : p * page_size])
    start = (page - 1) * page_size
    position = data.index(text, start) + text.index(b"says") + 1
    data[position] ^= 0x01  # "says" reads "sbys"
    database.write_bytes(bytes(data))
    assert quick_check(database) == ["ok"] and integrity_check(database) == ["ok"]
    return bytes(data)


async def test_a_memory_altered_inside_its_page_is_found_on_open(tmp_path: Path) -> None:
    root = await checkpointed_root(tmp_path)
    database = root / IDENTITY.database_name
    damaged = alter_a_memory(root)
    try:
        manager = await MemoryManager.open(JID, crash_config(root))
    except StorageCorrupted as exc:
        error = exc
    else:
        async with manager:
            shown = {m.content async for m in manager.base_store.iter_all()}
        altered = sorted(shown - {memory_text(seq) for seq in range(MEMORIES)})
        pytest.fail(f"an altered memory was opened silently: {altered}")
    assert database.name in str(error) and "altered" in str(error)
    assert error.path is not None and error.path.name == database.name
    assert error.quarantined_to is not None and error.quarantined_to.read_bytes() == damaged
    assert not database.exists()


async def test_a_row_altered_after_an_open_verified_it_is_found_by_a_deep_check(
    tmp_path: Path,
) -> None:
    root = await checkpointed_root(tmp_path)
    config = crash_config(root)
    config = dataclasses.replace(
        config, storage=dataclasses.replace(config.storage, verify_all_checksums_below=1)
    )
    async with await MemoryManager.open(JID, config):
        pass  # verifies every row, once
    alter_a_memory(root)
    async with await MemoryManager.open(JID, config) as manager:  # verifies what is new
        report = await manager.check(deep=True)
    assert report.found.get("rows_altered") == 1, report.found


async def test_check_with_repair_rebuilds_a_damaged_keyword_index(tmp_path: Path) -> None:
    found = 0
    for offset in (3964, 3998, 4015):  # inside the last entries of a full-text index page
        root = await checkpointed_root(tmp_path / str(offset))
        database = root / IDENTITY.database_name
        page = leaf_pages(database, "memories_fts_data")[0]
        flip(database, (page - 1) * 4096 + offset)
        if quick_check(database) != ["ok"]:
            continue
        async with await MemoryManager.open(JID, crash_config(root)) as manager:
            report = await manager.check(repair=True)
            if not report.found.get("integrity"):
                continue
            found += 1
            assert report.fixed.get("integrity") == report.found["integrity"], report.messages
            assert (await manager.check(deep=True)).clean
            assert len(await manager.search("record", limit=5)) == 5
    assert found, "no flip damaged the keyword index where only its own check sees it"
