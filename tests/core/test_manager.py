from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from spade_memory import (
    ConfigError,
    InvalidAgentId,
    InvalidToolInput,
    MemoryConfig,
    MemoryManager,
    MemoryNotFound,
    Scope,
    StorageError,
    StoreClosedError,
    Viewer,
)


def _nested(depth: int) -> dict[str, object]:
    value: dict[str, object] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


async def test_store_search_list_get_update_forget(manager: MemoryManager) -> None:
    stored = await manager.store(
        "The staging database password rotates every 30 days", category="fact", importance=0.8
    )
    await manager.store("Alice likes green tea", category="preference")
    results = await manager.search("database password rotation")
    assert results and results[0].memory.id == stored.id
    assert [m.content for m in await manager.list("preference")] == ["Alice likes green tea"]
    assert (await manager.get(stored.id)).importance == 0.8
    updated = await manager.update(
        stored.id, content="The production database password rotates weekly"
    )
    assert updated.content.startswith("The production")
    assert (await manager.search("production password"))[0].memory.id == stored.id
    await manager.forget(stored.id)
    with pytest.raises(MemoryNotFound):
        await manager.get(stored.id)
    with pytest.raises(MemoryNotFound):
        await manager.forget(stored.id)
    assert all(r.memory.id != stored.id for r in await manager.search("database password"))


async def test_memory_survives_close_and_reopen(file_config: MemoryConfig) -> None:
    async with await MemoryManager.open("alice@localhost/phone", file_config) as first:
        stored = await first.store("Bob's birthday is on March 3rd")
        await first.add_note("conv-1", "Bob prefers short answers", author="bob@localhost")
        await first.flush()
    async with await MemoryManager.open("Alice@LocalHost", file_config) as second:
        assert await second.get(stored.id) == stored
        assert (await second.search("when is Bob's birthday"))[0].memory.id == stored.id
        notes = await second.notes("conv-1")
        assert [n.content for n in notes] == ["Bob prefers short answers"]
        stats = await second.stats()
        assert stats.total == 1 and stats.notes == 1 and stats.embedded == 1


async def test_in_memory_mode_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memory_config: MemoryConfig
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    async with await MemoryManager.open("eph@localhost", memory_config) as memory:
        stored = await memory.store("ephemeral fact about zebras")
        await memory.store_many(
            [{"content": "second fact"}, {"content": "third", "category": "pattern"}]
        )
        await memory.flush()
        assert (await memory.search("zebras"))[0].memory.id == stored.id
        await memory.update(stored.id, importance=0.9)
        await memory.add_note("c", "note")
        assert len(await memory.list()) == 3
        await memory.forget(stored.id)
        assert (await memory.stats()).in_memory
        exported = await memory.export()
        assert len(exported["memories"]) == 2
    assert list(tmp_path.iterdir()) == []
    async with await MemoryManager.open("eph@localhost", memory_config) as again:
        assert await again.list() == []


async def test_two_updates_at_once_leave_the_index_of_what_is_stored(
    manager: MemoryManager,
) -> None:
    stored = await manager.store("Zebras live on the savanna")
    await manager.flush()

    await asyncio.gather(
        manager.update(stored.id, content="Penguins live in Antarctica"),
        manager.update(stored.id, context="from a documentary"),
        manager.update(stored.id, category="preference"),
    )

    now = await manager.get(stored.id)
    assert (now.content, now.context, now.category) == (
        "Penguins live in Antarctica",
        "from a documentary",
        "preference",
    )
    await manager.flush()  # the new content's vector too
    # the keyword index holds what is stored (the check recomputes every index text)
    report = await manager.check(deep=True)
    assert report.problems == 0, report


async def test_many_updates_of_one_memory_at_once_all_land(manager: MemoryManager) -> None:
    stored = await manager.store("The original text about tea")

    versions = [f"Version {n} of the text about tea" for n in range(30)]

    await asyncio.gather(*(manager.update(stored.id, content=text) for text in versions))

    assert (await manager.get(stored.id)).content == "Version 29 of the text about tea"


