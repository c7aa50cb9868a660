"""Rebuilds into a shadow, switched atomically: interrupted anywhere they resume, writes
made meanwhile are kept, and the result equals an uninterrupted rebuild."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from maint_support import Opener, graph_rows, rows

from spade_memory.config import MaintenanceConfig
from spade_memory.embedding.hashing import HashingEmbedder, shared_hashing
from spade_memory.errors import ConfigError
from spade_memory.manager import MemoryManager
from spade_memory.text.tokenizer import get_tokenizer

TOPICS = ("harbour", "violin", "glacier", "compiler", "orchard", "telescope", "saffron", "relay")
BATCH = 5


class Interrupted(Exception):
    """Raised by the test's progress callback to cut a rebuild short."""


def fact(n: int) -> str:
    return f"Note {n}: the {TOPICS[n % len(TOPICS)]} team met on day {n} in room {n * 7}."


async def filled(
    open_memory: Opener, count: int = 37, jid: str = "alice@localhost"
) -> MemoryManager:
    memory = await open_memory(jid)
    await memory.store_many([{"content": fact(n), "context": f"ctx {n}"} for n in range(count)])
    await memory.flush()
    return memory


async def keyword_rows(memory: MemoryManager) -> list[tuple[Any, ...]]:
    return await rows(
        memory, "SELECT rowid, content_tokens, context_tokens FROM memories_fts ORDER BY rowid"
    )


async def expected_keyword_rows(memory: MemoryManager) -> list[tuple[Any, ...]]:
    tokenize = get_tokenizer().tokenize
    return [
        (m.id, " ".join(tokenize(m.content)), " ".join(tokenize(m.context or "")))
        async for m in memory.base_store.iter_all()
    ]


async def vector_rows(memory: MemoryManager) -> list[tuple[Any, ...]]:
    return await rows(
        memory, "SELECT memory_id, fingerprint, dim, vector FROM embeddings ORDER BY memory_id"
    )


async def expected_vector_rows(memory: MemoryManager) -> list[tuple[Any, ...]]:
    embedder = shared_hashing()
    memories = [m async for m in memory.base_store.iter_all()]
    matrix = embedder.embed_documents([m.content for m in memories])
    return [
        (m.id, embedder.fingerprint, embedder.dim, np.asarray(v, dtype=np.float32).tobytes())
        for m, v in zip(memories, matrix, strict=True)
    ]


async def leftovers(memory: MemoryManager) -> list[tuple[Any, ...]]:
    return await rows(
        memory,
        "SELECT name FROM sqlite_master WHERE name LIKE '%shadow%' OR name LIKE 'rebuild_log%' "
        "UNION ALL SELECT key FROM meta WHERE key LIKE 'rebuild:%'",
    )


async def expected_state(memory: MemoryManager, what: str) -> Any:
    if what == "fts":
        return await expected_keyword_rows(memory)
    if what == "vectors":
        return await expected_vector_rows(memory)
    return None


async def state(memory: MemoryManager, what: str) -> Any:
    if what == "fts":
        return await keyword_rows(memory)
    if what == "vectors":
        return await vector_rows(memory)
    return await graph_rows(memory)


def stop_after(batches: int) -> Any:
    """A progress callback that interrupts the rebuild after ``batches`` batches."""
    calls = 0

    def progress(done: int, total: int) -> None:
        nonlocal calls
        calls += 1
        if calls > batches:  # the first call comes before any batch
            raise Interrupted(f"after {batches} batches")

    return progress


@pytest.mark.parametrize("what", ["fts", "vectors", "graph"])
async def test_a_full_rebuild_reproduces_the_derived_data(open_memory: Opener, what: str) -> None:
    memory = await filled(open_memory)
    before = await state(memory, what)
    seen: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        seen.append((done, total))

    [result] = await memory.maintenance.rebuild(what, batch=BATCH, progress=progress)
    assert (result.what, result.processed, result.resumed) == (what, 37, False)
    assert seen[0] == (0, 37) and seen[-1] == (37, 37)
    assert await state(memory, what) == before
    if what != "graph":
        assert before == await expected_state(memory, what)
        assert result.generation == 1
        [again] = await memory.maintenance.rebuild(what, batch=BATCH)
        assert again.generation == 2
    assert await leftovers(memory) == []
    assert (await memory.check(deep=True)).clean


async def interrupt_then_resume(open_memory: Opener, what: str, batches: int) -> None:
    memory = await filled(open_memory, jid=f"agent-{what}-{batches}@localhost")
    with pytest.raises(Interrupted):
        await memory.maintenance.rebuild(what, batch=BATCH, progress=stop_after(batches))
    assert memory.maintenance_status.state == "failed"
    assert await memory.base_store.meta_get(f"rebuild:{what}") is not None
    # Writes while the rebuild waits: caught by its change log.
    added = await memory.store("A brand new note about kites")
    await memory.update(1, content="Note 1 now speaks of submarines")
    await memory.forget(2)
    writes = 0

    async def write_meanwhile(done: int, total: int) -> None:
        nonlocal writes
        if done and writes < 2:  # writes between the resumed rebuild's batches
            writes += 1
            await memory.store(f"Written during the rebuild, number {writes}, lanterns")
            await memory.update(3 + writes, content=f"Rewritten {writes}: comets")

    [result] = await memory.maintenance.rebuild(what, batch=BATCH, progress=write_meanwhile)
    assert result.resumed and writes == 2
    await memory.flush()
    resumed = await state(memory, what)
    expected = await expected_state(memory, what)
    if expected is not None:
        assert resumed == expected
    [full] = await memory.maintenance.rebuild(what, batch=BATCH)
    assert not full.resumed
    await memory.flush()
    assert await state(memory, what) == resumed  # identical to a full rebuild
    assert await leftovers(memory) == []
    assert (await memory.check(deep=True)).clean
    found = await memory.search("kites")
    assert found and found[0].memory.id == added.id
    assert (await memory.search("submarines"))[0].memory.id == 1
    assert (await memory.search("lanterns", limit=3))[0].memory.content.endswith("lanterns")
    assert (await memory.search("comets", limit=3))[0].memory.content.endswith("comets")
    await memory.aclose()


