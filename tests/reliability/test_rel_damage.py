"""Damaged files: never an unhandled exception, never a silent empty memory.

For the database, its write-ahead log, the FAISS snapshot and the interaction
JSON, each kind of damage (truncation, flipped bytes, an empty file, garbage, a
missing sidecar, another agent's file swapped in) must end in one of:

- a logged recovery: the memory opens with everything it held (the snapshot is
  rebuilt from SQLite), the damaged file kept in quarantine; or
- a clear :class:`StorageCorrupted` naming the file, the damaged original kept
  in quarantine (``<name>.corrupt-<stamp>``), byte for byte.

Opening never shows fewer memories than the intact part of the files holds.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rel_support import crash_config, memory_text, note_text

from spade_memory.errors import MemoryLost, SpadeMemoryError, StorageCorrupted
from spade_memory.identity import AgentIdentity
from spade_memory.manager import MemoryManager

JID = "victim@localhost"
OTHER = "other@localhost"
IDENTITY = AgentIdentity.of(JID)
CHECKPOINTED = 24  # memories in the database file itself
IN_WAL = 16  # memories committed only to the write-ahead log (a crash image)
NOTES = 6


@dataclass(frozen=True)
class Image:
    """A memory root as a crash leaves it, and what it holds."""

    root: Path
    contents: set[str]  # every memory
    checkpointed: set[str]  # the memories the database file holds without its WAL
    notes: list[str]


async def _fill(manager: MemoryManager, start: int, count: int) -> set[str]:
    for seq in range(start, start + count):
        await manager.store(memory_text(seq))
    await manager.flush()
    return {memory_text(seq) for seq in range(start, start + count)}


_PRISTINE: dict[tuple[str, int], Image] = {}
_cache: list[Path] = []


@pytest.fixture(autouse=True, scope="module")
def _image_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Build each image once per module; every test damages its own copy."""
    _cache.append(tmp_path_factory.mktemp("images"))
    yield
    _cache.clear()
    _PRISTINE.clear()


async def make_image(tmp_path: Path, jid: str = JID, seed: int = 0) -> Image:
    """A copy of a root whose database file holds some memories and its WAL the rest."""
    key = (jid, seed)
    if key not in _PRISTINE:
        _PRISTINE[key] = await _build_image(_cache[0] / f"{seed}", jid, seed)
    pristine = _PRISTINE[key]
    root = tmp_path / f"image-{seed}"
    shutil.copytree(pristine.root, root)
    return Image(root, pristine.contents, pristine.checkpointed, pristine.notes)


async def _build_image(folder: Path, jid: str, seed: int) -> Image:
    """The second session's files are copied while it is still open, as a SIGKILL
    would leave them: the last commits live only in ``-wal``.
    """
    live = folder / "live"
    config = crash_config(live, snapshot_min_changes=8)
    # No automatic checkpoint in the second session: its commits stay in the log.
    storage = dataclasses.replace(config.storage, wal_checkpoint_pages=1_000_000)
    config = dataclasses.replace(config, storage=storage)
    async with await MemoryManager.open(jid, config) as manager:
        first = await _fill(manager, seed * 1000, CHECKPOINTED)
        for seq in range(NOTES):
            await manager.add_note("conv", note_text(seq))
    image = folder / "image"
    async with await MemoryManager.open(jid, config) as manager:
        second = await _fill(manager, seed * 1000 + CHECKPOINTED, IN_WAL)
        wal = live / (manager.identity.database_name + "-wal")
        assert wal.stat().st_size > 0
        shutil.copytree(live, image)
    return Image(image, first | second, first, [note_text(seq) for seq in range(NOTES)])


async def contents_of(manager: MemoryManager) -> set[str]:
    return {memory.content async for memory in manager.base_store.iter_all()}


# -- damage ---------------------------------------------------------------------------------


def truncate(path: Path, rng: random.Random) -> None:
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.truncate(rng.randint(1, max(1, size - 1)))


def truncate_half(path: Path, rng: random.Random) -> None:
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size // 2)


