"""The named reads of the base memory that the CLI, integrations and reranker call
(they hold no SQL of their own)."""

from __future__ import annotations

import ast
import re
import time
import uuid
from pathlib import Path

import numpy as np

import spade_memory
from spade_memory.config import AtomConfig, StorageConfig
from spade_memory.storage.atoms import AtomBook
from spade_memory.storage.base import BaseMemoryStore, IndexedText, NewMemory


def new(content: str, *, created_at: float, status: str = "active") -> NewMemory:
    return NewMemory(
        uid=uuid.uuid4().hex,
        category="fact",
        content=content,
        context=None,
        confidence=1.0,
        importance=0.5,
        created_at=created_at,
        status=status,
    )


async def open_store(path: Path | None) -> BaseMemoryStore:
    return await BaseMemoryStore.open(
        path, agent="a@x", storage=StorageConfig(), categories=("fact",)
    )


async def test_recent_ids_and_created_range() -> None:
    store = await open_store(None)
    try:
        assert await store.created_range() == (None, None)
        assert await store.recent_ids(5) == []
        old = await store.insert(new("old", created_at=100.0), IndexedText("old"))
        mid = await store.insert(new("mid", created_at=200.0), IndexedText("mid"))
        await store.insert(new("gone", created_at=300.0, status="forgotten"), IndexedText("g"))
        assert await store.created_range() == (100.0, 300.0)  # every status
        assert await store.recent_ids(5) == [mid.id, old.id]  # active only, newest first
        await store.touch([old.id], 400.0)  # accessed since: first now
        assert await store.recent_ids(5) == [old.id, mid.id]
        assert await store.recent_ids(1) == [old.id]
    finally:
        await store.aclose()


async def test_indexed_tokens_and_endings() -> None:
    store = await open_store(None)
    try:
        asks = await store.insert(
            new("Where is it？  ", created_at=1.0), IndexedText("where is it")
        )
        says = await store.insert(new("It is here.", created_at=2.0), IndexedText("here"))
        found = await store.indexed_tokens_and_endings([says.id, asks.id, 999])
        assert found == {asks.id: ("where is it", "？"), says.id: ("here", ".")}
        assert await store.indexed_tokens_and_endings([]) == {}
    finally:
        await store.aclose()


async def test_vector_and_atom_counts() -> None:
    store = await open_store(None)
    try:
        memory = await store.insert(new("one", created_at=1.0), IndexedText("one"))
        assert await store.vector_counts() == {}
        (pending,) = await store.pending_embeddings("fp-a", 10)
        assert pending.memory_id == memory.id
        await store.put_embeddings("fp-a", 4, [(pending, np.ones(4, dtype=np.float32))])
        assert await store.vector_counts() == {"fp-a": 1}
        assert await AtomBook(store, AtomConfig()).counts_by_status() == {}
    finally:
        await store.aclose()


async def test_a_file_is_read_without_opening_the_memory(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = await open_store(path)
    memory = await store.insert(new("one", created_at=time.time()), IndexedText("one"))
    (pending,) = await store.pending_embeddings("fp-b", 10)
    assert pending.memory_id == memory.id
    await store.put_embeddings("fp-b", 4, [(pending, np.ones(4, dtype=np.float32))])
    try:
        assert BaseMemoryStore.count_in_file(path) == 1
        assert BaseMemoryStore.fingerprint_in_file(path) == "fp-b"
    finally:
        await store.aclose()
    garbage = tmp_path / "b.db"
    garbage.write_bytes(b"not a database at all" * 100)
    assert BaseMemoryStore.count_in_file(garbage) is None
    assert BaseMemoryStore.fingerprint_in_file(garbage) is None


_SQL = re.compile(
    r"\b(SELECT\s+.+\s+FROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b",
    re.I | re.S,
)


def test_sql_lives_in_storage_only_outside_maintenance() -> None:
    package = Path(spade_memory.__file__).parent
    offenders = []
    for path in sorted(package.rglob("*.py")):
        part = path.relative_to(package).parts[0]
        if part in ("storage", "maintenance"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if is_text and _SQL.search(node.value):
                offenders.append(f"{path.relative_to(package)}:{node.lineno}")
    assert offenders == []
