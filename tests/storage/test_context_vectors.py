"""A turn of a conversation is embedded with the turn before it, when whoever sees the
turn sees that one too; a change of the turn before drops the vector made with it."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import numpy as np
from factories import UNDO_CONTEXT_VECTORS

from spade_memory.config import StorageConfig
from spade_memory.models import Scope
from spade_memory.storage.base import BaseMemoryStore, IndexedText, NewMemory
from spade_memory.storage.embeddings import CONTEXT_CHARS, vector_text

ALICE = "alice@example.org"
BOB = "bob@example.org"


def turn(content: str, conversation: str | None = "chat-1", **fields: object) -> NewMemory:
    return NewMemory(
        uid=uuid.uuid4().hex,
        category=str(fields.pop("category", "fact")),
        content=content,
        context=None,
        confidence=1.0,
        importance=0.5,
        created_at=time.time(),
        source_conversation=conversation,
        **fields,  # type: ignore[arg-type]
    )


async def open_store(path: Path) -> BaseMemoryStore:
    return await BaseMemoryStore.open(
        path, agent="a@x", storage=StorageConfig(), categories=("fact", "preference")
    )


async def insert(store: BaseMemoryStore, *turns: NewMemory) -> list[int]:
    ids = []
    for item in turns:
        ids.append((await store.insert(item, IndexedText(item.content.lower()))).id)
    return ids


async def texts(store: BaseMemoryStore) -> dict[int, str]:
    return {item.memory_id: item.text for item in await store.pending_embeddings("fp", 100)}


async def embed_all(store: BaseMemoryStore) -> None:
    pending = await store.pending_embeddings("fp", 100)
    await store.put_embeddings("fp", 3, [(item, np.ones(3, np.float32)) for item in pending])
    assert await store.count_pending_embeddings("fp") == 0


def test_vector_text_keeps_the_end_of_a_long_turn_before() -> None:
    assert vector_text("Sweden.", None) == "Sweden."
    assert vector_text("Sweden.", "Where did you move from?") == (
        "Where did you move from?\nSweden."
    )
    long = " ".join(f"word{i}" for i in range(200)) + " where did you move from?"
    made = vector_text("Sweden.", long)
    before, content = made.rsplit("\n", 1)
    assert content == "Sweden." and len(before) <= CONTEXT_CHARS
    assert long.endswith(before) and before.startswith("word")  # from a word's start


async def test_a_turn_is_embedded_with_the_turn_before_it(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        first, second, alone = await insert(
            store,
            turn("Where did you move from?"),
            turn("Sweden, four years ago."),
            turn("I keep a note.", conversation=None),
        )
        pending = {item.memory_id: item for item in await store.pending_embeddings("fp", 10)}
        assert pending[first].text == "Where did you move from?"
        assert pending[first].context_at == 0.0
        assert pending[second].text == "Where did you move from?\nSweden, four years ago."
        held = await store.get(first)
        assert held is not None and pending[second].context_at == held.updated_at
        assert pending[alone].text == "I keep a note."
        assert await store.vector_texts([second, alone, 999]) == {
            second: pending[second].text,
            alone: "I keep a note.",
        }
    finally:
        await store.aclose()


async def test_no_context_from_a_turn_others_cannot_see(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        ids = await insert(
            store,
            turn("alice's secret plan", scope=Scope.private(ALICE)),
            turn("a public reply"),  # global after a private turn: no context
            turn("a preference", category="preference"),  # another category: none
            turn("shared words", scope=Scope.shared(ALICE, [BOB])),
            turn("shared again", scope=Scope.shared(ALICE, [BOB])),  # shared: never
            turn("alice again", scope=Scope.private(ALICE)),
            turn("alice goes on", scope=Scope.private(ALICE)),  # same owner, private: yes
        )
        found = await texts(store)
        assert found[ids[1]] == "a public reply"
        assert found[ids[2]] == "a preference"
        assert found[ids[4]] == "shared again"
        assert found[ids[6]] == "alice again\nalice goes on"
    finally:
        await store.aclose()


async def test_changing_or_forgetting_the_turn_before_drops_the_vector(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        first, second, third = await insert(
            store, turn("the old question"), turn("the answer"), turn("thanks")
        )
        await embed_all(store)
        await store.update(
            first,
            {"content": "the new question"},
            text=IndexedText("the new question"),
            now=time.time() + 1,
        )
        assert await texts(store) == {
            first: "the new question",
            second: "the new question\nthe answer",
        }
        await embed_all(store)
        # a new scope for the turn before: the answer is no longer seen with it
        await store.update(first, {"scope": Scope.private(ALICE)}, text=None, now=time.time() + 2)
        assert await texts(store) == {second: "the answer"}
        await embed_all(store)
        # the answer's own scope changes: its vector is made again (now with no context)
        await store.update(second, {"category": "preference"}, text=None, now=time.time() + 3)
        assert await texts(store) == {second: "the answer", third: "thanks"}
        await embed_all(store)
        assert await store.delete(second)
        assert await texts(store) == {third: "thanks"}  # its turn before is gone
    finally:
        await store.aclose()


async def test_a_vector_made_with_a_turn_that_changed_meanwhile_is_refused(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        first, second = await insert(store, turn("question"), turn("answer"))
        read = {item.memory_id: item for item in await store.pending_embeddings("fp", 10)}
        await store.update(
            first,
            {"content": "another question"},
            text=IndexedText("another question"),
            now=time.time() + 1,
        )
        item = read[second]
        stored, _ = await store.put_embeddings("fp", 3, [(item, np.ones(3, np.float32))])
        assert stored == []
        assert await texts(store) == {first: "another question", second: "another question\nanswer"}
        assert await store.delete(first)
        stored, _ = await store.put_embeddings("fp", 3, [(read[second], np.ones(3, np.float32))])
        assert stored == []  # the turn went: a vector made with it is not kept
        assert await texts(store) == {second: "answer"}
    finally:
        await store.aclose()


async def test_opening_an_older_database_embeds_its_turns_again(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = await open_store(path)
    try:
        first, second, third = await insert(
            store, turn("question"), turn("answer"), turn("elsewhere", conversation="chat-2")
        )
        await embed_all(store)
    finally:
        await store.aclose()
    with sqlite3.connect(path) as db:
        db.executescript(";".join(UNDO_CONTEXT_VECTORS))
    store = await open_store(path)
    try:
        assert await texts(store) == {second: "question\nanswer"}
        assert sorted((await store.embedding_ids("fp")).tolist()) == [first, third]
    finally:
        await store.aclose()


async def test_a_vector_written_without_its_context_is_refused(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a.db")
    try:
        first, second = await insert(store, turn("question"), turn("answer"))
        read = {item.memory_id: item for item in await store.pending_embeddings("fp", 10)}
        alone = [read[first], read[second]._replace(text="answer", context_at=0.0)]
        items = [(item, np.ones(3, np.float32)) for item in alone]
        stored, _ = await store.put_embeddings("fp", 3, items)  # made without its context
        assert stored == [first]  # the answer's vector must hold its question
    finally:
        await store.aclose()