def flip_header(path: Path, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    for position in rng.sample(range(min(16, len(data))), 3):
        data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def empty(path: Path, rng: random.Random) -> None:
    path.write_bytes(b"")


def garbage(path: Path, rng: random.Random) -> None:
    path.write_bytes(rng.randbytes(max(64, path.stat().st_size)))


Damage = Callable[[Path, random.Random], None]
DAMAGES: dict[str, Damage] = {
    "truncated": truncate,
    "truncated-half": truncate_half,
    "flipped": flip_header,
    "empty": empty,
    "garbage": garbage,
}


def quarantined(root: Path, name: str) -> list[Path]:
    return sorted(root.glob(f"{name}.corrupt-*"))


async def open_or_refuse(root: Path) -> tuple[MemoryManager | None, StorageCorrupted | None]:
    """Open the memory; only StorageCorrupted may come out (anything else fails the test)."""
    try:
        manager = await MemoryManager.open(JID, crash_config(root, snapshot_min_changes=8))
    except StorageCorrupted as exc:
        return None, exc
    except SpadeMemoryError as exc:  # pragma: no cover - reported as a failure
        pytest.fail(f"opening a damaged memory raised {type(exc).__name__}, not StorageCorrupted")
    return manager, None


async def refused(manager: MemoryManager | None, message: str) -> None:
    """Fail (after closing it) if the damaged memory was opened."""
    if manager is not None:
        await manager.aclose()
        pytest.fail(message)


def assert_refused_loudly(
    error: StorageCorrupted | None, root: Path, name: str, damaged: bytes
) -> None:
    assert error is not None, f"the damaged {name} was opened without complaint"
    assert name in str(error), f"the error does not name the file: {error}"
    assert error.path is not None and error.path.name == name
    assert error.quarantined_to is not None and error.quarantined_to.exists()
    assert error.quarantined_to.read_bytes() == damaged, "the damaged original was not kept"
    assert error.quarantined_to in quarantined(root, name)


# -- the database file ----------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated-half", "flipped", "empty", "garbage"])
async def test_damaged_database_fails_loudly_and_is_quarantined(
    tmp_path: Path, damage: str
) -> None:
    image = await make_image(tmp_path)
    name = IDENTITY.database_name
    path = image.root / name
    async with await MemoryManager.open(JID, crash_config(image.root)) as manager:
        before = await contents_of(manager)  # closed cleanly: the file alone holds it all
    assert before == image.contents and not (image.root / (name + "-wal")).exists()
    DAMAGES[damage](path, random.Random(damage))
    damaged = path.read_bytes()
    manager_or_none, error = await open_or_refuse(image.root)
    if manager_or_none is not None:
        async with manager_or_none as manager:
            shown = await contents_of(manager)
        pytest.fail(f"a {damage} database opened showing {len(shown)} of {len(before)} memories")
    assert_refused_loudly(error, image.root, name, damaged)
    # no backup: the next open refuses again, naming the quarantined copy
    with pytest.raises(MemoryLost) as lost:
        await MemoryManager.open(JID, crash_config(image.root))
    assert error.quarantined_to is not None and error.quarantined_to.name in str(lost.value)
    # only when told, it starts afresh, and leaves the quarantined copy alone
    async with await MemoryManager.open(JID, crash_config(image.root), start_empty=True) as manager:
        assert await contents_of(manager) == set()
        assert [r.action for r in manager.recoveries] == ["started_empty"]
    assert quarantined(image.root, name)[0].read_bytes() == damaged


@pytest.mark.parametrize("seed", range(6))
async def test_database_cut_anywhere_opens_whole_or_fails_loudly(tmp_path: Path, seed: int) -> None:
    image = await make_image(tmp_path)
    name = IDENTITY.database_name
    path = image.root / name
    async with await MemoryManager.open(JID, crash_config(image.root)) as manager:
        before = await contents_of(manager)
    truncate(path, random.Random(seed))
    damaged = path.read_bytes()
    manager, error = await open_or_refuse(image.root)
    if manager is None:
        assert_refused_loudly(error, image.root, name, damaged)
        return
    async with manager:  # the cut took only unused space: everything must be there
        assert await contents_of(manager) == before, "a cut database lost memories silently"
        assert await manager.base_store.integrity_check() == ["ok"]


async def test_flipped_bytes_inside_database_pages_are_caught(tmp_path: Path) -> None:
    """A flipped byte in a page's header or cell pointers: refused, or truly harmless.

    Without a check at open, such damage opens "fine", then shows fewer memories,
    fails at some later query, or hands back garbage as a memory.
    """
    clean = await make_image(tmp_path / "clean")
    async with await MemoryManager.open(JID, crash_config(clean.root)) as manager:
        before = await contents_of(manager)
    name = IDENTITY.database_name
    pristine = (clean.root / name).read_bytes()
    page = int.from_bytes(pristine[16:18], "big") or 65536
    rng = random.Random(99)
    spots = [
        (number, offset) for number in range(1, len(pristine) // page) for offset in (0, 3, 5, 8)
    ]
    for trial, (number, offset) in enumerate(rng.sample(spots, min(30, len(spots)))):
        root = tmp_path / f"flip-{trial}"
        shutil.copytree(clean.root, root)
        data = bytearray(pristine)
        data[number * page + offset] ^= 0xFF
        (root / name).write_bytes(bytes(data))
        manager_or_none, error = await open_or_refuse(root)
        if manager_or_none is None:
            assert_refused_loudly(error, root, name, bytes(data))
            continue
        async with manager_or_none as manager:  # the byte was unused: all must be well
            assert await contents_of(manager) == before, f"page {number}+{offset}: memories lost"
            assert await manager.base_store.integrity_check() == ["ok"], f"page {number}+{offset}"
            await manager.search("record", limit=5)


async def test_another_agents_database_is_refused(tmp_path: Path) -> None:
    image = await make_image(tmp_path)
    other = await make_image(tmp_path, OTHER, seed=1)
    name = IDENTITY.database_name
    shutil.copyfile(other.root / AgentIdentity.of(OTHER).database_name, image.root / name)
    for side in ("-wal", "-shm"):
        (image.root / (name + side)).unlink(missing_ok=True)
    swapped = (image.root / name).read_bytes()
    manager, error = await open_or_refuse(image.root)
    await refused(manager, "another agent's database was opened as this agent's memory")
    assert_refused_loudly(error, image.root, name, swapped)
    assert OTHER in str(error)


async def test_an_empty_database_beside_existing_notes_is_not_a_fresh_memory(
    tmp_path: Path,
) -> None:
    image = await make_image(tmp_path)
    name = IDENTITY.database_name
    for side in ("", "-wal", "-shm"):
        (image.root / (name + side)).unlink(missing_ok=True)
    (image.root / name).write_bytes(b"")
    manager, error = await open_or_refuse(image.root)
    await refused(manager, "an emptied database opened as an empty memory")
    assert_refused_loudly(error, image.root, name, b"")


# -- the write-ahead log -------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["flipped", "garbage"])
async def test_unreadable_wal_fails_loudly(tmp_path: Path, damage: str) -> None:
    image = await make_image(tmp_path)
    name = IDENTITY.database_name + "-wal"
    path = image.root / name
    DAMAGES[damage](path, random.Random(damage))
    damaged = path.read_bytes()
    manager, error = await open_or_refuse(image.root)
    if manager is not None:
        async with manager:
            shown = await contents_of(manager)
        pytest.fail(f"a {damage} WAL was dropped silently: {len(shown)} of {len(image.contents)}")
    assert_refused_loudly(error, image.root, name, damaged)
    # the database file itself is untouched and opens with what it holds
    async with await MemoryManager.open(JID, crash_config(image.root)) as manager:
        assert await contents_of(manager) == image.checkpointed


@pytest.mark.parametrize("damage", ["truncated", "empty", "missing-wal", "missing-shm"])
async def test_torn_or_missing_wal_keeps_a_consistent_prefix(tmp_path: Path, damage: str) -> None:
    image = await make_image(tmp_path)
    name = IDENTITY.database_name
    wal = image.root / (name + "-wal")
    if damage == "missing-wal":
        wal.unlink()
    elif damage == "missing-shm":
        (image.root / (name + "-shm")).unlink()
    else:
        DAMAGES[damage](wal, random.Random(damage))
    manager, error = await open_or_refuse(image.root)
    assert error is None, f"a {damage} WAL made the memory unusable: {error}"
    assert manager is not None
    async with manager:
        shown = await contents_of(manager)
        assert await manager.base_store.integrity_check() == ["ok"]
        await manager.flush()
        assert set((await manager.base_store.embedding_ids(fingerprint(manager))).tolist()) == set(
            manager.indexer.index.ids().tolist()  # type: ignore[union-attr]
        )
    assert image.checkpointed <= shown <= image.contents
    if damage == "missing-shm":
        assert shown == image.contents


async def test_another_agents_wal_is_not_replayed_into_this_memory(tmp_path: Path) -> None:
    image = await make_image(tmp_path)
    other = await make_image(tmp_path, OTHER, seed=1)
    wal_name = IDENTITY.database_name + "-wal"
    shutil.copyfile(
        other.root / (AgentIdentity.of(OTHER).database_name + "-wal"), image.root / wal_name
    )
    (image.root / (IDENTITY.database_name + "-shm")).unlink()
    manager, error = await open_or_refuse(image.root)
    if manager is None:
        assert error is not None and error.path is not None
        return
    async with manager:
        shown = await contents_of(manager)
    assert shown <= image.contents, "another agent's memories appeared in this memory"
    assert image.checkpointed <= shown


def fingerprint(manager: MemoryManager) -> str:
    assert manager.indexer is not None
    return manager.indexer.embedder.fingerprint


# -- the FAISS snapshot ---------------------------------------------------------------------


async def assert_vectors_match_contents(manager: MemoryManager) -> None:
    await manager.flush()
    indexer = manager.indexer
    assert indexer is not None
    stored = {memory.id: memory.content async for memory in manager.base_store.iter_all()}
    assert set(indexer.index.ids().tolist()) == set(stored)
    ids = sorted(stored)
    vectors = indexer.embedder.embed_documents([stored[i] for i in ids])
    for row, memory_id in enumerate(ids):
        found, scores = indexer.index.search(vectors[row], 1, allowed_ids=[memory_id])
        assert found.tolist() == [memory_id]
        assert scores[0] == pytest.approx(1.0, abs=1e-4), f"stale vector for memory {memory_id}"


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty", "garbage"])
async def test_damaged_snapshot_is_quarantined_and_rebuilt(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    image = await make_image(tmp_path)
    name = IDENTITY.snapshot_name
    path = image.root / name
    DAMAGES[damage](path, random.Random(damage))
    damaged = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="spade_memory"):
        manager, error = await open_or_refuse(image.root)
    assert error is None, f"a {damage} snapshot made the memory unusable: {error}"
    assert manager is not None
    async with manager:
        assert await contents_of(manager) == image.contents
        await assert_vectors_match_contents(manager)
    assert any(name in record.getMessage() for record in caplog.records), "recovery not logged"
    kept = quarantined(image.root, name)
    assert len(kept) == 1 and kept[0].read_bytes() == damaged


async def test_missing_snapshot_is_rebuilt(tmp_path: Path) -> None:
    image = await make_image(tmp_path)
    (image.root / IDENTITY.snapshot_name).unlink()
    async with await MemoryManager.open(JID, crash_config(image.root)) as manager:
        assert await contents_of(manager) == image.contents
        await assert_vectors_match_contents(manager)


async def test_another_agents_snapshot_is_never_used(tmp_path: Path) -> None:
    image = await make_image(tmp_path)
    other = await make_image(tmp_path, OTHER, seed=1)
    shutil.copyfile(
        other.root / AgentIdentity.of(OTHER).snapshot_name, image.root / IDENTITY.snapshot_name
    )
    async with await MemoryManager.open(JID, crash_config(image.root)) as manager:
        assert await contents_of(manager) == image.contents
        await assert_vectors_match_contents(manager)


async def test_stale_snapshot_of_the_same_agent_is_caught_up(tmp_path: Path) -> None:
    image = await make_image(tmp_path)
    name = IDENTITY.snapshot_name
    stale = (image.root / name).read_bytes()
    async with await MemoryManager.open(JID, crash_config(image.root)) as manager:
        memories = await manager.list(limit=5)
        for memory in memories[:2]:
            await manager.update(memory.id, content=memory_text(90_000 + memory.id))
        await manager.forget(memories[2].id)
        await manager.flush()
    (image.root / name).write_bytes(stale)
    async with await MemoryManager.open(JID, crash_config(image.root)) as manager:
        await assert_vectors_match_contents(manager)


async def test_snapshot_newer_than_a_restored_database_is_not_trusted(tmp_path: Path) -> None:
    image = await make_image(tmp_path)
    name = IDENTITY.database_name
    async with await MemoryManager.open(JID, crash_config(image.root)) as manager:
        pass  # checkpoint: the database file alone holds the memory
    backup = (image.root / name).read_bytes()
    async with await MemoryManager.open(JID, crash_config(image.root)) as manager:
        for memory in (await manager.list(limit=3))[:2]:
            await manager.update(memory.id, content=memory_text(80_000 + memory.id))
        await manager.store(memory_text(81_000))
        await manager.flush()
    (image.root / name).write_bytes(backup)  # the database restored from its backup
    async with await MemoryManager.open(JID, crash_config(image.root)) as manager:
        assert await contents_of(manager) == image.contents
        await manager.store(memory_text(82_000))  # may reuse an id the snapshot knows
        await assert_vectors_match_contents(manager)


# -- the interaction JSON -------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty", "garbage", "other-agent"])
async def test_damaged_interaction_file_fails_loudly(tmp_path: Path, damage: str) -> None:
    image = await make_image(tmp_path)
    name = IDENTITY.interactions_name
    path = image.root / name
    if damage == "other-agent":
        other = await make_image(tmp_path, OTHER, seed=1)
        shutil.copyfile(other.root / AgentIdentity.of(OTHER).interactions_name, path)
    else:
        DAMAGES[damage](path, random.Random(damage))
    damaged = path.read_bytes()
    manager, error = await open_or_refuse(image.root)
    await refused(manager, f"a {damage} interaction file was opened")
    assert_refused_loudly(error, image.root, name, damaged)
    # no backup of the notes: the next open refuses, naming the quarantined copy
    with pytest.raises(MemoryLost) as lost:
        await MemoryManager.open(JID, crash_config(image.root))
    assert error is not None and error.quarantined_to is not None
    assert error.quarantined_to.name in str(lost.value)
    # the base memory was not touched by the refusals; without notes only when told
    async with await MemoryManager.open(JID, crash_config(image.root), start_empty=True) as manager:
        assert await contents_of(manager) == image.contents
        assert await manager.notes("conv") == []