async def test_an_update_allowed_on_a_scope_another_open_changed_is_checked_again(
    file_config: MemoryConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        await MemoryManager.open("a@localhost", file_config) as agent,
        await MemoryManager.open("a@localhost", file_config) as other,
    ):
        told = await agent.store("The meeting is at noon", scope=Scope.private("bob@localhost"))
        given = agent.engine.base.given

        async def rescoped_meanwhile(ids: Sequence[int]) -> object:
            # between the check of bob's right and the write: carol's now
            monkeypatch.setattr(agent.engine.base, "given", given)
            await other.update(told.id, scope=Scope.private("carol@localhost"))
            return await given(ids)

        monkeypatch.setattr(agent.engine.base, "given", rescoped_meanwhile)
        with pytest.raises(MemoryNotFound):
            await agent.update(told.id, importance=0.99, viewer=Viewer(jid="bob@localhost"))
        now = await agent.get(told.id)
        assert now.scope == Scope.private("carol@localhost") and now.importance == told.importance


async def test_two_agents_in_one_root_are_isolated(file_config: MemoryConfig) -> None:
    async with (
        await MemoryManager.open("a_b@c", file_config) as first,
        await MemoryManager.open("a@b_c", file_config) as second,
    ):
        await first.store("first agent secret token kiwi")
        await second.store("second agent secret token mango")
        await first.flush()
        await second.flush()
        assert {r.memory.content for r in await first.search("secret token mango")} <= {
            "first agent secret token kiwi"
        }
        assert all("kiwi" not in r.memory.content for r in await second.search("kiwi"))
        assert len(await first.list()) == 1 and len(await second.list()) == 1
    files = sorted(p.name for p in Path(file_config.root).iterdir())  # type: ignore[arg-type]
    assert len([f for f in files if f.endswith("_base_memory.db")]) == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"content": ""},
        {"content": "   "},
        {"content": "x" * 8001},
        {"content": "nul\x00byte"},
        {"content": "lone \ud800 surrogate"},
        {"content": "ok", "category": "facts"},
        {"content": "ok", "confidence": 1.5},
        {"content": "ok", "importance": float("nan")},
        {"content": "ok", "importance": True},
        {"content": 42},
        {"content": "ok", "metadata": {"bad": object()}},
        {"content": "ok", "metadata": _nested(5000)},
    ],
)
async def test_bad_input_is_refused_and_writes_nothing(
    manager: MemoryManager, kwargs: dict
) -> None:  # type: ignore[type-arg]
    content = kwargs.pop("content")
    with pytest.raises(InvalidToolInput):
        await manager.store(content, **kwargs)
    assert (await manager.stats()).total == 0


async def test_store_many_is_all_or_nothing(manager: MemoryManager) -> None:
    with pytest.raises(InvalidToolInput, match="item 1"):
        await manager.store_many([{"content": "good"}, {"content": ""}])
    assert (await manager.stats()).total == 0
    stored = await manager.store_many([{"content": f"fact {i}"} for i in range(50)])
    assert len(stored) == 50 and len({m.id for m in stored}) == 50


async def test_search_argument_checks(manager: MemoryManager) -> None:
    for bad in ({"limit": 0}, {"limit": 101}, {"category": "nope"}):
        with pytest.raises(InvalidToolInput):
            await manager.search("x", **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidToolInput):
        await manager.search("")


async def test_a_config_that_is_no_memory_config_touches_nothing(memory_root: Path) -> None:
    with pytest.raises(ConfigError, match="config must be a MemoryConfig, got dict"):
        await MemoryManager.open("alice@localhost", {"root": memory_root})  # type: ignore[arg-type]
    assert list(memory_root.iterdir()) == []


async def test_invalid_jid_touches_nothing(memory_root: Path) -> None:
    with pytest.raises(InvalidAgentId):
        await MemoryManager.open("not a jid", MemoryConfig(root=memory_root, embedder=None))
    assert list(memory_root.iterdir()) == []


async def test_closed_manager_refuses_use(file_config: MemoryConfig) -> None:
    memory = await MemoryManager.open("alice@localhost", file_config)
    await memory.aclose()
    await memory.aclose()
    with pytest.raises(StoreClosedError):
        await memory.store("x")
    with pytest.raises(StoreClosedError):
        await memory.search("x")
    with pytest.raises(StoreClosedError):
        await memory.notes("c")


