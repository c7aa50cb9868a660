"""What one search reads: each query once, the memories and their tokens in one batch."""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig
from spade_memory.retrieval.rerank import (
    LexicalReranker,
    coverage,
    indexed_tokens,
    lexical_signals,
    phrase_match,
    proximity,
)
from spade_memory.storage.base import BaseMemoryStore, IndexedText
from spade_memory.storage.graph_store import GraphStore
from spade_memory.text.tokenizer import get_tokenizer

_TEXTS = [
    "Alice joined the security team in Lisbon last spring.",
    "Bob works with Alice on the payments team.",
    "The security team meets every Monday at nine.",
    "Carol asked whether the security team reviewed the deploy pipeline?",
    "Yes, the security team reviewed the deploy pipeline on Friday.",
    "Dave moved to Porto and plays the violin in a quartet.",
    "Alice and Carol went hiking near Sintra with the payments team.",
    "The deploy pipeline runs the tests before every release.",
    "Bob bought a camera at the bakery next to the museum.",
    "Eve leads the payments team since March.",
]
_QUERIES = [
    "who works with Alice?",
    "when does the security team meet?",
    "did the security team review the deploy pipeline",
    "violin",
    "Bob camera museum",
]


_WATCHED = contextvars.ContextVar("watched", default=False)


class _Reads:
    """The read queries (with their parameters) of the calls made through :meth:`watch`;
    the manager's background work is not counted."""

    def __init__(self) -> None:
        self.queries: list[tuple[str, tuple[Any, ...]]] = []

    async def watch(self, manager: MemoryManager, query: str, limit: int = 3) -> list[Any]:
        self.queries.clear()
        token = _WATCHED.set(True)  # tasks the search starts inherit it
        try:
            return await manager.search(query, limit=limit)
        finally:
            _WATCHED.reset(token)

    def duplicates(self) -> list[tuple[str, tuple[Any, ...]]]:
        seen: set[tuple[str, tuple[Any, ...]]] = set()
        repeated = []
        for query in self.queries:
            if query in seen:
                repeated.append(query)
            seen.add(query)
        return repeated


