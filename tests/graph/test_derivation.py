"""Background derivation: graph rows and atoms written after the store is acknowledged."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from factories import UNDO_DERIVATION

from spade_memory.config import MaintenanceConfig, MemoryConfig, RetrievalConfig, StorageConfig
from spade_memory.engine import derivation
from spade_memory.engine.derivation import GATHER_AT_MOST_SECONDS
from spade_memory.manager import MemoryManager
from spade_memory.models import Scope
from spade_memory.text.atoms import Atom


def _config(root: Path | None = None, **storage: object) -> MemoryConfig:
    settings = StorageConfig(derive_in_background=True, **storage)  # type: ignore[arg-type]
    retrieval = RetrievalConfig(cache_ttl_seconds=0)
    if root is None:
        return MemoryConfig(in_memory=True, embedder=None, storage=settings, retrieval=retrieval)
    return MemoryConfig(root=root, embedder="hashing", storage=settings, retrieval=retrieval)


@pytest.fixture
async def memory() -> AsyncIterator[MemoryManager]:
    async with await MemoryManager.open("derive@localhost", _config()) as opened:
        await opened.maintenance.wait()
        yield opened


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "memory"


async def _paused(root: Path) -> MemoryManager:
    """The memory under ``root`` with its derivation pipeline stopped: marks stay."""
    opened = await MemoryManager.open("derive@localhost", _config(root))
    await opened.maintenance.wait()
    await opened.flush()  # what an earlier open left is derived first
    await opened._engine.deriver.aclose()
    return opened


async def _pending(memory: MemoryManager) -> int:
    return await memory._engine.base.count_pending_derivations()


async def _stored_atoms(memory: MemoryManager, memory_id: int) -> list[Atom]:
    """The atoms stored for a memory now, without waiting for the (stopped) pipeline."""
    found = await memory._engine.atoms.atoms([memory_id], memory._engine.now())
    return found.get(memory_id, [])


async def test_a_store_is_derived_after_it_is_acknowledged(root: Path) -> None:
    async with await _paused(root) as memory:
        stored = await memory.store("Alice works at Acme in Berlin.", entities=["Zed"])
        assert await _pending(memory) == 1
        assert await _stored_atoms(memory, stored.id) == []
        # found by its document route meanwhile, and recalled whole
        assert stored.id in {r.memory.id for r in await memory.search("Acme Berlin")}
        recalled = await memory.recall_memory(stored.id)
        assert recalled is not None and recalled.content == stored.content
        assert memory.indexer is not None
        await memory.indexer.flush()  # its vector written: only its derivation pends
        assert (await memory.check(deep=True)).clean  # pending is not missing
    async with await MemoryManager.open("derive@localhost", _config(root)) as memory:
        await memory.flush()
        assert await _pending(memory) == 0
        atoms = await memory.atoms(stored.id)
        assert [a.text for a in atoms] == ["Alice works at Acme in Berlin."]
        nodes = await memory._engine.base.fetchall("SELECT value FROM graph_nodes")
        assert {"Alice", "Acme", "Zed"} <= {row[0] for row in nodes}  # the caller's names kept


async def test_a_pending_claim_already_hides_the_older_one(root: Path) -> None:
    async with await MemoryManager.open("derive@localhost", _config(root)) as memory:
        paris = await memory.store("Alice lives in Paris.")
        await memory.flush()
    async with await _paused(root) as memory:
        berlin = await memory.store("Alice lives in Berlin.")
        assert await _pending(memory) == 1
        # the older atom is still active in the database, but not injected as current
        assert (await _stored_atoms(memory, paris.id))[0].status == "active"
        recalled = await memory.recall("where does Alice live")
        assert [r.memory.id for r in recalled] == [berlin.id]
        assert await memory.recall_memory(paris.id) is None
        assert [r.memory.id for r in await memory.search("where does Alice live")] == [berlin.id]
    async with await MemoryManager.open("derive@localhost", _config(root)) as memory:
        await memory.flush()
        assert (await memory.atoms(paris.id))[0].status == "superseded"


async def test_a_claim_told_again_while_a_newer_one_is_pending_stands_before_and_after(
    root: Path,
) -> None:
    async with await MemoryManager.open("derive@localhost", _config(root)) as memory:
        paris = await memory.store("Alice lives in Paris.")
        await memory.flush()
    async with await _paused(root) as memory:
        await memory.store("Alice lives in Rome.")  # not derived yet
        again = await memory.store("Alice lives in Paris.")  # told again, after Rome
        assert again.id == paris.id
        recalled = await memory.recall("where does Alice live")
        assert [r.memory.content for r in recalled] == ["Alice lives in Paris."]
    async with await MemoryManager.open("derive@localhost", _config(root)) as memory:
        await memory.flush()
        recalled = await memory.recall("where does Alice live")
        assert [r.memory.content for r in recalled] == ["Alice lives in Paris."]


async def test_two_pending_claims_the_newer_wins(root: Path) -> None:
    async with await _paused(root) as memory:
        paris = await memory.store("Alice lives in Paris.")
        berlin = await memory.store("Alice lives in Berlin.")
        assert await _pending(memory) == 2
        assert await memory.recall_memory(paris.id) is None
        recalled = await memory.recall_memory(berlin.id)
        assert recalled is not None and recalled.content == berlin.content


async def test_a_pending_claim_never_hides_across_scopes(root: Path) -> None:
    async with await MemoryManager.open("derive@localhost", _config(root)) as memory:
        lisbon = await memory.store("Carol lives in Lisbon.", scope=Scope.private("alice@x.org"))
        await memory.flush()
    async with await _paused(root) as memory:
        await memory.store("Carol lives in Paris.", scope=Scope.private("bob@x.org"))
        assert await _pending(memory) == 1
        recalled = await memory.recall_memory(lisbon.id)
        assert recalled is not None and recalled.content == lisbon.content


async def test_a_pending_claim_shared_with_other_readers_hides_nothing(root: Path) -> None:
    alice = "alice@x.org"
    async with await MemoryManager.open("derive@localhost", _config(root)) as memory:
        to_bob = await memory.store("Dana lives in Paris.", scope=Scope.shared(alice, ["b@x.org"]))
        await memory.flush()
    async with await _paused(root) as memory:
        await memory.store("Dana lives in Oslo.", scope=Scope.shared(alice, ["c@x.org"]))
        assert await _pending(memory) == 1
        recalled = await memory.recall_memory(to_bob.id)
        assert recalled is not None and recalled.content == to_bob.content


async def test_bulk_forget_and_update_while_pending(root: Path) -> None:
    async with await _paused(root) as memory:
        stored = await memory.store_many(
            [{"content": f"Bob met Carol in Rome on day {n}."} for n in range(300)]
        )
        gone, changed = stored[0], stored[1]
        await memory.forget(gone.id)
        await memory.update(changed.id, content="Bob met Dave in Oslo.")
        assert await _pending(memory) == 298  # forgotten: no mark; updated: derived now
        changed_atoms = await _stored_atoms(memory, changed.id)
        assert [a.text for a in changed_atoms] == ["Bob met Dave in Oslo."]
    async with await MemoryManager.open("derive@localhost", _config(root)) as memory:
        await memory.flush()
        assert await _pending(memory) == 0
        assert await memory.atoms(gone.id) == []
        assert [a.text for a in await memory.atoms(changed.id)] == ["Bob met Dave in Oslo."]
        assert len(await memory.atoms(stored[-1].id)) == 1
        counts = await memory._engine.atoms.counts_by_status()
        assert sum(counts.values()) == 299  # one per memory: none written twice
        assert (await memory.check(deep=True)).clean


async def test_derivation_in_the_background_catches_up(memory: MemoryManager) -> None:
    stored = await memory.store_many(
        [{"content": f"Erin moved to Kyoto in {1990 + n}."} for n in range(200)]
    )
    await memory.store("我们明天去北京。")
    await memory.flush()
    assert await _pending(memory) == 0
    assert memory._engine.deriver.derived == 201
    for sample in stored[::40]:
        assert [a.text for a in await memory.atoms(sample.id)] == [sample.content]


async def test_a_version_9_database_migrates_with_nothing_pending(root: Path) -> None:
    async with await MemoryManager.open("derive@localhost", _config(root)) as memory:
        stored = await memory.store("Frank lives in Porto.")
        await memory.flush()
        path = memory._engine.base.path
    assert path is not None
    with sqlite3.connect(path) as db:
        db.executescript(";".join(UNDO_DERIVATION) + ";")
    async with await MemoryManager.open("derive@localhost", _config(root)) as memory:
        assert await _pending(memory) == 0  # what it holds was derived already
        assert [a.text for a in await memory.atoms(stored.id)] == [stored.content]
        later = await memory.store("Frank lives in Faro.")
        await memory.flush()
        assert (await memory.atoms(stored.id))[0].status == "superseded"
        assert [a.text for a in await memory.atoms(later.id)] == [later.content]


async def test_a_look_that_embeds_nothing_on_open_derives_nothing_either(root: Path) -> None:
    async with await _paused(root) as memory:
        stored = await memory.store("Hana lives in Kobe.")
    quiet = dataclasses.replace(
        _config(root), maintenance=MaintenanceConfig(check_on_open=False, embed_on_open=False)
    )
    async with await MemoryManager.open("derive@localhost", quiet) as memory:
        await asyncio.sleep(2 * GATHER_AT_MOST_SECONDS)
        assert await _pending(memory) == 1  # opening wrote nothing
        await memory.flush()
        assert await _pending(memory) == 0
        assert [a.text for a in await memory.atoms(stored.id)] == [stored.content]


_DIGITS = "零一二三四五六七八九"


def _chinese_line(number: int) -> str:
    """A Chinese chat line of four runs, each different from every other line's."""
    n = "".join(_DIGITS[int(d)] for d in f"{number:04d}")
    return f"用户{n}号说，{n}号仓库在城东，明天{n}点开会，记得带{n}号文件。"