@pytest.mark.parametrize("what", ["fts", "vectors", "graph"])
async def test_an_interrupted_rebuild_resumes_and_keeps_every_write(
    open_memory: Opener, what: str
) -> None:
    draw = random.Random(f"rebuild-{what}")  # interruption points, the same on every run
    for batches in sorted(draw.sample(range(8), 3)):
        await interrupt_then_resume(open_memory, what, batches)


async def test_an_interrupted_rebuild_resumes_when_the_memory_opens_again(
    open_memory: Opener,
) -> None:
    memory = await filled(open_memory)
    with pytest.raises(Interrupted):
        await memory.maintenance.rebuild("fts", batch=BATCH, progress=stop_after(2))
    await memory.aclose()
    memory = await open_memory(maintenance=MaintenanceConfig(check_on_open=True))
    stored = await memory.store("Stored right after opening: a note on kayaks")
    status = await memory.maintenance.wait()
    assert status.state == "done" and status.report is not None and status.report.clean
    assert await leftovers(memory) == []
    assert await keyword_rows(memory) == await expected_keyword_rows(memory)
    assert (await memory.search("kayaks"))[0].memory.id == stored.id


async def test_rebuilt_vectors_survive_a_reopen_through_the_snapshot(open_memory: Opener) -> None:
    memory = await filled(open_memory)
    await memory.maintenance.rebuild("vectors", batch=BATCH)
    assert memory.indexer is not None
    assert sorted(memory.indexer.index.ids().tolist()) == list(range(1, 38))
    await memory.store("One more note about puffins")
    await memory.aclose()
    memory = await open_memory()
    await memory.flush()
    assert (await memory.check(deep=True)).clean
    assert (await memory.search("puffins"))[0].memory.content.endswith("puffins")


async def test_an_embedder_change_re_embeds_and_leaves_no_old_vector(open_memory: Opener) -> None:
    small = HashingEmbedder(dim=64)
    memory = await open_memory(embedder=small)
    await memory.store_many([{"content": fact(n)} for n in range(12)])
    await memory.flush()
    await memory.aclose()
    memory = await open_memory()  # the shared 256-dimension hashing embedder
    await memory.flush()
    fingerprints = await rows(memory, "SELECT DISTINCT fingerprint, dim FROM embeddings")
    assert fingerprints == [(shared_hashing().fingerprint, 256)]
    assert await vector_rows(memory) == await expected_vector_rows(memory)
    assert (await memory.check(deep=True)).clean


async def test_vectors_cannot_be_rebuilt_without_an_embedder(open_memory: Opener) -> None:
    memory = await open_memory(embedder=None)
    await memory.store("keyword-only note")
    with pytest.raises(ConfigError, match="no embedder"):
        await memory.maintenance.rebuild("vectors")
    results = await memory.maintenance.rebuild("all")
    assert [r.what for r in results] == ["fts", "graph"]


async def test_a_rebuild_remakes_a_turn_whose_turn_before_changed_meanwhile(
    open_memory: Opener,
) -> None:
    memory = await open_memory("turns@localhost")
    turns = await memory.store_many(
        [
            {
                "content": f"Turn {n}: the {TOPICS[n % len(TOPICS)]} again",
                "source_conversation": "c",
            }
            for n in range(14)
        ]
    )
    await memory.flush()
    with pytest.raises(Interrupted):  # the first turns' vectors are in the shadow already
        await memory.maintenance.rebuild("vectors", batch=BATCH, progress=stop_after(2))
    await memory.forget(turns[3].id)  # turn 4's vector was made with it
    await memory.update(turns[6].id, content="Turn 6 now speaks of tea")  # and turn 7's
    [result] = await memory.maintenance.rebuild("vectors", batch=BATCH)
    assert result.resumed
    await memory.flush()
    ids = [m.id async for m in memory.base_store.iter_all()]
    texts = await memory.base_store.vector_texts(ids)
    assert texts[turns[4].id] == turns[4].content  # its turn before is gone
    assert texts[turns[7].id] == f"Turn 6 now speaks of tea\n{turns[7].content}"
    embedder = shared_hashing()
    wanted = embedder.embed_documents([texts[i] for i in ids])
    stored = await memory.base_store.vectors_for(embedder.fingerprint, embedder.dim, ids)
    for row, memory_id in enumerate(ids):
        np.testing.assert_allclose(stored[memory_id], wanted[row], atol=1e-6)
    assert (await memory.check(deep=True)).clean
    await memory.aclose()
