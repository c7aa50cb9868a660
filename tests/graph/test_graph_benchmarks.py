"""The relations benchmark: its data set, its metrics, and a small run of it."""

from __future__ import annotations

import pytest

from benchmarks.relations import Query, load_set, run, summarise


def test_the_relations_set_is_well_formed() -> None:
    memories, queries = load_set()
    assert len(queries) >= 60
    assert {q.language for q in queries} == {"en", "zh"}
    for via in ("name", "topic"):  # half through named entities, half through topics
        assert sum(q.via == via for q in queries) >= len(queries) // 2 - 1
    contents = {m["id"]: m["content"] for m in memories}
    for query in queries:
        for gold in query.gold:
            # the answer never names the person the question is about
            named = query.text.split("'")[0].split()[-1] if query.language == "en" else ""
            assert not named or named not in contents[gold], (query.text, gold)


def test_the_held_out_part_has_both_languages_and_both_links() -> None:
    _, queries = load_set()
    held_out = [q for q in queries if q.part == "held-out"]
    assert sum(q.language == "zh" for q in held_out) >= 20
    assert sum(q.language == "en" for q in held_out) >= 10
    assert {q.via for q in held_out} == {"name", "topic"}
    assert {q.part for q in queries} == {"tuning", "held-out"}


def test_summaries_count_hits_and_reciprocal_ranks() -> None:
    queries = [Query("a", "en", ("x",)), Query("b", "zh", ("y",), via="topic", part="held-out")]
    summary = summarise(queries, [["w", "x"], ["z"]])
    assert summary["en/name"]["count"] == summary["zh/topic"]["count"] == 1
    assert summary["tuning"]["hit@3"] == summary["tuning/en/name"]["hit@3"] == 1.0
    assert summary["held-out/zh/topic"]["count"] == 1
    assert summary["held-out"]["hit@10"] == 0.0
    assert summary["all"]["hit@1"] == 0.0
    assert summary["all"]["hit@3"] == pytest.approx(0.5)
    assert summary["en"]["mrr@10"] == pytest.approx(0.5)
    assert summary["zh"]["hit@10"] == 0.0


async def test_following_links_finds_answers_keywords_alone_miss() -> None:
    memories, queries = load_set()
    chosen = [q for q in queries if q.language == "en"][:4] + [
        q for q in queries if q.language == "zh"
    ][:4]
    results = await run(memories, chosen, embedder=None)
    document = summarise(chosen, results["document"]["rankings"])["all"]
    dual = summarise(chosen, results["dual"]["rankings"])["all"]
    assert dual["hit@5"] > document["hit@5"]
    assert dual["mrr@10"] > document["mrr@10"]
