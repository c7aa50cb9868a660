"""Backups through the SQLite backup API, restores into a stopped agent, retention, and
the order backups were taken in, whatever the clock said."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from factories import UNDO_ALIASES
from maint_support import DAY, FACTS, Clock, Opener, fill

from spade_memory.config import MaintenanceConfig, MemoryConfig, StorageConfig
from spade_memory.errors import ConfigError, StorageError
from spade_memory.identity import AgentIdentity
from spade_memory.maintenance.backup import list_backups, prune_backups, restore_backup
from spade_memory.manager import MemoryManager
from spade_memory.storage.backup_files import backup_name

ALICE = AgentIdentity.of("alice@localhost")


def contents(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return [row[0] for row in connection.execute("SELECT content FROM memories ORDER BY id")]
    finally:
        connection.close()


async def test_backup_then_restore_brings_back_exactly_that_memory(
    open_memory: Opener, root: Path, clock: Clock
) -> None:
    memory = await open_memory()
    await fill(memory, FACTS[:6])
    await memory.add_note("conv-1", "Alice asked about the Lisbon office", author="bob@localhost")
    backup = await memory.backup()
    assert backup.parent == root / "backup" and backup.name.startswith(ALICE.stem)
    assert contents(backup) == list(FACTS[:6])
    assert not list(backup.parent.glob("*-wal"))  # one self-contained file
    saved_export = await memory.export()
    with pytest.raises(StorageError, match="open in this process"):
        await asyncio.to_thread(restore_backup, root, "alice@localhost", backup)

    clock.advance(1)
    await memory.store("Written after the backup: the canteen serves ramen")
    await memory.forget(1)
    await memory.add_note("conv-1", "a later note")
    await memory.aclose()

    previous = await asyncio.to_thread(restore_backup, root, "alice@localhost", backup, now=clock())
    assert "ramen" in " ".join(contents(previous))  # what was replaced is kept
    assert [info.kind for info in list_backups(root, stem=ALICE.stem)] == ["manual", "pre-restore"]
    assert not (root / ALICE.snapshot_name).exists()  # the cache of the old vectors is gone

    memory = await open_memory()
    await memory.flush()
    restored = await memory.export()
    assert restored["memories"] == saved_export["memories"]
    assert restored["notes"] == saved_export["notes"]
    assert (await memory.check(deep=True)).clean
    assert (await memory.search("Lisbon office"))[0].memory.content == FACTS[1]
    assert all("ramen" not in r.memory.content for r in await memory.search("ramen"))


async def test_restores_in_one_second_keep_every_memory_and_notes_they_replace(
    open_memory: Opener, root: Path, clock: Clock
) -> None:
    memory = await open_memory()
    await fill(memory, FACTS[:2])
    await memory.add_note("conv-1", "a note before the backup")
    backup = await memory.backup()
    clock.advance(1)
    await memory.store("Written after the backup: the canteen serves ramen")
    await memory.add_note("conv-1", "a note after the backup")
    await memory.aclose()
    first = await asyncio.to_thread(restore_backup, root, "alice@localhost", backup, now=clock())
    second = await asyncio.to_thread(restore_backup, root, "alice@localhost", backup, now=clock())
    assert first != second  # the second does not overwrite the first
    listed = [info.path for info in list_backups(root, stem=ALICE.stem)]
    assert listed[-2:] == [first, second]  # of one second, the serial orders them
    assert "ramen" in " ".join(contents(first))
    # undoing the restore brings back what it replaced, the notes too
    await asyncio.to_thread(restore_backup, root, "alice@localhost", first, now=clock())
    memory = await open_memory()
    assert "ramen" in " ".join(m.content for m in await memory.list(limit=10))
    assert [n.content for n in await memory.notes("conv-1")] == [
        "a note before the backup",
        "a note after the backup",
    ]


async def test_restore_refuses_what_is_not_this_agents_backup(
    open_memory: Opener, root: Path, tmp_path: Path
) -> None:
    bob = await open_memory("bob@localhost")
    await bob.store("Bob's memory")
    bob_backup = await bob.backup()
    await bob.aclose()
    alice = await open_memory()
    await alice.store("Alice's memory")
    await alice.aclose()
    with pytest.raises(StorageError, match="memory of 'bob@localhost', not of 'alice@localhost'"):
        restore_backup(root, "alice@localhost", bob_backup)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageError, match="not a readable memory backup"):
        restore_backup(root, "alice@localhost", garbage)
    with pytest.raises(StorageError, match="no backup file"):
        restore_backup(root, "alice@localhost", tmp_path / "missing.db")
    assert contents(root / ALICE.database_name) == ["Alice's memory"]


async def test_backups_older_than_the_retention_are_removed(
    open_memory: Opener, root: Path, clock: Clock
) -> None:
    memory = await open_memory(storage=StorageConfig(backup_keep_days=14))
    await memory.store("a memory worth keeping")
    first = await memory.backup()
    clock.advance(10)
    second = await memory.backup()
    clock.advance(10)
    third = await memory.backup()
    assert [info.path for info in list_backups(root)] == [second, third]
    assert not first.exists()
    notes = sorted(path.name for path in (root / "backup").glob("*.json"))
    assert notes == [
        path.name.replace("_base_memory.", "_interactions.").removesuffix(".db") + ".json"
        for path in (second, third)
    ]
    migration = root / "backup" / f"{ALICE.stem}_base_memory.v1.20200101T000000.db"
    migration.write_bytes(third.read_bytes())
    assert [info.kind for info in list_backups(root)] == ["migration", "manual", "manual"]
    removed = prune_backups(root, keep_days=0, now=clock() + 1)
    assert removed == [migration, second]
    assert [info.path for info in list_backups(root)] == [third]  # the newest always stays


async def test_scheduled_backups_follow_their_interval(
    open_memory: Opener, root: Path, clock: Clock
) -> None:
    memory = await open_memory(
        maintenance=MaintenanceConfig(check_on_open=False, backup_interval_hours=24)
    )
    await memory.store("scheduled backups")
    assert "backup" in await memory.maintenance.run_due()
    assert "backup" not in await memory.maintenance.run_due()
    clock.advance(1)
    ran = await memory.maintenance.run_due()
    assert Path(ran["backup"]["path"]).exists()
    assert len(list_backups(root)) == 2


async def test_an_in_memory_memory_cannot_be_backed_up() -> None:
    config = MemoryConfig(
        in_memory=True,
        embedder=None,
        maintenance=MaintenanceConfig(check_on_open=False, backup_interval_hours=24),
    )
    async with await MemoryManager.open("eph@localhost", config) as memory:
        with pytest.raises(ConfigError, match="in-memory"):
            await memory.backup()
        assert "backup" not in await memory.maintenance.run_due()


# -- the order backups were taken in, whatever the clock said ---------------------------


def lose_database(root: Path) -> None:
    """Delete the agent's database as a failed disk would (its registry entry stays)."""
    database = root / ALICE.database_name
    for side in ("", "-wal", "-shm"):
        database.with_name(database.name + side).unlink(missing_ok=True)


