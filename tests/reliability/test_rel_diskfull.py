"""A full disk or a failing device: a typed error, the previous state intact, then recovery.

File writes go through ``spade_memory.storage.files``; its ``os`` is swapped for one
whose ``k``-th ``write``, ``fsync`` or ``replace`` fails with ``ENOSPC`` or ``EIO``,
once or from then on. SQLite is filled up with ``PRAGMA max_page_count`` (it then
fails with ``SQLITE_FULL``). Every failing call must raise a ``StorageError``
subclass and leave what was stored before exactly as it was, on disk and in the
running memory; once space returns, the next call succeeds.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from rel_support import (
    FailingFileOps,
    crash_config,
    file_states,
    memory_text,
    note_text,
    notes_in_files,
)

from spade_memory.config import MemoryConfig
from spade_memory.errors import StorageError
from spade_memory.identity import AgentIdentity
from spade_memory.manager import MemoryManager
from spade_memory.storage import files, interaction_file
from spade_memory.storage.registry import Registry

JID = "full@localhost"
IDENTITY = AgentIdentity.of(JID)
NOTE_CALLS = 6


def notes_on_disk(root: Path) -> list[str]:
    return notes_in_files(root / IDENTITY.interactions_name, JID).get("conv", [])


def temporaries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("persistent", [False, True], ids=["once", "persistent"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("op", ["write", "fsync", "replace"])
@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
async def test_interaction_notes_survive_failing_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str, k: int, persistent: bool, error: int
) -> None:
    root = tmp_path / "memory"
    config = MemoryConfig(root=root, embedder=None)
    if op == "replace":
        # Notes are appended to the journal: make every save write a new snapshot
        # (the only file replaced), which falls back to the journal if it cannot.
        monkeypatch.setattr(interaction_file, "_compaction_due", lambda *sizes: True)
    async with await MemoryManager.open(JID, config) as manager:
        acked = []
        for seq in range(3):
            await manager.add_note("conv", note_text(seq))
            acked.append(note_text(seq))
        faults = FailingFileOps(op, k, error=error, persistent=persistent)
        monkeypatch.setattr(files, "os", faults)
        failed = 0
        for seq in range(100, 100 + NOTE_CALLS):
            try:
                await manager.add_note("conv", note_text(seq))
            except StorageError as exc:
                failed += 1
                assert "interaction memory" in str(exc) and IDENTITY.interactions_name in str(exc)
            else:
                acked.append(note_text(seq))
            # the outcome matches the answer, on disk and in the running memory
            assert notes_on_disk(root) == acked
            assert [n.content for n in await manager.notes("conv")] == acked
            assert temporaries(root) == []
        assert faults.failures >= 1, "the injected fault never fired"
        if not persistent:
            # A snapshot that could not be replaced left the note in the journal.
            assert failed == (0 if op == "replace" else 1)
        else:
            assert failed >= 1
        faults.heal()
        await manager.add_note("conv", note_text(999))  # space came back
        acked.append(note_text(999))
        assert notes_on_disk(root) == acked
    monkeypatch.undo()
    async with await MemoryManager.open(JID, config) as manager:
        assert [n.content for n in await manager.notes("conv")] == acked


@pytest.mark.parametrize("op", ["write", "fsync", "replace"])
@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
async def test_failing_snapshot_writes_never_reach_a_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str, error: int
) -> None:
    root = tmp_path / "memory"
    config = crash_config(root, snapshot_min_changes=4)
    snapshot = root / IDENTITY.snapshot_name
    async with await MemoryManager.open(JID, config) as manager:
        for seq in range(20):
            await manager.store(memory_text(seq))
        await manager.flush()
        await manager.add_note("conv", note_text(0))
    before = snapshot.read_bytes()
    faults = FailingFileOps(
        op, 1, error=error, persistent=True, matches=lambda p: ".faiss" in p or p == str(root)
    )
    async with await MemoryManager.open(JID, config) as manager:
        monkeypatch.setattr(files, "os", faults)
        for seq in range(20, 60):
            await manager.store(memory_text(seq))
        await manager.flush()  # embedding goes on; only the snapshot cache is not written
        assert (await manager.search(memory_text(45), limit=3))[0].memory.content == memory_text(45)
    assert faults.failures >= 1
    assert snapshot.read_bytes() == before, "a failed snapshot write changed the old snapshot"
    assert temporaries(root) == []
    faults.heal()
    monkeypatch.undo()
    async with await MemoryManager.open(JID, config) as manager:
        await manager.flush()
        indexer = manager.indexer
        assert indexer is not None
        assert set(indexer.index.ids().tolist()) == {
            memory.id async for memory in manager.base_store.iter_all()
        }
        assert await manager.base_store.count() == 60
    assert not list(root.glob("*.corrupt-*")), "the intact old snapshot was taken for damage"


@pytest.mark.parametrize("op", ["write", "fsync", "replace"])
async def test_failing_first_registration_touches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str
) -> None:
    root = tmp_path / "memory"
    config = MemoryConfig(root=root, embedder=None)
    async with await MemoryManager.open("first@localhost", config):
        pass
    before = file_states(root)
    faults = FailingFileOps(op, 1, persistent=True)
    monkeypatch.setattr(files, "os", faults)
    with pytest.raises(StorageError):
        await MemoryManager.open(JID, config)
    assert faults.failures >= 1
    # The agent is registered once its new database exists (the registration marks
    # its memory as existing): the database, empty and unregistered, may stay, and
    # the next open adopts it. Nothing else may change.
    new_database = {IDENTITY.database_name, IDENTITY.database_name + "-wal"}
    after = file_states(root)
    assert {k: v for k, v in after.items() if k not in new_database} == before, (
        "a refused open changed or left other files"
    )
    assert JID not in Registry(root).agents().values()
    faults.heal()
    async with await MemoryManager.open(JID, config) as manager:
        await manager.store("space came back")
        assert await manager.base_store.count() == 1
    assert Registry(root).agents()[IDENTITY.stem] == JID


# -- SQLite itself: SQLITE_FULL through max_page_count ---------------------------------------


async def fill_to(manager: MemoryManager, extra_pages: int) -> None:
    base = manager.base_store
    pages = int((await base.fetchall("PRAGMA page_count"))[0][0])
    await base.fetchall(f"PRAGMA max_page_count = {pages + extra_pages}")


async def snapshot_state(manager: MemoryManager) -> dict[int, tuple[str, float]]:
    return {m.id: (m.content, m.updated_at) async for m in manager.base_store.iter_all()}


@pytest.mark.parametrize("extra_pages", [0, 2, 6])
async def test_full_database_refuses_writes_and_recovers(tmp_path: Path, extra_pages: int) -> None:
    root = tmp_path / "memory"
    config = crash_config(root)
    async with await MemoryManager.open(JID, config) as manager:
        for seq in range(30):
            await manager.store(memory_text(seq))
        await manager.flush()
        await fill_to(manager, extra_pages)
        acked = await snapshot_state(manager)
        big = " ".join(memory_text(seq) for seq in range(1000, 1060))  # several pages
        failures = 0
        for attempt in range(12):
            try:
                memory = await manager.store(f"{big} {attempt}")
            except StorageError as exc:
                failures += 1
                assert "full" in str(exc).lower(), exc
            else:
                acked[memory.id] = (memory.content, memory.updated_at)
            assert await snapshot_state(manager) == acked
        assert failures >= 1, "the database never filled up"
        # persistently full: a batch fails whole, an update changes nothing
        with pytest.raises(StorageError):
            await manager.store_many([{"content": f"{big} batch {i}"} for i in range(3)])
        first = min(acked)
        with pytest.raises(StorageError):
            await manager.update(first, content=big + " updated")
        assert await snapshot_state(manager) == acked
        assert await manager.base_store.integrity_check() == ["ok"]
        # reads still answer, notes (another file) still work
        assert (await manager.search(memory_text(7), limit=1))[0].memory.content == memory_text(7)
        await manager.add_note("conv", "the database is full")
        # space comes back
        await manager.base_store.fetchall("PRAGMA max_page_count = 1073741823")
        memory = await manager.store(big + " after")
        acked[memory.id] = (memory.content, memory.updated_at)
        await manager.flush()
        assert (
            await manager.base_store.count_pending_embeddings(
                manager.indexer.embedder.fingerprint  # type: ignore[union-attr]
            )
            == 0
        )
    async with await MemoryManager.open(JID, config) as manager:
        assert await snapshot_state(manager) == acked
        assert await manager.base_store.integrity_check() == ["ok"]
