"""Interaction notes are appended to a journal beside the snapshot, not rewritten whole.

A note costs about its own size on disk whatever the number of notes; the journal is
folded into a new snapshot once it outgrows it; a torn last line is ignored and
reported; a journal left from before the last snapshot is ignored; a damaged one is
quarantined; backups hold snapshot and journal merged.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from spade_memory.config import MemoryConfig
from spade_memory.errors import StorageCorrupted, StorageError
from spade_memory.manager import MemoryManager
from spade_memory.storage import files, interaction_file
from spade_memory.storage.interaction import InteractionStore, snapshot_document
from spade_memory.storage.notes_journal import journal_path

AGENT = "alice@example.org"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "alice_interactions.json"


def disk_notes(path: Path) -> dict[str, list[str]]:
    conversations, _ = interaction_file.open_file(path, AGENT)
    return {c: [n.content for n in notes] for c, notes in conversations.items()}


class WriteCounter:
    """Counts the bytes the notes files are given (appends and whole-file writes)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes = 0
        atomic, append = files.atomic_write_bytes, files.append_at

        def counted_atomic(target: Path, data: bytes, *, locked: bool = False) -> None:
            self.bytes += len(data)
            atomic(target, data, locked=locked)

        def counted_append(target: Path, data: bytes, size: int) -> int:
            self.bytes += len(data)
            return append(target, data, size)

        monkeypatch.setattr(files, "atomic_write_bytes", counted_atomic)
        monkeypatch.setattr(files, "append_at", counted_append)


async def test_a_note_costs_its_own_size_however_many_notes_there_are(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await InteractionStore.open(path, agent=AGENT)
    try:
        await store.import_notes(
            {"big": [{"content": f"note {i} " + "x" * 100, "created_at": i} for i in range(3000)]}
        )
        assert path.stat().st_size > 300_000
        counter = WriteCounter(monkeypatch)
        for i in range(20):
            await store.add("conv", f"a new note {i}")
        assert counter.bytes / 20 < 512, counter.bytes
    finally:
        await store.aclose()
    notes = disk_notes(path)
    assert len(notes["big"]) == 3000
    assert notes["conv"] == [f"a new note {i}" for i in range(20)]


async def test_the_journal_is_folded_into_a_new_snapshot_once_it_outgrows_it(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(interaction_file, "COMPACT_AT_BYTES", 2_000)
    store = await InteractionStore.open(path, agent=AGENT)
    try:
        ids = set()
        for i in range(300):
            await store.add(f"conv-{i % 3}", f"note number {i}")
            snapshot = json.loads(path.read_bytes())
            ids.add(snapshot["journal"])
            journal = journal_path(path)
            journal_size = journal.stat().st_size if journal.exists() else 0
            assert journal_size <= max(2_000, path.stat().st_size) + 200
        assert len(ids) > 3  # folded several times
    finally:
        await store.aclose()
    notes = disk_notes(path)
    assert sum(len(v) for v in notes.values()) == 300
    assert notes["conv-0"][:2] == ["note number 0", "note number 3"]


async def test_a_torn_last_line_is_ignored_reported_and_cut(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with await InteractionStore.open(path, agent=AGENT) as store:
        for i in range(3):
            await store.add("conv", f"note {i}")
        await store.clear("gone")  # nothing to clear: nothing written
    journal = journal_path(path)
    complete = journal.read_bytes()
    with journal.open("ab") as handle:
        handle.write(b'{"op":"add","notes":[{"conversation":"conv","cont')
    with caplog.at_level(logging.WARNING):
        store = await InteractionStore.open(path, agent=AGENT)
    try:
        assert [n.content for n in await store.get("conv")] == ["note 0", "note 1", "note 2"]
        assert "torn last line" in caplog.text
        assert journal.read_bytes() == complete
        await store.add("conv", "note 3")
    finally:
        await store.aclose()
    assert disk_notes(path) == {"conv": ["note 0", "note 1", "note 2", "note 3"]}


async def test_a_journal_from_before_the_last_snapshot_is_ignored(path: Path) -> None:
    async with await InteractionStore.open(path, agent=AGENT) as store:
        await store.add("conv", "in the snapshot")
        await store.add("conv", "in the journal")
    journal = journal_path(path)
    stale = journal.read_bytes()
    # A compaction wrote the snapshot with both notes, then died before removing the journal.
    snapshot = json.loads(path.read_bytes())
    snapshot["conversations"]["conv"] = [
        {"content": "in the snapshot", "author": None, "created_at": 1.0},
        {"content": "in the journal", "author": None, "created_at": 2.0},
    ]
    snapshot["journal"] = "a-newer-id"
    path.write_text(json.dumps(snapshot), encoding="utf-8")
    assert journal.read_bytes() == stale
    assert disk_notes(path) == {"conv": ["in the snapshot", "in the journal"]}
    assert not journal.exists()


async def test_a_damaged_journal_line_is_quarantined_and_named(path: Path) -> None:
    async with await InteractionStore.open(path, agent=AGENT) as store:
        await store.add("conv", "first")
        await store.add("conv", "second")
        await store.add("conv", "third")
    journal = journal_path(path)
    lines = journal.read_bytes().split(b"\n")
    lines[1] = b'{"op":"add","notes":"not a list"}'
    journal.write_bytes(b"\n".join(lines))
    with pytest.raises(StorageCorrupted, match="line 2") as caught:
        await InteractionStore.open(path, agent=AGENT)
    assert caught.value.quarantined_to is not None and caught.value.quarantined_to.exists()
    assert not journal.exists()
    async with await InteractionStore.open(path, agent=AGENT) as store:
        assert [n.content for n in await store.get("conv")] == ["first"]


async def test_a_snapshot_that_cannot_be_written_leaves_the_notes_in_the_journal(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with await InteractionStore.open(path, agent=AGENT) as store:
        await store.add("conv", "first")
        await store.add("conv", "second")  # the journal exists from here on
        monkeypatch.setattr(interaction_file, "_compaction_due", lambda *sizes: True)
        real = files.atomic_write_bytes

        def full(target: Path, data: bytes, *, locked: bool = False) -> None:
            if target == path:
                raise StorageError(f"could not write {target}: No space left on device")
            real(target, data, locked=locked)

        monkeypatch.setattr(files, "atomic_write_bytes", full)
        await store.add("conv", "third")
    monkeypatch.undo()
    assert disk_notes(path) == {"conv": ["first", "second", "third"]}


async def test_a_backup_copy_holds_snapshot_and_journal_merged(path: Path, tmp_path: Path) -> None:
    async with await InteractionStore.open(path, agent=AGENT) as store:
        await store.add("conv", "first")
        await store.add("conv", "second")
    copy = tmp_path / "restored" / path.name
    copy.parent.mkdir()
    copy.write_bytes(snapshot_document(path, AGENT))
    assert json.loads(copy.read_bytes())["journal"] is None
    # Restored over a memory whose journal is still there: that journal is ignored.
    journal_path(copy).write_bytes(journal_path(path).read_bytes())
    assert disk_notes(copy) == {"conv": ["first", "second"]}


async def test_an_export_after_reopening_holds_the_journals_notes(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None)
    async with await MemoryManager.open(AGENT, config) as memory:
        for i in range(3):
            await memory.add_note("conv", f"note {i}")
    assert any(tmp_path.glob("*_interactions.json.journal"))
    async with await MemoryManager.open(AGENT, config) as memory:
        exported = await memory.export()
    assert [n["content"] for n in exported["notes"]["conv"]] == ["note 0", "note 1", "note 2"]
