"""A fixed corpus and queries whose search results are recorded in ``data/``.

The corpus is stored with a fixed clock and the hashing embedder, so every
search over it is deterministic; :func:`run_queries` gives each result as exact
figures (``float.hex``), so a recorded run can be compared bit for bit. Each
conversation's turns are stored one after the other. The record ranks every
candidate: it is made without the relevance floor, which is tested on its own.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any

from factories import UNDO_SCOPES

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig

START = 1_700_000_000.0
DAY = 86_400.0

_CONVERSATIONS: dict[str, list[str]] = {
    "trip": [
        "Ann: Are you coming to Lisbon with us in June?",
        "Bob: Yes, I booked the flight on Tuesday.",
        "Ann: Great, Carla found a flat near the river.",
        "Bob: Does the flat have a kitchen?",
        "Ann: It has a small kitchen and a balcony.",
        "Bob: Then I will cook fish on Friday.",
    ],
    "work": [
        "Carla: The quarterly report is due next Monday.",
        "Dan: Who owns the budget section?",
        "Carla: Ann wrote the budget section last year.",
        "Dan: I will ask Ann to review the numbers.",
        "Carla: Remember that the auditors visit in March.",
    ],
    "music": [
        "Ann: What instrument does Bob play these days?",
        "Dan: The cello, since school.",
        "Ann: Lovely, see you at the concert then.",
        "Dan: The concert starts at eight in the town hall.",
    ],
}

_LOOSE: list[tuple[str, str, float]] = [
    ("Ann prefers green tea to coffee.", "preference", 0.8),
    ("Bob is allergic to peanuts.", "fact", 0.9),
    ("Carla works as an architect in Porto.", "fact", 0.6),
    ("Dan usually answers email in the morning.", "pattern", 0.4),
    ("The team can translate documents into Spanish.", "capability", 0.5),
    ("Ann prefers green tea to coffee in the afternoon.", "preference", 0.3),
    ("Bob moved to Lisbon in 2021 for a job at a bank.", "fact", 0.7),
    ("安娜喜欢在周末去公园跑步。", "preference", 0.5),
    ("鲍勃在北京大学学习计算机科学。", "fact", 0.6),
]

QUERIES: list[tuple[str, int, tuple[str, ...] | None]] = [
    ("Who found the flat in Lisbon?", 5, None),
    ("What does Bob play?", 3, None),
    ("When is the quarterly report due?", 5, None),
    ("Does the flat have a kitchen?", 4, None),
    ("What does Ann like to drink?", 5, ("preference",)),
    ("Where does Carla work?", 5, ("fact", "pattern")),
    ("Who is allergic to peanuts?", 2, None),
    ("When do the auditors visit?", 6, None),
    ("安娜周末做什么？", 3, None),
    ("Who studies computer science in Beijing?", 5, None),
    ("concert town hall time", 8, None),
    ("budget review Ann numbers", 10, None),
]

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "document": {"graph_route": False},
    "rrf": {"fusion_mode": "rrf"},
}


def _hex(value: float | None) -> str | None:
    return None if value is None else float(value).hex()


async def store_corpus(memory: MemoryManager, clock: list[float]) -> None:
    """Store the corpus, each memory one minute after the previous one."""
    step = 0
    for name, turns in _CONVERSATIONS.items():
        for index, text in enumerate(turns):
            clock[0] = START + 60.0 * step
            step += 1
            await memory.store(
                text,
                importance=0.3 + 0.1 * (index % 5),
                source_conversation=name,
                source_sender=f"{text.split(':', 1)[0].lower()}@localhost",
            )
    for text, category, importance in _LOOSE:
        clock[0] = START + 60.0 * step
        step += 1
        await memory.store(text, category=category, importance=importance)
    await memory.flush()


async def run_queries(memory: MemoryManager) -> list[dict[str, Any]]:
    """Every query's results: ids, contents and exact scores and explanations."""
    recorded: list[dict[str, Any]] = []
    for query, limit, categories in QUERIES:
        results = await memory.search(query, limit=limit, categories=categories, explain=True)
        rows = []
        for result in results:
            explanation = result.explanation
            assert explanation is not None
            rows.append(
                {
                    "id": result.memory.id,
                    "content": result.memory.content,
                    "score": _hex(result.score),
                    "keyword": _hex(explanation.keyword_score),
                    "vector": _hex(explanation.vector_score),
                    "document": _hex(explanation.document_score),
                    "graph": _hex(explanation.graph_score),
                    "relevance": _hex(explanation.relevance),
                    "recency": _hex(explanation.recency),
                    "weights": {k: _hex(v) for k, v in sorted(explanation.weights.items())},
                    "routes": list(explanation.routes),
                    "rerank": {k: _hex(v) for k, v in sorted(explanation.rerank.items())},
                }
            )
        recorded.append({"query": query, "results": rows})
    return recorded


async def record(root: Path, variant: str) -> list[dict[str, Any]]:
    """Store the corpus under ``root`` and run the queries with ``variant``'s knobs."""
    clock = [START]
    retrieval = RetrievalConfig(cache_ttl_seconds=0.0, relevance_floor=False, **VARIANTS[variant])
    config = MemoryConfig(root=root, embedder="hashing", retrieval=retrieval)
    async with await MemoryManager.open(
        "recorder@localhost", config, clock=lambda: clock[0]
    ) as memory:
        await store_corpus(memory, clock)
        clock[0] = START + 3 * DAY
        return await run_queries(memory)


def downgrade_to_v4(database: Path) -> None:
    """Make ``database`` as schema v4 left it: no previous-turn links, no row checksums."""
    db = sqlite3.connect(database)
    try:
        db.executescript(";".join(UNDO_SCOPES) + ";")
        db.executescript(
            "DROP INDEX memories_by_previous; DROP INDEX memories_by_conversation; "
            "ALTER TABLE memories DROP COLUMN previous_id; "
            "PRAGMA user_version = 4;"
        )
    finally:
        db.close()


async def record_migrated(root: Path, variant: str) -> list[dict[str, Any]]:
    """Like :func:`record`, on a database stored, taken back to schema v4 and migrated."""
    clock = [START]
    retrieval = RetrievalConfig(cache_ttl_seconds=0.0, relevance_floor=False, **VARIANTS[variant])
    config = MemoryConfig(root=root, embedder="hashing", retrieval=retrieval)
    async with await MemoryManager.open(
        "recorder@localhost", config, clock=lambda: clock[0]
    ) as memory:
        await store_corpus(memory, clock)
    (database,) = root.glob("*_base_memory.db")
    downgrade_to_v4(database)
    clock[0] = START + 3 * DAY
    async with await MemoryManager.open(
        "recorder@localhost", config, clock=lambda: clock[0]
    ) as memory:
        await memory.flush()  # the turns the migration embeds again (schema v11)
        return await run_queries(memory)


def assert_matches_record(got: Any, want: Any, where: str = "") -> None:
    """``got`` equals ``want``, hex floats within a relative 1e-6 of each other (or
    1e-7 of each other, near zero)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), where
        for key in want:
            assert_matches_record(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_matches_record(a, b, f"{where}[{index}]")
    elif isinstance(want, str) and want.startswith(("0x", "-0x")) and isinstance(got, str):
        a, b = float.fromhex(got), float.fromhex(want)
        # scores come from float32 vectors: near zero, another build of numpy or FAISS
        # may round a 0 to a few units of float32 precision (1.7e-10 seen)
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7), f"{where}: {a!r} != {b!r}"
    else:
        assert got == want, where