@pytest.fixture
async def reads(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[_Reads]:
    recorded = _Reads()
    original = BaseMemoryStore._fetchall

    async def recording(self: BaseMemoryStore, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        if _WATCHED.get():
            recorded.queries.append((sql, tuple(params)))
        return await original(self, sql, params)

    monkeypatch.setattr(BaseMemoryStore, "_fetchall", recording)
    yield recorded


async def _open(root: Path, **retrieval: Any) -> MemoryManager:
    config = MemoryConfig(
        root=root,
        embedder=retrieval.pop("embedder", "hashing"),
        retrieval=RetrievalConfig(cache_ttl_seconds=0, **retrieval),
    )
    manager = await MemoryManager.open("reads@localhost", config)
    await manager.store_many([{"content": text} for text in _TEXTS])
    await manager.flush()
    return manager


@pytest.mark.parametrize("graph_route", [True, False])
async def test_a_search_runs_no_query_twice(
    tmp_path: Path, reads: _Reads, graph_route: bool
) -> None:
    async with await _open(tmp_path, graph_route=graph_route) as manager:
        for query in _QUERIES:
            results = await reads.watch(manager, query)
            assert results
            assert reads.duplicates() == [], query
            if graph_route and "security team" in query:
                # the concept's phrase was looked for in the memories' text
                phrase = " ".join(get_tokenizer().tokenize("security team"))
                assert any(f'content_tokens : "{phrase}"' in map(str, p) for _, p in reads.queries)


async def test_a_keyword_search_reads_in_few_round_trips(tmp_path: Path, reads: _Reads) -> None:
    async with await _open(tmp_path, graph_route=False, embedder=None) as manager:
        await manager.search("did the security team review the deploy pipeline", limit=3)
        results = await reads.watch(manager, "did the security team review the deploy pipeline")
        assert "deploy pipeline" in results[0].memory.content
        # BM25 with its filter; then, side by side, the candidates with their tokens
        # and neighbours, and which of them are hidden (the frequencies are cached).
        assert len(reads.queries) == 3, [sql for sql, _ in reads.queries]
        assert sum("bm25(" in sql for sql, _ in reads.queries) == 1


async def test_get_many_indexed_gives_the_indexed_tokens(tmp_path: Path) -> None:
    async with await _open(tmp_path, graph_route=False) as manager:
        base = manager.base_store
        plain = await base.get_many(range(1, 20))
        indexed = await base.get_many_indexed([*range(1, 20), 1])
        assert set(indexed) == set(plain) and len(plain) == len(_TEXTS)
        for key, (memory, tokens, previous) in indexed.items():
            assert previous is None  # stored outside any conversation
            assert memory == plain[key]
            assert tokens == IndexedText.of(memory.content).content_tokens
        async with base.transaction() as db:
            await db.execute("DELETE FROM memories_fts WHERE rowid = 2")
        memory, tokens, _ = (await base.get_many_indexed([2]))[2]
        assert tokens is None and memory == plain[2]


async def test_preloaded_tokens_give_the_signals_read_from_the_index(tmp_path: Path) -> None:
    async with await _open(tmp_path, graph_route=False) as manager:
        base = manager.base_store
        reranker = LexicalReranker(base, get_tokenizer())
        query = "did the security team review the deploy pipeline?"
        terms = get_tokenizer().query_terms(query)
        ids = list(range(1, len(_TEXTS) + 1))
        config = RetrievalConfig()
        read = await reranker.signals(query, terms, ids, config)
        loaded = await base.get_many_indexed(ids)
        given = {
            key: indexed_tokens(memory.content, tokens)
            for key, (memory, tokens, _) in loaded.items()
            if tokens is not None
        }
        assert await reranker.signals(query, terms, ids, config, indexed=given) == read
        assert read[4].asks and not read[5].asks  # the question, and its answer


def test_indexed_tokens_trims_spaces_only_as_sqlite_does() -> None:
    assert indexed_tokens("is it? ", "is it") == (["is", "it"], True)
    assert indexed_tokens("是吗\uff1f", "是 吗")[1]
    assert not indexed_tokens("is it?\n", "is it")[1]  # rtrim() keeps the newline


async def test_phrase_count_given_is_not_counted_again(tmp_path: Path, reads: _Reads) -> None:
    async with await _open(tmp_path, graph_route=False) as manager:
        graph = GraphStore(manager.base_store)
        terms = get_tokenizer().tokenize("security team")
        count = await graph.text_count(terms, phrase=True, cap=50)
        phrase = " ".join(terms)
        counted = await graph.phrase_memories(phrase, tokens=True, limit=10, cap=50)
        assert counted[0] == count == 4 and len(counted[1]) == 4
        token = _WATCHED.set(True)
        try:
            given = await graph.phrase_memories(phrase, tokens=True, limit=10, cap=50, count=count)
        finally:
            _WATCHED.reset(token)
        assert given == counted and len(reads.queries) == 1


async def test_neighbour_hits_carry_the_stored_nodes(tmp_path: Path) -> None:
    async with await _open(tmp_path, graph_route=True) as manager:
        graph = GraphStore(manager.base_store)
        alice = (await graph.nodes_by_keys(["alice"]))[0]
        hits = await graph.neighbour_hits([alice.id])
        assert hits
        nodes = {node.id: node for node in await graph.nodes_by_ids(hit[1].id for hit in hits)}
        for node, neighbour, _relation, _weight in hits:
            assert node == alice.id
            assert neighbour == nodes[neighbour.id]


async def test_an_absent_term_is_asked_again_only_after_a_write(
    tmp_path: Path, reads: _Reads
) -> None:
    async with await _open(tmp_path, graph_route=False, embedder=None) as manager:
        base = manager.base_store

        async def vocabulary_reads(terms: list[str]) -> int:
            token = _WATCHED.set(True)
            try:
                reads.queries.clear()
                await base.document_frequencies(terms)
            finally:
                _WATCHED.reset(token)
            return sum("fts5vocab" not in sql and "_vocab" in sql for sql, _ in reads.queries)

        assert await vocabulary_reads(["zeppelin", "alic"]) == 1
        assert await vocabulary_reads(["zeppelin", "alic"]) == 0  # both remembered
        await manager.store("A zeppelin flew over Lisbon.")
        await manager.flush()
        assert await vocabulary_reads(["zeppelin"]) == 1  # the write made it ask again
        frequencies, _ = await base.document_frequencies(["zeppelin"])
        assert frequencies == {"zeppelin": 1}


async def test_the_filter_runs_on_the_best_rows_in_the_same_query(tmp_path: Path) -> None:
    async with await _open(tmp_path, graph_route=False, embedder=None) as manager:
        base = manager.base_store
        every = await base.keyword_search(["team"], limit=10, statuses=None)
        assert len(every) == 7
        gone = every[0][0]
        await manager.archive(gone)  # still indexed, no longer active
        active = await base.keyword_search(["team"], limit=10)
        assert [hit for hit in every if hit[0] != gone] == active
        assert [key for key, _ in await base.keyword_search(["team"], limit=10, statuses=None)] == [
            key for key, _ in every
        ]


@given(
    query=st.lists(st.sampled_from("abcde"), max_size=6),
    tokens=st.lists(st.sampled_from("abcdef"), max_size=12),
)
def test_the_signals_are_those_of_the_signal_functions(query: list[str], tokens: list[str]) -> None:
    terms = list(dict.fromkeys(query))
    weights = {term: 1.0 + index for index, term in enumerate(terms) if term != "e"}
    found = lexical_signals(query, terms, weights, tokens, signal_weights=(1.0, 0.5, 0.5, 0.5))
    assert found.coverage == coverage(terms, set(tokens), weights)
    assert found.proximity == proximity(set(terms), tokens)
    assert found.phrase == phrase_match(query, tokens)
    assert found.lead == (1.0 if tokens and tokens[0] in terms else 0.0)
    values = (found.coverage, found.proximity, found.phrase, found.lead)
    assert (
        found.score == sum(w * v for w, v in zip((1.0, 0.5, 0.5, 0.5), values, strict=True)) / 2.5
    )


async def test_neighbours_in_a_conversation_are_read_with_the_candidates(
    tmp_path: Path, reads: _Reads
) -> None:
    turns = [
        ("What instrument does Ann play these days?", "talk-1"),
        ("The cello, since school.", "talk-1"),
        ("Dave moved to Porto last year.", "talk-2"),
        ("Ann also sings in a choir.", None),
        ("Nobody asked about the weather.", "talk-2"),
    ]
    config = MemoryConfig(
        root=tmp_path,
        embedder=None,
        retrieval=RetrievalConfig(cache_ttl_seconds=0, graph_route=False),
    )
    async with await MemoryManager.open("reads@localhost", config) as manager:
        stored = await manager.store_many(
            [{"content": text, "source_conversation": talk} for text, talk in turns]
        )
        await manager.flush()  # nothing left to derive: no reads of pending claims
        ids = [memory.id for memory in stored]
        loaded = await manager.base_store.get_many_indexed([ids[0], ids[3]], neighbours=True)
        # the next turn of the same conversation; not the other conversation's
        assert sorted(loaded) == [ids[0], ids[1], ids[3]]
        assert await manager.base_store.get_many_indexed([ids[0]]) == {ids[0]: loaded[ids[0]]}
        await manager.search("which instrument does Ann play", limit=3)
        results = await reads.watch(manager, "which instrument does Ann play")
        # the reply shares the question's score though no keyword route found it
        assert "The cello, since school." in [result.memory.content for result in results]
        assert len(reads.queries) == 3, [sql for sql, _ in reads.queries]