def as_named_by_an_older_version(backup: Path, stamp: str) -> Path:
    """``backup`` (and its notes) as a version without backup sequences left it."""
    old = backup.with_name(f"{ALICE.stem}_base_memory.{stamp}.db")
    backup.rename(old)
    notes = backup.with_name(
        backup.name.replace("_base_memory.", "_interactions.").removesuffix(".db") + ".json"
    )
    notes.rename(old.with_name(f"{ALICE.stem}_interactions.{stamp}.json"))
    connection = sqlite3.connect(old)
    try:
        with connection:
            connection.execute("DELETE FROM meta WHERE key = 'backup_sequence'")
    finally:
        connection.close()
    return old


async def test_a_backup_taken_under_a_clock_a_year_ahead_stays_older_than_later_ones(
    open_memory: Opener, root: Path, clock: Clock
) -> None:
    memory = await open_memory(storage=StorageConfig(backup_keep_days=14))
    await memory.store("stored before the clock jumped")
    clock.advance(365)  # the system clock a year ahead
    ahead = await memory.backup()
    clock.advance(-365)  # and set right
    await memory.store("stored once the clock was right")
    first = await memory.backup()
    clock.advance(1)
    await memory.store("stored the next day")
    last = await memory.backup()
    assert [info.path for info in list_backups(root)] == [ahead, first, last]
    assert [info.sequence for info in list_backups(root)] == [1, 2, 3]
    # within the retention nothing goes: the one stamped ahead is as old as the first after it
    assert prune_backups(root, keep_days=14, now=clock() + 10 * DAY) == []
    # past it, the one taken last stays, not the one stamped ahead
    assert prune_backups(root, keep_days=14, now=clock() + 16 * DAY) == [ahead, first]
    assert [info.path for info in list_backups(root)] == [last]


