"""The conversation store through ``MemoryManager.history``: keeping, reading, retention,
reset, forgetting, sources, and the window transaction's checks."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from spade_memory import ConversationMessage, FormationConfig, MemoryConfig, MemoryManager
from spade_memory.errors import InvalidToolInput, LLMError
from spade_memory.formation.service import FormationReport
from spade_memory.llm import LLMResponse
from spade_memory.storage.conversations import FormedWindow

ALICE = "alice@localhost"
BOB = "bob@example.org"
CAROL = "carol@example.org"
CID = "conv-bob"
DAY = 1_700_049_600.0  # 15 Nov 2023, 12:00 UTC: one day wherever the tests run
NOW = DAY + 1800.0  # the memories' clock: no window closed by a silence yet


def config(root: Path | None, **formation: object) -> MemoryConfig:
    base = (
        MemoryConfig(root=root, embedder="hashing")
        if root is not None
        else MemoryConfig(in_memory=True, embedder="hashing")
    )
    return dataclasses.replace(base, formation=FormationConfig(**formation))  # type: ignore[arg-type]


async def chat(
    memory: MemoryManager,
    turns: list[tuple[str, str]],
    *,
    cid: str = CID,
    start: float = DAY,
    peer: str = BOB,
) -> list[ConversationMessage]:
    kept = []
    for position, (role, text) in enumerate(turns):
        sender = peer if role == "user" else ALICE
        kept.append(
            await memory.history.append(
                cid,
                role=role,
                sender=sender,
                text=text,
                at=start + 60 * position,  # type: ignore[arg-type]
                peer=peer,
            )
        )
    return kept


def clock() -> float:
    return NOW


@pytest.fixture
async def memory() -> AsyncIterator[MemoryManager]:
    async with await MemoryManager.open(ALICE, config(None), clock=clock) as opened:
        yield opened


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


@pytest.mark.parametrize("on_disk", [True, False], ids=["file", "in-memory"])
async def test_messages_are_kept_in_order_and_listed(tmp_path: Path, on_disk: bool) -> None:
    async with await MemoryManager.open(
        ALICE, config(tmp_path if on_disk else None, form=False), clock=clock
    ) as memory:
        kept = await chat(memory, [("user", "Hello Alice"), ("assistant", "Hello Bob")])
        assert [m.text for m in await memory.history.messages(CID)] == ["Hello Alice", "Hello Bob"]
        assert [m.role for m in kept] == ["user", "assistant"]
        assert kept[0].sender == BOB and kept[1].sender == ALICE
        assert kept[0].id < kept[1].id
        assert [m.text for m in await memory.history.messages(CID, limit=1)] == ["Hello Bob"]
        [info] = await memory.history.conversations()
        assert (info.conversation_id, info.peer, info.messages, info.pending) == (CID, BOB, 2, 2)
        assert (info.first_at, info.last_at) == (DAY, DAY + 60)
        assert await memory.history.messages("never") == []
        assert await memory.history.info("never") is None


async def test_kept_messages_survive_a_restart_and_stay_with_their_agent(tmp_path: Path) -> None:
    async with await MemoryManager.open(ALICE, config(tmp_path, form=False), clock=clock) as memory:
        await chat(memory, [("user", "I keep bees"), ("assistant", "Nice")])
    async with await MemoryManager.open(
        "dave@localhost", config(tmp_path, form=False), clock=clock
    ) as other:
        assert await other.history.conversations() == []
    async with await MemoryManager.open(ALICE, config(tmp_path, form=False), clock=clock) as memory:
        assert [m.text for m in await memory.history.messages(CID)] == ["I keep bees", "Nice"]


async def test_in_memory_history_leaves_nothing_on_disk(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    async with await MemoryManager.open(ALICE, config(None), clock=clock) as memory:
        await chat(memory, [("user", "secret plans")])
        await memory.form_memories()
    assert list(tmp_path.iterdir()) == []


async def test_an_xmpp_message_delivered_twice_is_kept_once(memory: MemoryManager) -> None:
    first = await memory.history.append(CID, role="user", sender=BOB, text="hi", message_id="m1")
    again = await memory.history.append(CID, role="user", sender=BOB, text="hi", message_id="m1")
    assert again == first
    assert len(await memory.history.messages(CID)) == 1
    # another message under the same id (a client numbering anew after a reconnect)
    other = await memory.history.append(CID, role="user", sender=BOB, text="bye", message_id="m1")
    assert other.id != first.id and other.text == "bye" and other.message_id == "m1#2"
    # and that one delivered again
    same = await memory.history.append(CID, role="user", sender=BOB, text="bye", message_id="m1")
    assert same == other
    # a client's own id may look like one kept so: the next serial is free
    await memory.history.append(CID, role="user", sender=BOB, text="x", message_id="z")
    own = await memory.history.append(CID, role="user", sender=BOB, text="y", message_id="z#3")
    later = await memory.history.append(CID, role="user", sender=BOB, text="w", message_id="z")
    assert (own.message_id, later.message_id) == ("z#3", "z#4")
    await memory.history.append(CID, role="user", sender=BOB, text="w", message_id="z")
    assert [m.text for m in await memory.history.messages(CID)] == ["hi", "bye", "x", "y", "w"]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"role": "system"}, "role"),
        ({"sender": "not a jid"}, "sender"),
        ({"sender": 3}, "sender"),
        ({"text": "   "}, "text"),
        ({"text": "a\x00b"}, "NUL"),
        ({"text": "x" * 100_001}, "too long"),
        ({"at": float("nan")}, "at"),
        ({"at": -1}, "at"),
        ({"at": True}, "at"),
        ({"conversation_id": ""}, "conversation_id"),
        ({"role": "assistant", "sender": ALICE}, "peer"),
    ],
)
async def test_bad_input_is_refused_and_changes_nothing(
    memory: MemoryManager, fields: dict[str, object], says: str
) -> None:
    arguments: dict[str, object] = {"role": "user", "sender": BOB, "text": "hello"}
    arguments.update(fields)
    cid = arguments.pop("conversation_id", CID)
    with pytest.raises(InvalidToolInput, match=says):
        await memory.history.append(cid, **arguments)  # type: ignore[arg-type]
    assert await memory.history.conversations() == []


async def test_retention_drops_the_oldest_once_formed(tmp_path: Path) -> None:
    async with await MemoryManager.open(
        ALICE, config(tmp_path, max_messages=10, window_rounds=1000), clock=clock
    ) as memory:
        await chat(memory, [("user", f"message number {n}") for n in range(15)])
        # nothing formed yet: all fifteen stay
        assert len(await memory.history.messages(CID)) == 15
        await memory.form_memories()
        await chat(memory, [("user", "one more message")], start=DAY + 3600)
        kept = await memory.history.messages(CID)
        assert len(kept) == 10
        assert kept[-1].text == "one more message"


async def test_with_formation_off_retention_drops_the_oldest_at_once(tmp_path: Path) -> None:
    async with await MemoryManager.open(
        ALICE, config(tmp_path, max_messages=10, form=False), clock=clock
    ) as memory:
        await chat(memory, [("user", f"message number {n}") for n in range(15)])
        kept = await memory.history.messages(CID)
        assert [m.text for m in kept] == [f"message number {n}" for n in range(5, 15)]


async def test_formed_memories_name_their_sources_and_are_formed_once(tmp_path: Path) -> None:
    async with await MemoryManager.open(ALICE, config(tmp_path), clock=clock) as memory:
        kept = await chat(
            memory,
            [("user", "My sister Emma lives in Lisbon and teaches music"), ("assistant", "Lovely")],
        )
        report = await memory.form_memories()
        assert report.windows == 1 and report.memories >= 1
        again = await memory.form_memories()
        assert (again.windows, again.memories) == (0, 0)
        sources = await memory.history.source_ids(report.memory_ids)
        assert set(sources) == set(report.memory_ids)
        assert all(set(ids) <= {m.id for m in kept} for ids in sources.values())
        found = await memory.search("Where does Emma live?", limit=5)
        assert found and "Lisbon" in found[0].memory.content
        told = [m for m in await memory.history.sources(found[0].memory.id)]
        assert kept[0] in told
        info = await memory.history.info(CID)
        assert info is not None and info.pending == 0 and info.formed_through == kept[-1].id


async def test_messages_never_enter_retrieval(tmp_path: Path) -> None:
    async with await MemoryManager.open(ALICE, config(tmp_path, form=False), clock=clock) as memory:
        await chat(memory, [("user", "The launch code is zebra-42")])
        assert await memory.search("launch code zebra", limit=5) == []


async def test_a_window_read_before_a_reset_is_discarded(memory: MemoryManager) -> None:
    await chat(memory, [("user", "I like green tea")])
    store = memory.engine.conversations
    pending = await store.pending(CID)
    assert pending is not None
    await memory.history.reset(CID)
    stale = FormedWindow(
        session_id=pending.session_id,
        revision=pending.revision,
        formed_through=pending.formed_through,
        through=pending.messages[-1].id,
        insert=None,
        sources=[],
        keep=1000,
    )
    assert await store.commit_window(stale) is None
    assert await memory.history.recent(CID, limit=10) == []
    assert (await memory.form_memories()).windows == 0  # the reset dropped the window
    assert [m.text for m in await memory.history.messages(CID)] == ["I like green tea"]


@pytest.mark.parametrize("next_peer", [BOB, CAROL], ids=["same-partner", "another-partner"])
async def test_a_window_of_a_forgotten_conversation_is_discarded_when_its_row_is_reused(
    memory: MemoryManager, next_peer: str
) -> None:
    # SQLite gives a deleted conversation's row id to the next new conversation, at
    # revision 1 and cursor 0 again: a window read before the forget still names it.
    await chat(memory, [("user", "My locker code is 4711"), ("assistant", "Noted")])
    store = memory.engine.conversations
    pending = await store.pending(CID)
    assert pending is not None
    assert await memory.history.forget(CID) == 2
    cid = CID if next_peer == BOB else "conv-carol"
    await chat(memory, [("user", "Are you there?")], cid=cid, peer=next_peer, start=DAY + 600)
    reused = await store.pending(cid)
    assert reused is not None and reused.session_id == pending.session_id
    stale = FormedWindow(
        session_id=pending.session_id,
        revision=pending.revision,
        formed_through=pending.formed_through,
        through=pending.messages[-1].id,
        insert=None,
        sources=[],
        keep=1000,
    )
    assert await store.commit_window(stale) is None
    assert (await store.pending(cid)) == reused  # its cursor did not move
    await memory.form_memories()
    assert not [m for m in await memory.list(limit=50) if "4711" in m.content]


async def test_a_window_formed_twice_commits_once(memory: MemoryManager) -> None:
    await chat(memory, [("user", "I like green tea")])
    store = memory.engine.conversations
    pending = await store.pending(CID)
    assert pending is not None
    window = FormedWindow(
        session_id=pending.session_id,
        revision=pending.revision,
        formed_through=pending.formed_through,
        through=pending.messages[-1].id,
        insert=None,
        sources=[],
        keep=1000,
    )
    assert await store.commit_window(window) == []
    assert await store.commit_window(window) is None


async def test_reset_starts_the_replay_anew_and_keeps_formed_memories(
    memory: MemoryManager,
) -> None:
    await chat(memory, [("user", "I prefer window seats"), ("assistant", "Noted")])
    formed = await memory.form_memories()
    await chat(memory, [("user", "pending words here")], start=DAY + 600)
    assert await memory.history.reset(CID) is True
    assert await memory.history.recent(CID, limit=10) == []
    await chat(memory, [("user", "After the reset")], start=DAY + 900)
    assert [m.text for m in await memory.history.recent(CID, limit=10)] == ["After the reset"]
    assert all([await memory.get(i) for i in formed.memory_ids])
    later = await memory.form_memories()
    sources = await memory.history.source_ids(later.memory_ids)
    texts = {m.id: m.text for m in await memory.history.messages(CID)}
    assert all(texts[i] != "pending words here" for ids in sources.values() for i in ids)
    assert await memory.history.reset("never") is False


async def test_forgetting_a_conversation_removes_what_was_formed_only_from_it(
    tmp_path: Path,
) -> None:
    async with await MemoryManager.open(ALICE, config(tmp_path), clock=clock) as memory:
        told = await memory.store("Carol enjoys chess", category="preference")
        await chat(memory, [("user", "My brother Tom lives in Oslo"), ("assistant", "Cool")])
        await chat(
            memory,
            [("user", "My brother Tom lives in Oslo"), ("user", "Carol enjoys chess")],
            cid="conv-carol",
            peer=CAROL,
        )
        await memory.form_memories()
        await memory.flush()
        path = memory.base_store.path
        assert path is not None
        before = {int(r[0]) for r in rows(path, "SELECT memory_id FROM memory_sources")}
        assert await memory.history.forget(CID) == 2
        assert await memory.history.messages(CID) == []
        assert await memory.history.info(CID) is None
        # the agent's own memory, told again from carol's conversation, stays
        assert (await memory.get(told.id)).content == "Carol enjoys chess"
        left = {int(r[0]) for r in rows(path, "SELECT id FROM memories")}
        gone = before - left
        assert gone, "the memories formed only from bob's conversation went"
        for table in ("embeddings", "memory_atoms", "graph_entries", "memory_sources"):
            column = "memory_id"
            assert not {int(r[0]) for r in rows(path, f"SELECT {column} FROM {table}")} & gone
        assert memory.indexer is not None
        assert not set(int(i) for i in memory.indexer.index.ids()) & gone
        # carol's conversation is untouched
        assert len(await memory.history.messages("conv-carol")) == 2
        hits = await memory.search("Who lives in Oslo?", limit=5)
        assert hits and all(h.memory.source_conversation != CID for h in hits)
        assert await memory.history.forget(CID) == 0


@pytest.mark.parametrize("order", [("conv-a", "conv-b"), ("conv-b", "conv-a")])
async def test_forgetting_every_conversation_a_memory_came_from_forgets_it(
    tmp_path: Path, order: tuple[str, str]
) -> None:
    async with await MemoryManager.open(ALICE, config(tmp_path), clock=clock) as memory:
        for cid in ("conv-a", "conv-b"):  # the same words said in two conversations
            await chat(memory, [("user", "My sister Emma lives in Lisbon")], cid=cid)
            await memory.form_memories()
        assert await memory.list(limit=10)
        for cid in order:
            await memory.history.forget(cid)
        assert await memory.list(limit=10) == []


async def test_a_window_formed_days_late_keeps_the_time_its_words_were_said() -> None:
    later = NOW + 10 * 86_400  # formed ten days after it was said (a restart, say)
    async with await MemoryManager.open(ALICE, config(None), clock=lambda: later) as memory:
        said = await chat(memory, [("user", "I am flying to Paris tomorrow")])
        report = await memory.form_memories()
        assert report.memory_ids
        for memory_id in report.memory_ids:
            assert (await memory.get(memory_id)).created_at == said[0].at
            # its atoms start their lives when formed, as an imported memory's do
            assert {atom.created_at for atom in await memory.atoms(memory_id)} == {later}


async def test_a_memory_keeping_only_messages_opens_without_a_loss_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with await MemoryManager.open(ALICE, config(tmp_path, form=False), clock=clock) as memory:
        await chat(memory, [("user", "hello there")])
    with caplog.at_level("WARNING"):
        async with await MemoryManager.open(ALICE, config(tmp_path, form=False), clock=clock):
            pass
    assert "starts with no memories" not in caplog.text


class SummaryModel:
    """A formation model answering every window with one summary and one fact."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.asked = 0

    async def complete(self, messages: object, tools: object = ()) -> LLMResponse:
        self.asked += 1
        if self.fail:
            raise LLMError("the model is down")
        answer = {
            "summary": "Bob told Alice about his sister Emma, a music teacher in Lisbon",
            "importance": 0.7,
            "facts": [
                {"content": "Bob's sister Emma teaches music", "category": "fact",
                 "importance": 0.8, "sources": [1]},
            ],
        }  # fmt: skip
        return LLMResponse(text=json.dumps(answer))


