"""Consolidation: near-duplicates of one category merged, by rule or through an LLM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from maint_support import Clock, Opener

from spade_memory.embedding.hashing import shared_hashing
from spade_memory.errors import LLMError, MemoryNotFound
from spade_memory.llm import ChatMessage, LLMResponse
from spade_memory.maintenance.consolidation import chance_similarity, validate_merge
from spade_memory.manager import MemoryManager
from spade_memory.models import Memory, Scope


class FakeLLM:
    """Answers every request with a fixed text, or fails; records what it was asked."""

    def __init__(self, answer: str | None = None, *, error: Exception | None = None) -> None:
        self.answer = answer
        self.error = error
        self.requests: list[list[ChatMessage]] = []

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        self.requests.append(list(messages))
        if self.error is not None:
            raise self.error
        return LLMResponse(text=self.answer)

    async def aclose(self) -> None:
        return None


class AnisotropicEmbedder:
    """Hashing vectors pushed towards one direction, as multilingual-e5 does: unrelated
    texts score about 0.8, so a raw cosine threshold of 0.7 would merge everything."""

    dim = 256
    fingerprint = "anisotropic-test-embedder"

    def __init__(self) -> None:
        self._axis = np.zeros(self.dim, dtype=np.float32)
        self._axis[0] = 1.0

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        matrix = shared_hashing().embed_documents(texts) + 2.0 * self._axis
        return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


async def duplicates(memory: MemoryManager) -> dict[str, Memory]:
    found = {
        "short": await memory.store(
            "Alice likes green tea",
            category="preference",
            importance=0.4,
            source_conversation="c1",
            source_sender="bob@localhost",
        ),
        "long": await memory.store(
            "Alice likes green tea very much",
            category="preference",
            importance=0.7,
            confidence=0.6,
            source_conversation="c2",
            source_sender="carol@localhost",
            metadata={"merged_from": ["uid-of-an-older-merge"]},
        ),
        "other category": await memory.store("Alice likes green tea", category="fact"),
        "unrelated": await memory.store("The warehouse closes at 6pm", category="preference"),
        "protected": await memory.store(
            "Alice likes green tea a lot", category="preference", metadata={"protected": True}
        ),
    }
    await memory.flush()
    return found


async def test_near_duplicates_are_merged_by_rule(open_memory: Opener, clock: Clock) -> None:
    memory = await open_memory()
    found = await duplicates(memory)
    clock.advance(1)
    result = await memory.maintenance.consolidate()
    assert [(m.survivor, m.merged, m.by_llm) for m in result.merges] == [
        (found["long"].id, (found["short"].id,), False)
    ]
    assert result.merges[0].similarity >= 0.7
    kept = await memory.get(found["long"].id)
    assert kept.content == "Alice likes green tea very much"
    assert (kept.importance, kept.confidence, kept.updated_at) == (0.7, 1.0, clock())
    assert kept.metadata["merged_from"] == ["uid-of-an-older-merge", found["short"].uid]
    assert kept.metadata["sources"] == [
        {"conversation": "c2", "sender": "carol@localhost"},
        {"conversation": "c1", "sender": "bob@localhost"},
    ]
    with pytest.raises(MemoryNotFound):
        await memory.get(found["short"].id)
    for name in ("other category", "unrelated", "protected"):
        assert (await memory.get(found[name].id)).content == found[name].content
    await memory.flush()
    assert (await memory.check(deep=True)).clean
    again = await memory.maintenance.consolidate()  # nothing embedded since: nothing to do
    assert again.merges == ()


async def test_an_llm_merges_the_texts_when_its_answer_is_sound(open_memory: Opener) -> None:
    memory = await open_memory()
    found = await duplicates(memory)
    llm = FakeLLM("Alice likes green tea very much, above all in the morning")
    result = await memory.maintenance.consolidate(llm=llm)
    assert [(m.survivor, m.by_llm) for m in result.merges] == [(found["long"].id, True)]
    [request] = llm.requests
    assert request[0].role == "system" and "Alice likes green tea" in (request[1].content or "")
    await memory.flush()
    kept = await memory.get(found["long"].id)
    assert kept.content.endswith("in the morning")
    assert (await memory.search("morning"))[0].memory.id == kept.id
    assert (await memory.check(deep=True)).clean


@pytest.mark.parametrize(
    "llm",
    [
        FakeLLM("Sorry, I cannot help with that."),
        FakeLLM(""),
        FakeLLM(None),
        FakeLLM(error=LLMError("the model is down")),
        FakeLLM(error=RuntimeError("connection reset")),
    ],
    ids=["refusal", "empty", "no text", "llm error", "other error"],
)
async def test_an_unusable_llm_answer_falls_back_to_the_rule(
    open_memory: Opener, llm: FakeLLM
) -> None:
    memory = await open_memory()
    found = await duplicates(memory)
    result = await memory.maintenance.consolidate(llm=llm)
    assert [(m.survivor, m.by_llm) for m in result.merges] == [(found["long"].id, False)]
    assert (await memory.get(found["long"].id)).content == "Alice likes green tea very much"


def test_merged_texts_are_validated() -> None:
    texts = ["The Lisbon office opens on 3 March", "Lisbon office opens 3 March"]
    assert validate_merge("  The Lisbon office opens on 3 March.  ", texts, max_chars=500)
    assert validate_merge('"The Lisbon office opens on 3 March"', texts, max_chars=500) == (
        "The Lisbon office opens on 3 March"
    )
    assert validate_merge("Lisbon", texts, max_chars=500) is None  # far too short
    assert validate_merge("Paris is lovely in the spring time", texts, max_chars=500) is None
    assert validate_merge("The Lisbon office opens on 3 March", texts, max_chars=10) is None
    assert validate_merge("x" * 300, texts, max_chars=500) is None  # far too long


async def test_similarity_is_measured_above_the_embedders_chance_level(
    open_memory: Opener,
) -> None:
    skewed = AnisotropicEmbedder()
    assert chance_similarity(shared_hashing()) < 0.2
    assert chance_similarity(skewed) > 0.6
    memory = await open_memory(embedder=skewed)
    found = await duplicates(memory)
    vectors = skewed.embed_documents(["The warehouse closes at 6pm", "Alice likes green tea"])
    assert float(vectors[0] @ vectors[1]) > 0.7  # raw cosine: unrelated texts look alike
    result = await memory.maintenance.consolidate()
    assert [(m.survivor, m.merged) for m in result.merges] == [
        (found["long"].id, (found["short"].id,))
    ]


async def test_a_merged_memory_keeps_the_sources_of_its_copies(
    open_memory: Opener, clock: Clock
) -> None:
    memory = await open_memory()
    for cid, text in (("c1", "I like green tea"), ("c2", "I like green tea very much")):
        await memory.history.append(cid, role="user", sender="bob@localhost", text=text, at=clock())
    await memory.form_memories()
    await memory.flush()
    before = await memory.history.source_ids([m.id for m in await memory.list()])
    clock.advance(1)
    result = await memory.maintenance.consolidate()
    assert result.merges, "the two near-identical statements were merged"
    after = await memory.history.source_ids([m.id for m in await memory.list()])
    for merge in result.merges:
        told = {i for member in (merge.survivor, *merge.merged) for i in before.get(member, ())}
        assert set(after[merge.survivor]) == told
    # forgetting one conversation keeps a merged memory the other one also formed
    await memory.history.forget("c1")
    for merge in result.merges:
        assert (await memory.get(merge.survivor)).id == merge.survivor


async def test_a_formed_memory_merged_with_one_told_otherwise_outlives_its_conversation(
    open_memory: Opener, clock: Clock
) -> None:
    memory = await open_memory()
    text = "My sister Emma lives in Lisbon near the old harbour"
    await memory.history.append("c1", role="user", sender="bob@localhost", text=text, at=clock())
    await memory.form_memories()
    await memory.flush()
    formed = max(await memory.list(limit=50), key=lambda m: len(m.content))
    told = await memory.store(formed.content.rsplit(" ", 1)[0], scope=formed.scope)
    await memory.flush()
    clock.advance(1)
    result = await memory.maintenance.consolidate()
    merged = {i for merge in result.merges for i in (merge.survivor, *merge.merged)}
    assert {formed.id, told.id} <= merged
    await memory.history.forget("c1")
    assert any("Emma" in m.content for m in await memory.list(limit=50))


class ChangingLLM(FakeLLM):
    """Merges, while the memory is changed meanwhile (by the agent, say)."""

    def __init__(self, answer: str, meanwhile: Any) -> None:
        super().__init__(answer)
        self.meanwhile = meanwhile

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        await self.meanwhile()
        return await super().complete(messages, tools)


async def test_a_merge_of_memories_changed_while_the_llm_merged_them_is_dropped(
    open_memory: Opener,
) -> None:
    memory = await open_memory()
    a = await memory.store("The Porto office opens at 9 am on weekdays and the vault code is 4417")
    b = await memory.store("The Porto office opens at 9 am on weekdays, vault code 4417")
    await memory.flush()

    async def meanwhile() -> None:
        await memory.update(b.id, scope=Scope.private("dana@localhost"))
        await memory.update(a.id, metadata={"protected": True})

    llm = ChangingLLM("The vault code is 4417; the Porto office opens at 9 on weekdays", meanwhile)
    result = await memory.maintenance.consolidate(llm=llm)
    assert result.merges == () and llm.requests  # asked, then not written
    assert (await memory.get(b.id)).scope == Scope.private("dana@localhost")
    assert (await memory.get(a.id)).metadata == {"protected": True}


async def test_an_export_from_before_a_merge_brings_nothing_back(
    open_memory: Opener, clock: Clock
) -> None:
    """The merged memory's uid stands for the survivor: importing an export taken
    before the merge adds nothing and tells nothing again."""
    memory = await open_memory()
    found = await duplicates(memory)
    before = await memory.export()
    clock.advance(1)
    result = await memory.maintenance.consolidate()
    assert [m.merged for m in result.merges] == [(found["short"].id,)]
    survivor = await memory.get(found["long"].id)
    assert await memory.import_data(before) == (0, 0)
    assert await memory.get(found["long"].id) == survivor
    assert len(await memory.list(limit=50)) == len(found) - 1
    holder = await memory._engine.base.holder_of_uid(found["short"].uid)
    assert holder is not None and holder.id == survivor.id


async def test_what_only_the_merged_copy_carried_stays_with_the_survivor(
    open_memory: Opener, clock: Clock
) -> None:
    """Its metadata keys and the names it was stored with: the survivor keeps them, and
    its graph gets them again at a rebuild."""
    memory = await open_memory()
    short = await memory.store(
        "Frank moved from Paris to Madrid",
        metadata={"tag": "travel", "note": "told by HR"},
        entities=["Acme Relocations"],
    )
    long = await memory.store("Frank moved from Paris to Madrid last year", metadata={"tag": "x"})
    await memory.flush()
    clock.advance(1)
    result = await memory.maintenance.consolidate()
    assert [(m.survivor, m.merged) for m in result.merges] == [(long.id, (short.id,))]
    kept = await memory.get(long.id)
    assert kept.metadata["tag"] == "x" and kept.metadata["note"] == "told by HR"
    given = await memory._engine.base.given([long.id])
    assert given[long.id][0] == ("Acme Relocations",)
    await memory.rebuild_graph()
    hits = await memory.search("Acme Relocations")
    assert [hit.memory.id for hit in hits][:1] == [long.id]
