"""Scopes in every route: a memory private to alice found only by keyword, only by
vector, only through the graph or only as a neighbouring turn is never returned to
bob, and is to alice and to the agent. Filters never cost a viewer what it may see."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from spade_memory import (
    MemoryConfig,
    MemoryManager,
    RetrievalConfig,
    RetrievalTuning,
    Scope,
    Viewer,
)

ALICE, BOB, CAROL = "alice@x.org", "bob@x.org", "carol@x.org"
AGENT = "agent@x.org"
LOOKERS: tuple[Viewer | None, ...] = (None, Viewer(jid=ALICE), Viewer(jid=BOB))


@pytest.fixture(autouse=True)
def routes_filter_in_sql(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """The retriever's last check of the pool drops (and logs) a memory the viewer
    does not see; here every route must have left it out before, in its query."""
    with caplog.at_level(logging.WARNING, logger="spade_memory.retrieval.retriever"):
        yield
    records = caplog.get_records("call")
    leaked = [r.getMessage() for r in records if "who does not see it" in r.getMessage()]
    assert not leaked


_AXES = {"zebra": 0, "striped": 0, "horse": 0, "weather": 1, "sunny": 1, "rain": 1}


class ConceptEmbedder:
    """Words of one concept share an axis, so ``zebra`` is near ``striped horse``
    though they share no word (a vector-only match)."""

    dim = 8
    fingerprint = "concept-test-1"

    def _one(self, text: str) -> NDArray[np.float32]:
        vector = np.full(self.dim, 0.01, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            vector[_AXES.get(word, 2 + len(word) % 6)] += 1.0
        return vector / np.linalg.norm(vector)

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return np.stack([self._one(text) for text in texts]).astype(np.float32)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self._one(text)


async def ids(memory: MemoryManager, query: str, viewer: Viewer | None) -> list[int]:
    return [hit.memory.id for hit in await memory.search(query, limit=10, viewer=viewer)]


def _config(tmp_path: Path, **fields: object) -> MemoryConfig:
    return MemoryConfig(root=tmp_path, **fields)  # type: ignore[arg-type]


@pytest.fixture
async def keyword_only(tmp_path: Path) -> AsyncIterator[MemoryManager]:
    config = _config(tmp_path, embedder=None, retrieval=RetrievalConfig(graph_route=False))
    async with await MemoryManager.open(AGENT, config) as memory:
        yield memory


async def test_keyword_route(keyword_only: MemoryManager) -> None:
    secret = await keyword_only.store("Her locker code is 4711", scope=Scope.private(ALICE))
    public = await keyword_only.store("The office opens at nine")
    for viewer in LOOKERS:
        found = await ids(keyword_only, "locker code", viewer)
        assert (secret.id in found) is (viewer is None or viewer.jid == ALICE)
        assert public.id in await ids(keyword_only, "office opens", viewer)


async def test_filters_run_before_the_cut(keyword_only: MemoryManager) -> None:
    # thirty of alice's memories match better than the one bob may see
    await keyword_only.store_many(
        {"content": f"locker code {n} locker code", "scope": Scope.private(ALICE)}
        for n in range(30)
    )
    public = await keyword_only.store("the locker rules")
    assert await ids(keyword_only, "locker code", Viewer(jid=BOB)) == [public.id]
    assert public.id not in await ids(keyword_only, "locker code", Viewer(jid=ALICE))


async def test_vector_route(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        embedder=ConceptEmbedder(),
        # eight dimensions tell little apart: the floor would keep no vector-only match
        retrieval=RetrievalConfig(graph_route=False, relevance_floor=False),
    )
    async with await MemoryManager.open(AGENT, config) as memory:
        secret = await memory.store("A striped horse grazed", scope=Scope.private(ALICE))
        shared = await memory.store("A horse with stripes", scope=Scope.shared(ALICE, [BOB]))
        await memory.store_many(
            {"content": f"note number {n}", "scope": Scope.private(CAROL)} for n in range(40)
        )
        await memory.flush()
        for viewer in LOOKERS:
            found = [
                hit.memory.id
                for hit in await memory.search("zebra", limit=10, viewer=viewer, explain=True)
                if hit.explanation is not None and hit.explanation.routes == ("vector",)
            ]
            assert (secret.id in found) is (viewer is None or viewer.jid == ALICE)
            assert shared.id in found  # alice told it, bob is a reader
        assert shared.id in await ids(memory, "zebra", Viewer(jid=BOB))
        assert shared.id not in await ids(memory, "zebra", Viewer(jid=CAROL))


async def test_graph_route(tmp_path: Path) -> None:
    config = _config(tmp_path, embedder=None)
    async with await MemoryManager.open(AGENT, config) as memory:
        known = await memory.store("Alice joined the payments team")
        secret = await memory.store("Bob leads the payments team", scope=Scope.private(ALICE))
        await memory.store("The weather was sunny on Monday")
        await memory.flush()  # the graph route reads the graph derived right after the store
        question = "who does Alice work with?"
        for viewer in LOOKERS:
            hits = await memory.search(question, viewer=viewer, explain=True)
            routes = {hit.memory.id: hit.explanation.routes for hit in hits if hit.explanation}
            assert known.id in routes
            if viewer is None or viewer.jid == ALICE:
                assert routes[secret.id] == ("graph",)  # found only through the graph
            else:
                assert secret.id not in routes


async def test_graph_expansion_follows_only_edges_the_viewer_sees(tmp_path: Path) -> None:
    async with await MemoryManager.open(AGENT, _config(tmp_path, embedder=None)) as memory:
        await memory.store("Alice joined the payments team", scope=Scope.private(CAROL))
        reached = await memory.store("Bob leads the payments team")
        await memory.flush()  # the graph route reads the graph derived right after the store
        question = "who does Alice work with?"
        assert reached.id in await ids(memory, question, None)
        assert reached.id in await ids(memory, question, Viewer(jid=CAROL))
        # bob does not learn through carol's memory that alice is on that team
        assert reached.id not in await ids(memory, question, Viewer(jid=BOB))


async def test_neighbour_turns(keyword_only: MemoryManager) -> None:
    asked = await keyword_only.store("What is the door code?", source_conversation="t1")
    answer = await keyword_only.store(
        "It is 4711, between us", source_conversation="t1", scope=Scope.private(ALICE)
    )
    for viewer in LOOKERS:
        hits = await keyword_only.search("door code", viewer=viewer, explain=True)
        found = {hit.memory.id: hit for hit in hits}
        assert asked.id in found
        if viewer is None or viewer.jid == ALICE:
            explanation = found[answer.id].explanation
            assert explanation is not None and explanation.routes == ()  # a neighbour only
        else:
            assert answer.id not in found


async def test_the_cache_does_not_leak_across_viewers(tmp_path: Path) -> None:
    config = _config(tmp_path, embedder="hashing", retrieval=RetrievalConfig(cache_ttl_seconds=60))
    async with await MemoryManager.open(AGENT, config) as memory:
        secret = await memory.store("Her locker code is 4711", scope=Scope.private(ALICE))
        await memory.flush()
        assert secret.id in await ids(memory, "locker code", Viewer(jid=ALICE))
        assert secret.id in await ids(memory, "locker code", None)
        assert secret.id not in await ids(memory, "locker code", Viewer(jid=BOB))
        # and bob's answer is not served to alice
        assert secret.id in await ids(memory, "locker code", Viewer(jid=ALICE))


async def test_conversation_and_category_limits(keyword_only: MemoryManager) -> None:
    here = await keyword_only.store(
        "The meeting room is B12", source_conversation="c1", scope=Scope.conversation(ALICE)
    )
    mine = await keyword_only.store(
        "My meeting notes", category="preference", scope=Scope.private(BOB)
    )
    inside = Viewer(jid=BOB, conversation_id="c1", categories=frozenset({"fact"}))
    outside = Viewer(jid=BOB, conversation_id="c2", categories=frozenset({"fact"}))
    assert set(await ids(keyword_only, "meeting", inside)) == {here.id, mine.id}
    assert await ids(keyword_only, "meeting", outside) == [mine.id]
    listed = [m.id for m in await keyword_only.list(viewer=outside)]
    assert listed == [mine.id]


async def test_list_recent_and_recall_see_what_the_viewer_sees(
    keyword_only: MemoryManager,
) -> None:
    secret = await keyword_only.store("Her locker code is 4711", scope=Scope.private(ALICE))
    public = await keyword_only.store("The locker room opens at nine")
    bob = Viewer(jid=BOB)
    assert [m.id for m in await keyword_only.list(viewer=bob)] == [public.id]
    assert [m.id for m in await keyword_only.recent(viewer=bob)] == [public.id]
    assert [m.id for m in await keyword_only.list(viewer=Viewer(jid=ALICE))] == [
        public.id,
        secret.id,
    ]
    recalled = await keyword_only.recall("locker", viewer=bob)
    assert [r.memory.id for r in recalled] == [public.id]
    assert await keyword_only.recall_memory(secret.id, viewer=Viewer(jid=ALICE)) is not None


async def test_a_typo_is_never_respelt_to_a_word_only_hidden_memories_hold() -> None:
    """Bob's "quetzalcoatk" stays as typed whether or not Alice's private memory holds
    "quetzalcoatl": his results are the same either way (the agent's own search
    respells it)."""

    async def searched(secret: bool) -> tuple[list[tuple[str, float]], list[str]]:
        config = MemoryConfig(in_memory=True, embedder=None)
        async with await MemoryManager.open(AGENT, config) as memory:
            await memory.store("The office opens at 9 and the zanzibar plan is public")
            if secret:
                await memory.store("Project quetzalcoatl is secret", scope=Scope.private(ALICE))
            query = "quetzalcoatk office"
            hits = await memory.search(query, viewer=Viewer(jid=BOB), record_access=False)
            own = await memory.search(query, record_access=False)
            return [(h.memory.content, h.score) for h in hits], [h.memory.content for h in own]

    without, _ = await searched(False)
    with_secret, own = await searched(True)
    # the same memories, scored alike (a respelling would have moved the score by 0.05;
    # the keyword statistics of all memories move it by a few billionths)
    assert [content for content, _ in with_secret] == [content for content, _ in without]
    for (_, score), (_, before) in zip(with_secret, without, strict=True):
        assert score == pytest.approx(before, abs=1e-6)
    assert "Project quetzalcoatl is secret" in own


async def test_a_viewers_typo_takes_the_most_held_respelling_it_may_see() -> None:
    """The respellings kept are chosen among words of memories the viewer sees, not
    cut first by how often all memories hold them."""
    tuning = RetrievalTuning(typo_respellings=1)
    config = MemoryConfig(in_memory=True, embedder=None, retrieval=RetrievalConfig(tuning=tuning))
    async with await MemoryManager.open(AGENT, config) as memory:
        seen = await memory.store("The red cart stands by the barn")
        for number in range(3):  # "card", held more often, only where bob cannot look
            await memory.store(f"Alice's card number {number}", scope=Scope.private(ALICE))
        hits = await memory.search("carx", viewer=Viewer(jid=BOB), record_access=False)
        assert [hit.memory.id for hit in hits] == [seen.id]