async def test_keyword_only_memory(memory_root: Path) -> None:
    config = MemoryConfig(root=memory_root, embedder=None)
    async with await MemoryManager.open("kw@localhost", config) as memory:
        stored = await memory.store("The staging database password rotates every 30 days")
        results = await memory.search("database password rotation", explain=True)
        assert results[0].memory.id == stored.id
        explanation = results[0].explanation
        assert explanation is not None and explanation.vector_score is None
        assert explanation.keyword_score is not None and explanation.routes == ("keyword",)
    assert not list(memory_root.glob("*.faiss"))


async def test_explain_shows_both_subroutes(manager: MemoryManager) -> None:
    await manager.store("The staging database password rotates every 30 days")
    await manager.flush()
    result = (await manager.search("database password rotation", explain=True))[0]
    assert result.explanation is not None
    assert result.explanation.keyword_score is not None
    assert result.explanation.vector_score is not None
    assert set(result.explanation.weights) >= {"relevance", "importance", "recency", "fusion_bm25"}
    assert result.explanation.final_score == pytest.approx(result.score)


async def test_export_import_round_trip(file_config: MemoryConfig) -> None:
    async with await MemoryManager.open("src@localhost", file_config) as source:
        await source.store("fact one", context="ctx", importance=0.7, metadata={"k": 1})
        await source.store("preference two", category="preference")
        await source.add_note("conv", "a note", author="bob@localhost")
        exported = await source.export()
    async with await MemoryManager.open("dst@localhost", file_config) as target:
        assert await target.import_data(exported) == (2, 1)
        assert (await target.import_data(exported))[0] == 0
        again = await target.export()
        strip = lambda ms: sorted(  # noqa: E731
            ({k: v for k, v in m.items() if k != "id"} for m in ms), key=lambda m: m["uid"]
        )
        assert strip(again["memories"]) == strip(exported["memories"])
        with pytest.raises(InvalidToolInput):
            await target.import_data({"format": "nope"})


async def test_an_import_of_copies_counts_no_new_memory(file_config: MemoryConfig) -> None:
    async with await MemoryManager.open("src@localhost", file_config) as source:
        await source.store("fact one")
        await source.store("preference two", category="preference")
        exported = await source.export()
        # the same memories under new uids: each reinforces its copy, none is added
        renamed = {**exported, "memories": [{**m, "uid": None} for m in exported["memories"]]}
        assert await source.import_data(renamed) == (0, 0)
        assert (await source.stats()).total == 2
        twice = {**exported, "memories": [{"content": "fact three"}, {"content": "fact three"}]}
        assert await source.import_data(twice) == (1, 0)


async def test_default_root_is_never_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPADE_MEMORY_ROOT", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    async with await MemoryManager.open("dflt@localhost", MemoryConfig(embedder=None)) as memory:
        assert memory.root == (tmp_path / "xdg" / "spade_memory").resolve()
    assert sorted(os.listdir(tmp_path)) == ["xdg"]


@pytest.mark.parametrize("under", ["", "sub"], ids=["a-file", "under-a-file"])
async def test_a_root_that_is_a_file_is_refused_clearly(tmp_path: Path, under: str) -> None:
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    root = taken / under if under else taken
    with pytest.raises(StorageError, match=r"memory root .*taken"):
        await MemoryManager.open("a@localhost", MemoryConfig(root=root))
    assert taken.read_text() == "not a folder"


_IN_MEMORY_AFTER_A_FILE_MEMORY = """
import asyncio, sys
from spade_memory import MemoryConfig, MemoryManager

async def main(root):
    async with await MemoryManager.open("a@localhost", MemoryConfig(root=root, embedder=None)):
        pass  # a persistent memory opened and closed, no Chinese read
    config = MemoryConfig(in_memory=True, embedder=None)
    async with await MemoryManager.open("b@localhost", config) as memory:
        await memory.store("王芳住在北京，她喜欢喝茶。")  # loads jieba's dictionary

asyncio.run(main(sys.argv[1]))
"""


def test_an_in_memory_memory_writes_no_dictionary_cache_into_a_closed_memorys_root(
    tmp_path: Path,
) -> None:
    # jieba's dictionary is loaded once per process, on the first Chinese text: the
    # cache folder of a persistent memory closed before must not receive it
    root = tmp_path / "root"
    done = subprocess.run(
        [sys.executable, "-c", _IN_MEMORY_AFTER_A_FILE_MEMORY, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not (root / "cache").exists()
