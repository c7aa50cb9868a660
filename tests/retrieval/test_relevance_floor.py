"""The relevance floor: a search returns only memories with evidence of matching it."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig
from spade_memory.embedding import shared_hashing
from spade_memory.embedding.chance import above_chance, chance_similarity
from spade_memory.errors import InvalidToolInput
from spade_memory.retrieval.graph import GraphHits
from spade_memory.retrieval.relevance import (
    answered,
    evidence_terms,
    evidenced,
    keyword_shares,
    vector_floor,
)
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


async def test_the_chance_level_is_kept_with_the_fingerprint(tmp_path: Path) -> None:
    async with await MemoryManager.open("floor@localhost", _config(tmp_path)) as memory:
        await memory.store("Alice likes green tea in the morning.")
        await memory.flush()
        await memory.search("green tea")
        embedder = shared_hashing()
        stored = await memory._engine.base.meta_get(f"chance_similarity:{embedder.fingerprint}")
        assert stored is not None and float(stored) == pytest.approx(chance_similarity(embedder))


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


def test_keyword_share_weighs_an_unknown_term_most() -> None:
    shares = keyword_shares(
        ["capital", "peru"], {"capital": 3}, 100, {1: (["the", "capital"], False)}, [1]
    )
    assert 0 < shares[1] < 0.5
    assert not answered(shares, {}, keyword_share=0.5, keyword_floor=None, query_floor=None)


def test_a_query_is_answered_by_a_share_with_some_similarity_or_by_meaning() -> None:
    shares = {1: 0.6, 2: 0.1}
    floors = {"keyword_share": 0.5, "keyword_floor": 0.8, "query_floor": 0.9}
    assert answered(shares, {1: 0.85}, **floors)
    assert not answered(shares, {1: 0.7, 2: 0.85}, **floors)  # the share lacks similarity
    assert answered({}, {3: 0.95}, **floors)  # by meaning alone
    assert not answered({}, {3: 0.85}, **floors)
    # no vector for the query: the share alone decides
    assert answered(shares, {}, keyword_share=0.5, keyword_floor=None, query_floor=None)


def test_evidence_terms_are_content_words_not_bigrams() -> None:
    assert evidence_terms("what is the population", ["popul"]) == ["popul"]
    tokenizer = get_tokenizer()
    query = "量子纠缠的原理是什么"
    kept = evidence_terms(query, tokenizer.query_terms(query))
    assert "原理" in kept and "量子" in kept
    assert "理是" not in kept and "缠的" not in kept