@pytest.mark.parametrize("fail", [False, True], ids=["llm", "llm-down"])
async def test_an_llm_forms_a_summary_and_facts_or_the_rules_do(tmp_path: Path, fail: bool) -> None:
    model = SummaryModel(fail=fail)
    async with await MemoryManager.open(ALICE, config(tmp_path, llm=model), clock=clock) as memory:
        kept = await chat(
            memory,
            [("user", "My sister Emma lives in Lisbon and teaches music"), ("assistant", "Lovely")],
        )
        report = await memory.form_memories()
        assert model.asked == 1 and report.windows == 1
        assert report.by_llm == (0 if fail else 1)
        formed = {m.content: m for m in await memory.list()}
        assert "Bob: My sister Emma lives in Lisbon and teaches music" in formed  # the turn
        if fail:
            assert not any(m.metadata.get("formed") == "summary" for m in formed.values())
            return
        summary = formed["Bob told Alice about his sister Emma, a music teacher in Lisbon"]
        assert summary.metadata["formed"] == "summary"
        assert [m.id for m in await memory.history.sources(summary.id)] == [m.id for m in kept]
        fact = formed["Bob's sister Emma teaches music"]
        assert [m.id for m in await memory.history.sources(fact.id)] == [kept[0].id]
        assert fact.scope.owner == BOB  # scoped like what Bob tells (per sender by default)


