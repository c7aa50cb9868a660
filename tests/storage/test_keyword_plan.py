"""The keyword planner: exact OR on small memories, bounded narrowing on large ones."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from spade_memory.config import StorageConfig
from spade_memory.storage.base import BaseMemoryStore, IndexedText, NewMemory
from spade_memory.storage.keyword_plan import KeywordPlanner, and_query, or_query


def item(content: str) -> tuple[NewMemory, IndexedText]:
    memory = NewMemory(
        uid=uuid.uuid4().hex,
        category="fact",
        content=content,
        context=None,
        confidence=1.0,
        importance=0.5,
        created_at=time.time(),
    )
    return memory, IndexedText(content)


def test_queries_quote_every_term() -> None:
    assert or_query(["a", 'b"c', ""]) == '"a" OR "b""c"'
    assert and_query(["a", "b"]) == '"a" AND "b"'


async def test_large_memory_narrows_from_the_rarest_terms(tmp_path: Path) -> None:
    store = await BaseMemoryStore.open(
        tmp_path / "k.db", agent="k@x", storage=StorageConfig(), categories=("fact",)
    )
    try:
        # "common" is in every row, "rare" in 30, "rarer" in 10 (all of them with "rare").
        rows = []
        for i in range(3_000):
            words = ["common", f"filler{i % 97}"]
            if i % 100 == 0:
                words += ["rare"]
            if i % 300 == 0:
                words += ["rarer"]
            rows.append(item(" ".join(words)))
        await store.insert_many(rows)
        exact = await store.keyword_search(["common", "rare", "rarer"], limit=5)
        planner = KeywordPlanner(store.fetchall, bm25_weights="1.0, 0.3", exact_rows=100)
        where, params = "m.status IN (?)", ["active"]
        narrowed = await planner.search(
            ["common", "rare", "rarer"], where=where, params=params, limit=15
        )
        ids_with = {
            term: {
                int(row[0])
                for row in await store.fetchall(
                    "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?", [term]
                )
            }
            for term in ("rare", "rarer")
        }
        # Rows holding both rare terms come first, then rows holding the rarest alone.
        first = [memory_id for memory_id, _ in narrowed[:10]]
        assert set(first) == ids_with["rare"] & ids_with["rarer"]
        assert all(memory_id in ids_with["rare"] for memory_id, _ in narrowed)
        scores = [score for _, score in narrowed]
        assert scores == sorted(scores, reverse=True) and len(narrowed) == 15
        # A term held by more rows than the budget: only the newest rows are looked at.
        newest = KeywordPlanner(
            store.fetchall, bm25_weights="1.0, 0.3", exact_rows=0, budget_rows=300
        )
        hits = await newest.search(["common"], where=where, params=params, limit=50)
        assert len(hits) == 50
        assert min(memory_id for memory_id, _ in hits) >= 3_000 - 300
        # The store's own planner keeps the exact OR query for a memory of this size:
        # its best rows hold all three terms.
        assert len(exact) == 5 and {memory_id for memory_id, _ in exact} <= ids_with["rarer"]
    finally:
        await store.aclose()


async def test_unknown_terms_and_empty_queries(tmp_path: Path) -> None:
    store = await BaseMemoryStore.open(None, agent="k@x", storage=StorageConfig())
    try:
        await store.insert_many([item("alpha beta")])
        planner = KeywordPlanner(store.fetchall, bm25_weights="1.0, 0.3", exact_rows=0)
        where, params = "1", []
        assert await planner.search([], where=where, params=params, limit=5) == []
        assert await planner.search(["zzz"], where=where, params=params, limit=5) == []
        hits = await planner.search(["alpha", "zzz"], where=where, params=params, limit=5)
        assert [memory_id for memory_id, _ in hits] == [1]
    finally:
        await store.aclose()