async def test_a_bulk_of_chinese_lines_is_not_cut_again_when_derived() -> None:
    """The pipeline finds the cuts of a second of bulk stores (1,500 lines, 6,000 runs)."""
    from spade_memory.engine.derivation import Deriver
    from spade_memory.text.tokenizer import cut_cjk

    async with await MemoryManager.open("derive@localhost", _config()) as memory:
        await memory.maintenance.wait()
        engine = memory._engine
        await engine.deriver.aclose()  # marks only; derived below, after every store
        cut_cjk.cache_clear()
        lines = [_chinese_line(number) for number in range(1_500)]
        for start in range(0, len(lines), 100):
            await memory.store_many({"content": line} for line in lines[start : start + 100])
        stored = cut_cjk.cache_info()
        assert stored.misses >= 4 * len(lines)  # every run cut once when stored
        deriver = Deriver(engine.base, engine.input, batch_size=100, on_derived=lambda ids: None)
        deriver.start(resume=True)
        await deriver.flush()
        await deriver.aclose()
        engine.deriver = deriver
        derived = cut_cjk.cache_info()
        assert deriver.derived == len(lines)
        assert derived.misses - stored.misses < len(lines) // 10  # found, not cut again
        assert derived.hits - stored.hits >= 4 * len(lines)


