"""A word with an invisible character inside (a soft hyphen from a web page, a joiner)
is found by the word as typed, in memories stored now and in those stored before."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from spade_memory import MemoryConfig, MemoryManager
from spade_memory.storage.memory_rows import INDEX_TEXT_VERSION
from spade_memory.text.tokenizer import get_tokenizer

STORED = [
    "The infor\u00admation desk moved to the second floor",
    "Her pass\u2060word rotates every month",
    "The lobby has a new coffee machine",
]


async def _found(memory: MemoryManager, query: str) -> list[str]:
    return [result.memory.content for result in await memory.search(query, limit=3)]


async def test_a_hidden_character_inside_a_word_does_not_hide_it(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None)
    async with await MemoryManager.open("desk@x.example", config) as memory:
        await memory.store_many([{"content": text} for text in STORED])
        assert await _found(memory, "information") == [STORED[0]]
        assert await _found(memory, "password") == [STORED[1]]


async def test_memories_indexed_before_are_indexed_again_on_open(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None)
    jid = "desk@x.example"
    async with await MemoryManager.open(jid, config) as memory:
        await memory.store_many([{"content": text} for text in STORED])
        database = memory.base_store.path
    # as version 2 indexed them: a hidden character split its word
    tokenize = get_tokenizer().tokenize
    with sqlite3.connect(database) as db:
        for rowid, content in db.execute("SELECT id, content FROM memories").fetchall():
            split = content.replace("\u00ad", " ").replace("\u2060", " ")
            db.execute(
                "UPDATE memories_fts SET content_tokens = ? WHERE rowid = ?",
                (" ".join(tokenize(split)), rowid),
            )
        db.execute("UPDATE meta SET value = '2' WHERE key = 'index_text_version'")
    with sqlite3.connect(database) as db:  # what a search by the word finds then
        assert db.execute(
            "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'inform OR password'"
        ).fetchone() == (0,)
    db.close()
    async with await MemoryManager.open(jid, config) as memory:
        assert await _found(memory, "information") == [STORED[0]]
        assert await _found(memory, "password") == [STORED[1]]
    with sqlite3.connect(database) as db:
        (version,) = db.execute(
            "SELECT value FROM meta WHERE key = 'index_text_version'"
        ).fetchone()
    db.close()
    assert version == str(INDEX_TEXT_VERSION) == "4"