def test_only_a_backup_stamped_ahead_of_the_clock_is_aged_by_the_ones_after_it(
    root: Path, clock: Clock
) -> None:
    folder = root / "backup"
    folder.mkdir()
    label = ALICE.database_name.removesuffix(".db")
    now = clock()
    stamped = {  # sequence: days from now its name says it was taken
        1: -30.0,  # old: goes
        2: 365.0,  # a clock ahead: as old as 3, 4, 5 (their earliest time: -20 days): goes
        3: -2.0,  # right
        4: -1.0,  # right: a backup after it with a clock behind does not make it older
        5: -20.0,  # the clock behind; the newest stays
    }
    paths = {}
    for sequence, days in stamped.items():
        paths[sequence] = folder / backup_name(label, now + days * DAY, sequence)
        paths[sequence].write_bytes(b"")
    assert prune_backups(root, keep_days=14, now=now) == [paths[1], paths[2]]
    assert [info.path for info in list_backups(root)] == [paths[3], paths[4], paths[5]]


async def test_a_lost_memory_is_restored_from_the_backup_taken_last_whatever_the_clock_said(
    open_memory: Opener, root: Path, clock: Clock
) -> None:
    memory = await open_memory()
    await memory.store("stored before the clock jumped")
    clock.advance(365)
    ahead = await memory.backup()
    clock.advance(-365)
    await memory.store("stored once the clock was right")
    await memory.backup()
    clock.advance(1)
    await memory.store("stored the next day")
    last = await memory.backup()
    await memory.store("stored after the last backup")
    await memory.aclose()
    lose_database(root)
    memory = await open_memory()
    [recovery] = memory.recoveries
    assert recovery.backup == last != ahead
    assert sorted(m.content for m in await memory.list(limit=10)) == [
        "stored before the clock jumped",
        "stored once the clock was right",
        "stored the next day",
    ]
    again = await memory.backup()
    assert list_backups(root)[-1].path == again  # the next backup is the last


async def test_backups_named_by_an_older_version_come_first_and_are_still_restored(
    open_memory: Opener, root: Path, clock: Clock
) -> None:
    memory = await open_memory()
    await memory.store("the first memory")
    await memory.add_note("conv-1", "a note of the first day")
    older = as_named_by_an_older_version(await memory.backup(), "20990101T000000")
    await memory.store("the second memory")
    newer = as_named_by_an_older_version(await memory.backup(), "20990102T000000")
    assert [(info.path, info.sequence) for info in list_backups(root)] == [
        (older, None),
        (newer, None),
    ]
    await memory.aclose()
    lose_database(root)
    (root / ALICE.interactions_name).unlink()
    memory = await open_memory()
    [recovery] = memory.recoveries
    assert recovery.backup == newer and recovery.notes_restored
    assert sorted(m.content for m in await memory.list(limit=10)) == [
        "the first memory",
        "the second memory",
    ]
    assert [n.content for n in await memory.notes("conv-1")] == ["a note of the first day"]
    # taken after them (though its time is before theirs): after them
    taken = await memory.backup()
    assert [info.path for info in list_backups(root)] == [older, newer, taken]
    # stamped ahead of the clock, they are as old as the backup taken after them
    assert prune_backups(root, keep_days=1, now=clock()) == []
    assert prune_backups(root, keep_days=1, now=clock() + 2 * DAY) == [older, newer]


async def test_migration_and_pre_restore_backups_take_their_place_in_the_order(
    open_memory: Opener, root: Path, clock: Clock
) -> None:
    memory = await open_memory()
    await memory.store("the first memory")
    clock.advance(365)  # the system clock a year ahead
    first = await memory.backup()
    clock.advance(-365)  # and set right
    await memory.aclose()
    connection = sqlite3.connect(root / ALICE.database_name)
    try:
        for statement in UNDO_ALIASES:
            connection.execute(statement)
        connection.commit()
    finally:
        connection.close()
    memory = await open_memory()  # migrated, backed up first
    await memory.store("the second memory")
    second = await memory.backup()
    await memory.aclose()
    listed = list_backups(root, stem=ALICE.stem)
    assert [(info.kind, info.sequence) for info in listed] == [
        ("manual", 1),
        ("migration", 2),
        ("manual", 3),
    ]
    assert [listed[0].path, listed[2].path] == [first, second]
    # the clock goes back a day: the restore and the backup after it are still the last
    clock.advance(-1)
    replaced = await asyncio.to_thread(restore_backup, root, "alice@localhost", first, now=clock())
    memory = await open_memory()
    assert [m.content for m in await memory.list(limit=10)] == ["the first memory"]
    after = await memory.backup()  # the restored database counted 1 backup
    assert [info.path for info in list_backups(root)][-3:] == [second, replaced, after]
    assert [info.kind for info in list_backups(root)][-2:] == ["pre-restore", "manual"]
    await memory.aclose()
    lose_database(root)
    memory = await open_memory()
    assert memory.recoveries[0].backup == after