@pytest.mark.parametrize("on_close", [True, False])
async def test_closing_forms_what_is_pending_unless_told_not_to(
    tmp_path: Path, on_close: bool
) -> None:
    settings = {"window_rounds": 1000, "form_on_close": on_close}
    async with await MemoryManager.open(ALICE, config(tmp_path, **settings), clock=clock) as memory:
        await chat(memory, [("user", "My sister Emma lives in Lisbon")])
    async with await MemoryManager.open(
        ALICE, config(tmp_path, **settings, form=False), clock=clock
    ) as memory:
        info = await memory.history.info(CID)
        assert info is not None and info.pending == (0 if on_close else 1)
        assert bool(await memory.search("Where does Emma live?")) is on_close


async def test_a_request_to_remember_and_the_tool_call_it_led_to_make_one_memory(
    memory: MemoryManager,
) -> None:
    scope = memory.engine.config  # the default scope policy: private to the partner
    stored = await memory.store(
        "the Lisbon office opens on 3 March",
        source_conversation=CID,
        source_sender=BOB,
        scope={"owner": BOB, "visibility": "private"},
    )
    assert scope.scope.mode == "per_sender"
    await chat(memory, [("user", "remember that the Lisbon office opens on 3 March")])
    report = await memory.form_memories()
    assert (report.memories, report.reinforced) == (0, 1)
    assert [m.id for m in await memory.list()] == [stored.id]
    [source] = await memory.history.sources(stored.id)
    assert source.text == "remember that the Lisbon office opens on 3 March"


