"""The turn benchmark runs, and reports the query's embedding as its search timed it."""

from __future__ import annotations

from pathlib import Path

from benchmarks.perf_turn_memory import measure_turns

EXCHANGES = [
    ("I repaired the blue bicycle yesterday", "Nice, was the chain broken?"),
    ("Yes, and the brakes too", "Then it needed both"),
    ("Which bicycle did I repair?", "The blue one"),
]


async def test_the_turns_are_timed_with_their_query_embedding(tmp_path: Path) -> None:
    result = await measure_turns(tmp_path, EXCHANGES, background=False, embedder="hashing")
    assert result["turns"] == len(EXCHANGES) and result["derive"] == "ack"
    assert 0.0 < result["embed_p50_ms"] < result["p50_ms"]
    assert 0.0 < result["without_embed_p50_ms"] < result["p50_ms"]
    assert result["recall_p50_ms"] <= result["p50_ms"]
