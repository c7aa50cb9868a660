"""A known agent never starts silently empty: after a quarantine, a deleted database or
registry, or a vanished notes file, the next open restores the newest good backup,
or refuses with :class:`MemoryLost` saying how to restore it, or starts empty only
when told to, always with a WARNING.

Real files, real SQLite: each test builds a memory, takes real backups, damages or
deletes real files and opens the memory again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import shlex
import shutil
from pathlib import Path

import pytest
from rel_support import crash_config, memory_text, note_text

from spade_memory import MemoryConfig, MemoryManager
from spade_memory.cli import main as cli_main
from spade_memory.errors import ConfigError, MemoryLost, StorageCorrupted
from spade_memory.identity import AgentIdentity
from spade_memory.storage.registry import REGISTRY_NAME

JID = "keeper@localhost"
OTHER = "stranger@localhost"
IDENTITY = AgentIdentity.of(JID)
BACKED_UP = 6  # memories in the backup
AFTER = 3  # memories stored after it (lost by a restore)


def config(root: Path, **changes: object) -> MemoryConfig:
    return dataclasses.replace(crash_config(root), **changes)  # type: ignore[arg-type]


async def contents(manager: MemoryManager) -> set[str]:
    return {memory.content async for memory in manager.base_store.iter_all()}


async def build(
    root: Path, *, backups: int = 1, notes: bool = True, jid: str = JID
) -> tuple[Path, set[str]]:
    """A memory with ``backups`` backups (the last one of BACKED_UP memories) and AFTER
    memories stored since; returns the newest backup and what it holds."""
    async with await MemoryManager.open(jid, config(root)) as manager:
        for seq in range(BACKED_UP):
            await manager.store(memory_text(seq))
        if notes:
            await manager.add_note("conv", note_text(0))
        backup = root
        for _ in range(backups):
            backup = await manager.backup()
        for seq in range(BACKED_UP, BACKED_UP + AFTER):
            await manager.store(memory_text(seq))
        if notes:
            await manager.add_note("conv", note_text(1))
    return backup, {memory_text(seq) for seq in range(BACKED_UP)}


def damage_database(root: Path) -> None:
    path = root / IDENTITY.database_name
    path.write_bytes(b"this is not a database" * 500)
    for side in ("-wal", "-shm"):
        path.with_name(path.name + side).unlink(missing_ok=True)


async def quarantine_database(root: Path) -> StorageCorrupted:
    damage_database(root)
    with pytest.raises(StorageCorrupted) as first:
        await MemoryManager.open(JID, config(root))
    assert not isinstance(first.value, MemoryLost)
    return first.value


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# -- after a quarantine ---------------------------------------------------------------------


async def test_after_a_quarantine_the_newest_good_backup_is_restored_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backup, backed_up = await build(tmp_path)
    first = await quarantine_database(tmp_path)
    assert first.quarantined_to is not None
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        async with await MemoryManager.open(JID, config(tmp_path)) as manager:
            assert await contents(manager) == backed_up
            assert await manager.base_store.integrity_check() == ["ok"]
            # the vector cache of the lost database is not trusted: rebuilt
            await manager.flush()
            assert manager.indexer is not None
            assert set(manager.indexer.index.ids().tolist()) == {
                m.id async for m in manager.base_store.iter_all()
            }
            [recovery] = manager.recoveries
            # the notes file was intact: kept as it is, with the note written after the backup
            assert [n.content for n in await manager.notes("conv")] == [note_text(0), note_text(1)]
    assert recovery.action == "restored" and recovery.file == "database"
    assert recovery.backup == backup and recovery.memories_restored == BACKED_UP
    assert recovery.lost_since is not None and recovery.quarantined == (first.quarantined_to,)
    assert not recovery.notes_restored
    logged = [m for m in warnings_of(caplog) if backup.name in m]
    assert logged, f"the restore was not logged at WARNING: {warnings_of(caplog)}"
    assert "lost" in logged[0] and first.quarantined_to.name in logged[0]
    # and the next open is an ordinary one
    caplog.clear()
    async with await MemoryManager.open(JID, config(tmp_path)) as manager:
        assert manager.recoveries == ()
        assert await contents(manager) == backed_up


async def test_with_on_damage_refuse_the_error_names_the_copy_the_backup_and_the_command(
    tmp_path: Path,
) -> None:
    backup, backed_up = await build(tmp_path)
    first = await quarantine_database(tmp_path)
    assert first.quarantined_to is not None
    for _ in range(2):  # not only once: every open refuses
        with pytest.raises(MemoryLost) as refused:
            await MemoryManager.open(JID, config(tmp_path, on_damage="refuse"))
        message = str(refused.value)
        assert first.quarantined_to.name in message and str(backup) in message
        assert refused.value.backup == backup
        assert refused.value.restore_command is not None
        assert refused.value.restore_command in message
    # the command it gives restores the memory
    argv = shlex.split(refused.value.restore_command)
    assert argv[0] == "spade-memory"
    assert await asyncio.to_thread(cli_main, argv[1:]) == 0
    async with await MemoryManager.open(JID, config(tmp_path, on_damage="refuse")) as manager:
        assert await contents(manager) == backed_up


async def test_a_damaged_or_foreign_newer_backup_is_skipped_for_an_older_good_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with await MemoryManager.open(JID, config(tmp_path)) as manager:
        await manager.store(memory_text(1))
        good = await manager.backup()
    async with await MemoryManager.open(OTHER, config(tmp_path)) as other:
        await other.store(memory_text(2))
        foreign = await other.backup()
    stem = IDENTITY.stem
    # newer backups (taken after it: later in the sequence) under this agent's name:
    # one damaged, one of another agent
    damaged = good.with_name(f"{stem}_base_memory.29990101T000000.s8.db")
    data = bytearray(good.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    data[page * 2 : page * 3] = bytes(page)  # a zeroed b-tree page: fails integrity_check
    damaged.write_bytes(bytes(data))
    shutil.copyfile(foreign, good.with_name(f"{stem}_base_memory.29990102T000000.s9.db"))
    await quarantine_database(tmp_path)
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        async with await MemoryManager.open(JID, config(tmp_path)) as manager:
            assert await contents(manager) == {memory_text(1)}
            [recovery] = manager.recoveries
    assert recovery.backup == good
    assert any(damaged.name in m and OTHER in m for m in warnings_of(caplog))


async def test_with_no_good_backup_the_next_open_refuses_until_told_to_start_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await build(tmp_path, backups=0)
    first = await quarantine_database(tmp_path)
    assert first.quarantined_to is not None
    with pytest.raises(MemoryLost) as refused:
        await MemoryManager.open(JID, config(tmp_path))
    assert first.quarantined_to.name in str(refused.value)
    assert "start_empty=True" in str(refused.value) and refused.value.backup is None
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        async with await MemoryManager.open(JID, config(tmp_path, start_empty=True)) as manager:
            assert await contents(manager) == set()
            assert [r.action for r in manager.recoveries] == ["started_empty"]
    assert any("EMPTY" in m and JID in m for m in warnings_of(caplog))
    # every later start on the empty memory of this registered agent is a WARNING too
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        async with await MemoryManager.open(JID, config(tmp_path)) as manager:
            assert manager.recoveries == ()
    assert any("no memories" in m and JID in m for m in warnings_of(caplog))
    assert first.quarantined_to.exists(), "the damaged copy must stay"


async def test_a_memory_started_empty_warns_until_it_holds_something_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await build(tmp_path, backups=0)
    await quarantine_database(tmp_path)
    async with await MemoryManager.open(JID, config(tmp_path, start_empty=True)):
        pass
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        async with await MemoryManager.open(JID, config(tmp_path)) as manager:
            stored = await manager.store("the memory holds something again")
    assert any("they were lost on" in m and JID in m for m in warnings_of(caplog))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        async with await MemoryManager.open(JID, config(tmp_path)) as manager:
            await manager.forget(stored.id)
        # forgetting all it holds is the agent's own doing: no loss to warn about
        async with await MemoryManager.open(JID, config(tmp_path)):
            pass
    assert not any("no memories" in m for m in warnings_of(caplog)), warnings_of(caplog)


@pytest.mark.parametrize("history", ["nothing stored", "all forgotten", "notes only"])
async def test_an_agent_empty_by_its_own_doing_opens_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, history: str
) -> None:
    async with await MemoryManager.open(JID, config(tmp_path)) as manager:
        if history == "all forgotten":
            await manager.forget((await manager.store(memory_text(0))).id)
        elif history == "notes only":
            await manager.add_note("conv", note_text(0))
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        async with await MemoryManager.open(JID, config(tmp_path)) as manager:
            assert manager.recoveries == ()
    assert warnings_of(caplog) == []


def test_on_damage_is_checked() -> None:
    with pytest.raises(ConfigError):
        MemoryConfig(on_damage="ignore")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        MemoryConfig(start_empty="yes")  # type: ignore[arg-type]


# -- deleted files --------------------------------------------------------------------------


def delete_database_and_registry(root: Path) -> None:
    for side in ("", "-wal", "-shm"):
        (root / (IDENTITY.database_name + side)).unlink(missing_ok=True)
    (root / REGISTRY_NAME).unlink()


async def test_database_and_registry_deleted_with_a_backup_left_is_restored(
    tmp_path: Path,
) -> None:
    backup, backed_up = await build(tmp_path, notes=False)
    (tmp_path / IDENTITY.snapshot_name).unlink(missing_ok=True)
    delete_database_and_registry(tmp_path)
    async with await MemoryManager.open(JID, config(tmp_path)) as manager:
        assert await contents(manager) == backed_up
        assert [r.backup for r in manager.recoveries] == [backup]


async def test_registry_deleted_with_two_agents_lost_both_are_restored(tmp_path: Path) -> None:
    """The first agent to open must not re-create a registry that forgets the second."""
    backups = {jid: await build(tmp_path, notes=False, jid=jid) for jid in (JID, OTHER)}
    for jid in (JID, OTHER):
        identity = AgentIdentity.of(jid)
        for name in (identity.snapshot_name, identity.database_name):
            for side in ("", "-wal", "-shm"):
                (tmp_path / (name + side)).unlink(missing_ok=True)
    (tmp_path / REGISTRY_NAME).unlink()
    for jid in (JID, OTHER):
        async with await MemoryManager.open(jid, config(tmp_path)) as manager:
            assert [r.backup for r in manager.recoveries] == [backups[jid][0]], jid
            assert await contents(manager) == backups[jid][1]


@pytest.mark.parametrize("trace", ["notes file", "quarantined file"])
async def test_database_and_registry_deleted_with_a_trace_left_is_refused(
    tmp_path: Path, trace: str
) -> None:
    await build(tmp_path, backups=0, notes=trace == "notes file")
    (tmp_path / IDENTITY.snapshot_name).unlink(missing_ok=True)
    if trace == "quarantined file":
        await quarantine_database(tmp_path)
    delete_database_and_registry(tmp_path)
    with pytest.raises(MemoryLost) as refused:
        await MemoryManager.open(JID, config(tmp_path))
    assert IDENTITY.database_name in str(refused.value)
    assert not (tmp_path / IDENTITY.database_name).exists(), "a refusal must change nothing"


async def test_a_deleted_database_of_a_registered_agent_is_restored_at_once(
    tmp_path: Path,
) -> None:
    backup, backed_up = await build(tmp_path)
    for side in ("", "-wal", "-shm"):
        (tmp_path / (IDENTITY.database_name + side)).unlink(missing_ok=True)
    async with await MemoryManager.open(JID, config(tmp_path)) as manager:
        assert await contents(manager) == backed_up
        assert [r.backup for r in manager.recoveries] == [backup]


async def test_a_new_agent_starts_empty_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await build(tmp_path)  # another agent's files in the same root are no trace of this one
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        async with await MemoryManager.open("newcomer@localhost", config(tmp_path)) as manager:
            assert manager.recoveries == ()
    assert warnings_of(caplog) == []


# -- the notes file -------------------------------------------------------------------------


async def test_a_vanished_notes_file_is_restored_from_the_backup(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backup, _ = await build(tmp_path)
    (tmp_path / IDENTITY.interactions_name).unlink()
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        async with await MemoryManager.open(JID, config(tmp_path)) as manager:
            assert [n.content for n in await manager.notes("conv")] == [note_text(0)]
            [recovery] = manager.recoveries
            assert len(await contents(manager)) == BACKED_UP + AFTER  # the database is kept
    assert recovery.file == "notes" and recovery.action == "restored"
    assert recovery.backup is not None and backup.stem.split(".")[1] in recovery.backup.name
    assert any(IDENTITY.interactions_name in m for m in warnings_of(caplog))


async def test_a_vanished_notes_file_with_no_backup_is_refused_then_accepted_when_told(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await build(tmp_path, backups=0)
    notes = tmp_path / IDENTITY.interactions_name
    notes.unlink()
    with pytest.raises(MemoryLost) as refused:
        await MemoryManager.open(JID, config(tmp_path))
    assert refused.value.path == notes and IDENTITY.interactions_name in str(refused.value)
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        async with await MemoryManager.open(JID, config(tmp_path), start_empty=True) as manager:
            assert await manager.notes("conv") == []
            assert [r.file for r in manager.recoveries] == ["notes"]
    assert any("NO notes" in m for m in warnings_of(caplog))
    # accepted once: the next open goes on without them, and new notes are kept
    async with await MemoryManager.open(JID, config(tmp_path)) as manager:
        await manager.add_note("conv", note_text(5))
    notes.unlink()
    with pytest.raises(MemoryLost):
        await MemoryManager.open(JID, config(tmp_path))


async def test_notes_written_by_an_earlier_version_are_registered_on_open(
    tmp_path: Path,
) -> None:
    await build(tmp_path, backups=0)
    async with await MemoryManager.open(JID, config(tmp_path)) as manager:
        await manager.base_store.meta_set("notes_file", "0")  # as before notes were registered
    async with await MemoryManager.open(JID, config(tmp_path)):
        pass
    (tmp_path / IDENTITY.interactions_name).unlink()
    with pytest.raises(MemoryLost):
        await MemoryManager.open(JID, config(tmp_path))


async def test_an_emptied_database_of_an_agent_without_notes_is_not_said_to_have_them(
    tmp_path: Path,
) -> None:
    await build(tmp_path, backups=0, notes=False)
    path = tmp_path / IDENTITY.database_name
    for side in ("-wal", "-shm"):
        path.with_name(path.name + side).unlink(missing_ok=True)
    path.write_bytes(b"")
    with pytest.raises(StorageCorrupted) as refused:
        await MemoryManager.open(JID, config(tmp_path))
    assert "interaction file is there" not in str(refused.value)
    assert not (tmp_path / IDENTITY.interactions_name).exists()


# -- the command line -----------------------------------------------------------------------


async def test_the_command_line_refuses_a_lost_memory_or_starts_it_empty_when_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    await build(tmp_path, backups=0)
    await quarantine_database(tmp_path)
    root = ["--root", str(tmp_path)]
    assert await asyncio.to_thread(cli_main, ["stats", JID, *root]) == 1
    assert "--start-empty" in capsys.readouterr().err
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        assert await asyncio.to_thread(cli_main, ["stats", JID, *root, "--start-empty"]) == 0
    assert any("EMPTY" in m for m in warnings_of(caplog))
    assert await asyncio.to_thread(cli_main, ["stats", JID, *root]) == 0


async def test_the_command_line_restores_a_lost_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, backed_up = await build(tmp_path)
    await quarantine_database(tmp_path)
    assert await asyncio.to_thread(cli_main, ["stats", JID, "--root", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memories"] == len(backed_up)
