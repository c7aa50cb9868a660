"""A query of one or two characters: a Chinese name is looked up as typed, a short
Latin word never inside other words."""

from __future__ import annotations

from spade_memory import MemoryConfig, MemoryManager

TEXTS = (
    "The Porto office opens at 9",
    "Dana said she painted a sunset",
    "We will pay the invoice tomorrow",
    "The AI team ships on Monday",
    "邱实在食堂吃饭",
)


async def test_a_short_query_matches_words_not_pieces_of_them() -> None:
    config = MemoryConfig(in_memory=True, embedder=None)
    async with await MemoryManager.open("short@localhost", config) as memory:
        for text in TEXTS:
            await memory.store(text)
        await memory.flush()
        for query in ("to", "a", "it"):  # inside "Porto", "said", "invoice"
            assert await memory.search(query, limit=5) == [], query
        assert [r.memory.content for r in await memory.search("AI", limit=5)] == [TEXTS[3]]
        assert [r.memory.content for r in await memory.search("邱实", limit=5)] == [TEXTS[4]]
