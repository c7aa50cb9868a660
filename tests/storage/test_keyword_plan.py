"""The keyword planner: exact OR on small memories, bounded narrowing on large ones."""

from __future__ import annotations

import dataclasses
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


async def test_filtered_hits_equal_filtering_inside_the_sql(tmp_path: Path) -> None:
    store = await BaseMemoryStore.open(
        tmp_path / "f.db", agent="k@x", storage=StorageConfig(), categories=("fact", "preference")
    )
    try:
        rows = []
        for i in range(400):
            memory, text = item(" ".join(["tea"] + [f"word{i % 13}"] * (1 + i % 7)))
            if i % 50 == 49:  # a few preferences, among the longest (lowest BM25) rows
                memory = dataclasses.replace(memory, category="preference")
            rows.append((memory, text))
        await store.insert_many(rows)
        for memory_id in range(1, 400, 3):  # a third of the rows archived
            await store.update(memory_id, {"status": "archived"}, text=None, now=time.time())
        planner = KeywordPlanner(store.fetchall, bm25_weights="1.0, 0.3")
        for where, params, limit in (
            ("m.status IN (?)", ["active"], 10),
            ("m.status IN (?) AND m.category IN (?)", ["active", "preference"], 10),
            ("m.status IN (?)", ["archived"], 30),
            ("1", [], 10),
        ):
            expected = await store.fetchall(
                "SELECT f.rowid, bm25(memories_fts, 1.0, 0.3) AS s FROM memories_fts AS f "
                f"JOIN memories AS m ON m.id = f.rowid WHERE memories_fts MATCH ? AND {where} "
                "ORDER BY s, f.rowid LIMIT ?",
                ['"tea"', *params, limit],
            )
            hits = await planner.search(["tea"], where=where, params=params, limit=limit)
            assert len(hits) == len(expected) > 0
            # Same scores in the same order (ties may list equal rows in either order).
            assert [round(score, 9) for _, score in hits] == [
                round(-float(row[1]), 9) for row in expected
            ]
            assert {memory_id for memory_id, _ in hits} <= {
                int(row[0])
                for row in await store.fetchall(
                    f"SELECT m.id FROM memories AS m WHERE {where}", params
                )
            }
    finally:
        await store.aclose()


async def test_a_term_cached_as_absent_is_still_found_once_stored(tmp_path: Path) -> None:
    store = await BaseMemoryStore.open(None, agent="k@x", storage=StorageConfig())
    try:
        await store.insert_many([item(f"common filler{i}") for i in range(50)])
        planner = KeywordPlanner(store.fetchall, bm25_weights="1.0, 0.3", exact_rows=0)
        where, params = "1", []
        assert await planner.search(["newword"], where=where, params=params, limit=5) == []
        (stored,) = await store.insert_many([item("common newword arrives")])
        # the cache still says no memory holds "newword" (it was filled a moment ago)
        hits = await planner.search(["common", "newword"], where=where, params=params, limit=5)
        assert hits[0][0] == stored.id
    finally:
        await store.aclose()