async def test_an_imported_memory_is_found_before_it_is_derived() -> None:
    """Imported atoms start from the import, so an old memory is not lapsed while
    its derivation is pending: search and recall find it before and after."""
    now = [1_750_000_000.0]
    config = MemoryConfig(in_memory=True, embedder="hashing")
    async with await MemoryManager.open("a@localhost", config, clock=lambda: now[0]) as first:
        await first.store("I will visit the dentist tomorrow morning.", category="fact")
        await first.flush()
        exported = await first.export()
    now[0] += 30 * 86_400  # a month later, the short-lived plan has lapsed there
    async with await MemoryManager.open("b@localhost", config, clock=lambda: now[0]) as second:
        await second.maintenance.wait()
        await second._engine.deriver.aclose()  # marks stay: derivation is pending
        await second.import_data(exported)
        assert await _pending(second) == 1
        texts = ["I will visit the dentist tomorrow morning."]
        assert [r.memory.content for r in await second.search("dentist")] == texts
        assert [r.memory.content for r in await second.recall("dentist")] == texts


async def test_atoms_of_a_memory_stored_a_moment_ago(memory: MemoryManager) -> None:
    """atoms() waits for the derivation behind the acknowledgement, as the graph views do."""
    stored = await memory.store("Alice works at Acme in Berlin.")
    assert [a.text for a in await memory.atoms(stored.id)] == [stored.content]  # no flush()


async def test_a_memory_closed_right_after_storing_is_derived_by_close(root: Path) -> None:
    async with await MemoryManager.open("derive@localhost", _config(root)) as memory:
        await memory.maintenance.wait()
        await memory.store("Alice lives in Paris.")
        await memory.store_many([{"content": f"Bob visited town {i}."} for i in range(50)])
    (path,) = root.glob("*_base_memory.db")
    with sqlite3.connect(path) as db:  # as close left it, read by no memory
        assert db.execute("SELECT count(*) FROM derive_pending").fetchone() == (0,)
        atoms = db.execute("SELECT count(DISTINCT memory_id) FROM memory_atoms").fetchone()
        assert atoms == (51,)


async def test_stores_that_keep_coming_are_derived_once_they_pause(
    memory: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each store moves the end of the gathering wait on; a pause ends it, and so
    does a flush, at once."""
    monkeypatch.setattr(derivation, "GATHER_SECONDS", 0.6)
    monkeypatch.setattr(derivation, "GATHER_AT_MOST_SECONDS", 30.0)
    await memory.flush()  # the pipeline idle, its next wait bound by the values above
    loop = asyncio.get_running_loop()
    for number in range(8):
        await memory.store(f"Guest {number} lives in Lyon.")
        await asyncio.sleep(0.1)
    assert await _pending(memory) == 8  # 0.8 s of stores, none 0.6 s after another
    paused = loop.time()
    while await _pending(memory) and loop.time() - paused < 20:
        await asyncio.sleep(0.05)
    assert await _pending(memory) == 0
    assert loop.time() - paused >= 0.45  # the pause was waited for

    for number in range(3):
        await memory.store(f"Host {number} lives in Nice.")
    started = loop.time()
    await memory.flush()  # ends the wait: no 0.6 s pause, no 30 s bound
    assert loop.time() - started < 0.5
    assert await _pending(memory) == 0