class FactModel:
    """A formation model answering with the facts it is given, sources included."""

    def __init__(self, facts: list[dict[str, object]]) -> None:
        self.facts = facts

    async def complete(self, messages: object, tools: object = ()) -> LLMResponse:
        facts = [{"importance": 0.6, **fact} for fact in self.facts]
        answer = {"summary": "Bob and Alice talked", "importance": 0.5, "facts": facts}
        return LLMResponse(text=json.dumps(answer))


async def test_a_message_longer_than_a_memory_may_be_is_formed_cut(tmp_path: Path) -> None:
    limits = dataclasses.replace(config(tmp_path, window_rounds=1), max_content_chars=200)
    async with await MemoryManager.open(ALICE, limits, clock=clock) as memory:
        await chat(memory, [("user", "The long story of my trip. " * 20), ("assistant", "Wow")])
        await chat(memory, [("user", "I prefer green tea"), ("assistant", "Ok")], start=DAY + 600)
        report = await memory.form_memories()
        assert report.windows == 2
        assert (await memory.history.info(CID)).pending == 0  # type: ignore[union-attr]
        contents = [m.content for m in await memory.list(limit=50)]
        cut = [c for c in contents if c.startswith("Bob: The long story")]
        assert len(cut) == 1 and len(cut[0]) == 200 and cut[0].endswith("…")
        assert "Bob: I prefer green tea" in contents


