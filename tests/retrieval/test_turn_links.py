"""The previous-turn link: set on insert (also under group commit), migrated, searched."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from factories import hashing_config

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig
from tests.retrieval.recorded_corpus import (
    VARIANTS,
    assert_matches_record,
    downgrade_to_v4,
    record_migrated,
)

_RECORDED = json.loads(
    (Path(__file__).parent / "data" / "recorded_search.json").read_text(encoding="utf-8")
)

_MUSIC = [
    "Bob: What instrument does Ann play these days?",
    "The cello, since school.",
    "Bob: Lovely, see you at the concert then.",
]
_GARDEN = [
    "Carla: The tomatoes need water twice a week.",
    "Dan: I planted basil beside them.",
    "Carla: The slugs ate the lettuce again.",
]


def _config(root: Path) -> MemoryConfig:
    retrieval = RetrievalConfig(
        cache_ttl_seconds=0.0,
        importance_weight=0.0,
        recency_weight=0.0,
        mmr_lambda=1.0,
        graph_route=False,
    )
    return MemoryConfig(root=root, embedder=None, retrieval=retrieval)


async def _links(memory: MemoryManager) -> dict[int, int | None]:
    rows = await memory.base_store.fetchall("SELECT id, previous_id FROM memories", ())
    return {int(row[0]): row[1] for row in rows}


def _chained(ids: list[int], links: dict[int, int | None]) -> bool:
    return [links[key] for key in ids] == [None, *ids[:-1]]


async def test_interleaved_concurrent_stores_link_each_turn_to_its_own(tmp_path: Path) -> None:
    async with await MemoryManager.open("links@localhost", _config(tmp_path)) as memory:
        stored = []
        for music, garden in zip(_MUSIC, _GARDEN, strict=True):
            stored.extend(
                await asyncio.gather(
                    memory.store(music, source_conversation="music"),
                    memory.store(garden, source_conversation="garden"),
                    memory.store("A loose fact about the weather."),
                )
            )
        by_talk: dict[str | None, list[int]] = {}
        for item in stored:
            by_talk.setdefault(item.source_conversation, []).append(item.id)
        links = await _links(memory)
        assert _chained(by_talk["music"], links) and _chained(by_talk["garden"], links)
        assert all(links[key] is None for key in by_talk[None])
        # ids one apart are not turns of one conversation here
        assert by_talk["music"][1] - by_talk["music"][0] > 1
        results = await memory.search("Which instrument does Ann play?", limit=3)
        scores = {result.memory.content: result.score for result in results}
        # the reply, stored two ids after the question, still gets its share
        assert scores[_MUSIC[1]] == pytest.approx(0.8 * scores[_MUSIC[0]])


async def test_many_turns_in_one_transaction_chain_in_order(tmp_path: Path) -> None:
    async with await MemoryManager.open("batch@localhost", _config(tmp_path)) as memory:
        first = await memory.store(_GARDEN[0], source_conversation="garden")
        batch = await memory.store_many(
            [
                {"content": text, "source_conversation": talk}
                for pair in zip(_MUSIC, [*_GARDEN[1:], "Dan: Then net them."], strict=True)
                for text, talk in zip(pair, ("music", "garden"), strict=True)
            ]
        )
        links = await _links(memory)
        music = [item.id for item in batch if item.source_conversation == "music"]
        garden = [first.id, *(item.id for item in batch if item.source_conversation == "garden")]
        assert _chained(music, links) and _chained(garden, links)


async def test_neighbour_reads_follow_the_links(tmp_path: Path) -> None:
    async with await MemoryManager.open("reads@localhost", _config(tmp_path)) as memory:
        question = await memory.store(_MUSIC[0], source_conversation="music")
        other = await memory.store(_GARDEN[0], source_conversation="garden")
        reply = await memory.store(_MUSIC[1], source_conversation="music")
        loaded = await memory.base_store.get_many_indexed([reply.id], neighbours=True)
        assert sorted(loaded) == [question.id, reply.id]
        assert loaded[reply.id][2] == question.id
        loaded = await memory.base_store.get_many_indexed([question.id], neighbours=True)
        assert sorted(loaded) == [question.id, reply.id] and other.id not in loaded


async def test_migration_links_existing_rows_in_their_order_of_insertion(tmp_path: Path) -> None:
    async with await MemoryManager.open("old@localhost", _config(tmp_path)) as memory:
        stored = [
            await memory.store(text, source_conversation=talk)
            for music, garden in zip(_MUSIC, _GARDEN, strict=True)
            for text, talk in ((music, "music"), (garden, "garden"))
        ]
        await memory.store("A loose fact.")
    (database,) = tmp_path.glob("*_base_memory.db")
    downgrade_to_v4(database)
    async with await MemoryManager.open("old@localhost", _config(tmp_path)) as memory:
        links = await _links(memory)
        for talk in ("music", "garden"):
            ids = [item.id for item in stored if item.source_conversation == talk]
            assert _chained(ids, links)
        assert len(list(tmp_path.rglob(f"{database.stem}.v4.*.db"))) == 1  # backed up first


@pytest.mark.parametrize("variant", sorted(VARIANTS))
async def test_a_migrated_old_database_finds_the_recorded_results(
    tmp_path: Path, variant: str
) -> None:
    # recorded by the search that took ids one apart as neighbouring turns
    assert_matches_record(await record_migrated(tmp_path, variant), _RECORDED[variant], variant)


async def test_turns_grouped_into_one_commit_chain_in_their_order(tmp_path: Path) -> None:
    async with await MemoryManager.open("group@localhost", _config(tmp_path)) as memory:
        talks = ("music", "garden") * 8
        stored = await asyncio.gather(
            *(
                memory.store(f"turn {index} of {talk}", source_conversation=talk)
                for index, talk in enumerate(talks)
            )
        )
        links = await _links(memory)
        for talk in ("music", "garden"):
            ids = sorted(item.id for item in stored if item.source_conversation == talk)
            assert _chained(ids, links)


async def test_an_answer_is_no_copy_of_the_question_before_it(tmp_path: Path) -> None:
    # The reply's vector is made with the long question before it (nearly the
    # question's own vector): compared by their words, the two are no duplicates.
    question = (
        "Ann: Which city did Bob's sister move to after the wedding in the spring, when the "
        "whole family came together by the lake, the weather was kind, the cousins sang old "
        "songs, the band from the harbour played until late and everybody talked about new "
        "jobs, new homes and the long summer ahead of them?"
    )
    async with await MemoryManager.open("turns@localhost", hashing_config(tmp_path)) as memory:
        asked, reply = await memory.store_many(
            [
                {"content": question, "source_conversation": "c1"},
                {"content": "Bob: Oslo.", "source_conversation": "c1"},
            ]
        )
        await memory.store_many(
            [
                {
                    "content": f"Ann: Which city did Carla's friend {n} visit?",
                    "source_conversation": f"o{n}",
                }
                for n in range(6)
            ]
        )
        await memory.flush()
        assert memory.indexer is not None
        embedder = memory.indexer.embedder
        vectors = await memory.base_store.vectors_for(
            embedder.fingerprint, embedder.dim, [asked.id, reply.id]
        )
        assert float(vectors[asked.id] @ vectors[reply.id]) >= 0.95  # a near-copy by vector
        found = await memory.search("Which city did Bob's sister move to?", limit=3)
        assert [result.memory.id for result in found[:2]] == [asked.id, reply.id]