async def test_a_formed_memory_the_store_refuses_is_left_out_and_the_window_formed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = FactModel(
        [
            {"content": "Bob's code is \u0000 4711", "category": "fact", "sources": [1]},
            {"content": "Bob works at Acme", "category": "fact", "sources": [1]},
        ]
    )
    async with await MemoryManager.open(ALICE, config(tmp_path, llm=model), clock=clock) as memory:
        await chat(memory, [("user", "I work at Acme"), ("assistant", "Nice")])
        with caplog.at_level("WARNING"):
            report = await memory.form_memories()
        assert report.windows == 1 and report.by_llm == 1
        assert (await memory.history.info(CID)).pending == 0  # type: ignore[union-attr]
        contents = [m.content for m in await memory.list(limit=50)]
        assert "Bob works at Acme" in contents
        assert not any("4711" in c for c in contents)
        assert "was left out" in caplog.text and "NUL" in caplog.text


async def test_a_fact_from_the_agents_question_and_the_answer_is_the_partners(
    tmp_path: Path,
) -> None:
    model = FactModel(
        [{"content": "Bob prefers green tea", "category": "preference", "sources": [1, 2]}]
    )
    async with await MemoryManager.open(ALICE, config(tmp_path, llm=model), clock=clock) as memory:
        await chat(memory, [("assistant", "Tea or coffee?"), ("user", "Green tea, always")])
        await memory.form_memories()
        (fact,) = [m for m in await memory.list(limit=50) if m.content == "Bob prefers green tea"]
        assert fact.source_sender == BOB
        assert fact.scope.owner == BOB


def test_a_report_names_a_memory_told_again_in_a_later_window_once() -> None:
    report = FormationReport(windows=1, memories=2, memory_ids=[1, 2])
    report.add(FormationReport(windows=1, memories=1, reinforced=1, memory_ids=[2, 3]))
    assert report.memory_ids == [1, 2, 3] and report.windows == 2 and report.reinforced == 1


class SlowModel(FactModel):
    async def complete(self, messages: object, tools: object = ()) -> LLMResponse:
        await asyncio.sleep(0.3)
        return await super().complete(messages, tools)


async def test_flush_waits_for_the_windows_closed_so_far(tmp_path: Path) -> None:
    model = SlowModel([{"content": "Bob likes tea", "category": "preference", "sources": [1]}])
    settings = config(tmp_path, llm=model, window_rounds=1)
    async with await MemoryManager.open(ALICE, settings, clock=clock) as memory:
        await chat(memory, [("user", "I prefer green tea"), ("assistant", "Noted")])
        await chat(memory, [("user", "And you?")], start=DAY + 600)  # an open window
        await memory.flush()
        assert "Bob likes tea" in [m.content for m in await memory.list()]
        assert (await memory.history.info(CID)).pending == 1  # type: ignore[union-attr]

