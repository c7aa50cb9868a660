"""Kept conversations in export and import: they travel with their messages and what
was formed, an import twice changes nothing, and bad conversation data writes nothing."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from spade_memory import MemoryManager
from spade_memory.errors import InvalidToolInput
from tests.formation.test_history import ALICE, BOB, CAROL, CID, DAY, chat, clock, config

DAVE = "dave@localhost"


@pytest.fixture
async def alice() -> AsyncIterator[MemoryManager]:
    async with await MemoryManager.open(ALICE, config(None), clock=clock) as opened:
        yield opened


@pytest.fixture
async def dave(tmp_path: Path) -> AsyncIterator[MemoryManager]:
    async with await MemoryManager.open(DAVE, config(tmp_path), clock=clock) as opened:
        yield opened


async def told(alice: MemoryManager) -> dict[str, Any]:
    """Alice's export after a formed window with Bob and two messages still pending."""
    await chat(alice, [("user", "I prefer green tea"), ("assistant", "Noted")])
    report = await alice.form_memories()
    assert report.windows == 1 and report.memories >= 1
    await chat(alice, [("user", "My name is Bob"), ("assistant", "Hi Bob")], start=DAY + 600)
    await alice.history.append("thread-9", role="user", sender=CAROL, text="hello", message_id="x1")
    return await alice.export()


def kept(data: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        c["conversation_id"]: [
            (m["role"], m["sender"], m["text"], m["at"], m["message_id"], m["formed"])
            for m in c["messages"]
        ]
        for c in data["conversations"]
    }


async def test_an_export_carries_the_conversations_with_what_was_formed(
    alice: MemoryManager,
) -> None:
    data = await told(alice)
    assert data["version"] == 2
    conversations = kept(data)
    assert [formed for *_, formed in conversations[CID]] == [True, True, False, False]
    assert conversations["thread-9"] == [("user", CAROL, "hello", clock(), "x1", False)]
    assert {c["conversation_id"]: c["peer"] for c in data["conversations"]} == {
        CID: BOB,
        "thread-9": CAROL,
    }


async def test_an_import_keeps_them_forms_only_what_was_not_formed_and_twice_changes_nothing(
    alice: MemoryManager, dave: MemoryManager
) -> None:
    data = await told(alice)
    memories, _ = await dave.import_data(data)
    assert memories == len(data["memories"])
    assert kept(await dave.export()) == kept(data)
    info = await dave.history.info(CID)
    assert info is not None and (info.peer, info.messages, info.pending) == (BOB, 4, 2)
    before = await dave.export()
    assert await dave.import_data(data) == (0, 0)
    assert await dave.export() == before
    report = await dave.form_memories()
    # the two windows left: Bob's last two messages and Carol's one
    assert report.windows == 2
    sources = await dave.history.source_ids(report.memory_ids)
    formed_from = {message for ids in sources.values() for message in ids}
    texts = {m.id: m.text for m in await dave.history.messages(CID)}
    assert "I prefer green tea" not in {texts.get(i) for i in formed_from}
    assert all(c.pending == 0 for c in await dave.history.conversations())


async def test_messages_without_an_xmpp_id_are_not_added_twice(dave: MemoryManager) -> None:
    message = {"role": "user", "sender": BOB, "text": "hi", "at": DAY, "formed": False}
    data = {
        "format": "spade_memory.export",
        "version": 2,
        "conversations": [{"conversation_id": CID, "peer": BOB, "messages": [message]}],
    }
    await dave.import_data(data)
    await dave.import_data(data)
    assert [m.text for m in await dave.history.messages(CID)] == ["hi"]


async def test_formed_messages_after_pending_ones_here_stay_pending(tmp_path: Path) -> None:
    async with await MemoryManager.open(DAVE, config(tmp_path, form=False), clock=clock) as dave:
        await chat(dave, [("user", "mine, not formed")])
        message = {"role": "user", "sender": BOB, "text": "told", "at": DAY + 60, "formed": True}
        data = {
            "format": "spade_memory.export",
            "version": 2,
            "conversations": [{"conversation_id": CID, "peer": BOB, "messages": [message]}],
        }
        await dave.import_data(data)
        info = await dave.history.info(CID)
        assert info is not None and (info.messages, info.pending) == (2, 2)


def _broken(data: dict[str, Any], where: str, value: Any) -> dict[str, Any]:
    broken = copy.deepcopy(data)
    conversation = broken["conversations"][0]
    if where in ("peer", "conversation_id"):
        conversation[where] = value
    else:
        conversation["messages"][0][where] = value
    return broken


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        ("sender", "not a jid", "sender"),
        ("peer", "not a jid", "peer"),
        ("text", "  ", "text"),
        ("text", "a\x00b", "NUL"),
        ("text", "x" * 100_001, "too long"),
        ("conversation_id", "", "conversation_id"),
        ("conversation_id", "x" * 513, "conversation_id"),
        ("role", "system", "role"),
        ("at", -1, "at"),
        ("at", "yesterday", "at"),
        ("formed", "yes", "formed"),
        ("message_id", 7, "message_id"),
    ],
)
async def test_bad_conversation_data_is_refused_and_writes_nothing(
    alice: MemoryManager, dave: MemoryManager, where: str, value: Any, says: str
) -> None:
    data = _broken(await told(alice), where, value)
    with pytest.raises(InvalidToolInput, match=says):
        await dave.import_data(data)
    assert (await dave.stats()).total == 0
    assert await dave.history.conversations() == []
    assert await dave.conversations() == []


async def test_a_conversation_kept_with_another_partner_is_refused(
    alice: MemoryManager, dave: MemoryManager
) -> None:
    data = await told(alice)
    await dave.history.append(CID, role="user", sender=CAROL, text="same id, other partner")
    with pytest.raises(InvalidToolInput, match="kept here already"):
        await dave.import_data(data)
    assert (await dave.stats()).total == 0
    assert [m.text for m in await dave.history.messages(CID)] == ["same id, other partner"]


async def test_formed_memories_keep_their_sources_through_an_export(
    alice: MemoryManager, dave: MemoryManager
) -> None:
    data = await told(alice)
    with_sources = [m for m in data["memories"] if m.get("sources")]
    assert with_sources, "the formed memories carry their sources"
    assert all(s["conversation_id"] == CID for m in with_sources for s in m["sources"])
    await dave.import_data(data)
    imported = {m.content: m.id for m in await dave.list(limit=100)}
    for exported in with_sources:
        texts = [m.text for m in await dave.history.sources(imported[exported["content"]])]
        assert texts == [
            data["conversations"][0]["messages"][s["message"]]["text"] for s in exported["sources"]
        ]
    # an export of the import carries the same sources; importing again adds none twice
    again = {m["uid"]: m.get("sources") for m in (await dave.export())["memories"]}
    assert {m["uid"]: m["sources"] for m in with_sources}.items() <= again.items()
    await dave.import_data(data)
    ids = await dave.history.source_ids([imported[m["content"]] for m in with_sources])
    assert sum(len(found) for found in ids.values()) == sum(len(m["sources"]) for m in with_sources)


async def test_forgetting_an_imported_conversation_forgets_what_was_formed_from_it(
    alice: MemoryManager, dave: MemoryManager
) -> None:
    data = await told(alice)
    await dave.import_data(data)
    formed = {m["content"] for m in data["memories"] if m.get("sources")}
    assert formed <= {m.content for m in await dave.list(limit=100)}
    await dave.history.forget(CID)
    assert not formed & {m.content for m in await dave.list(limit=100)}


async def test_a_source_whose_message_was_dropped_still_ties_the_memory_to_its_conversation(
    tmp_path: Path,
) -> None:
    # retention keeps ten messages: the first window's are gone by the export
    async with await MemoryManager.open(ALICE, config(None, max_messages=10), clock=clock) as alice:
        await chat(alice, [("user", "I prefer green tea"), ("assistant", "Noted")])
        await alice.form_memories()
        later = [
            ("user", f"I visited museum {n}") if n % 2 == 0 else ("assistant", "Nice")
            for n in range(10)
        ]
        await chat(alice, later, start=DAY + 600)
        await alice.form_memories()
        data = await alice.export()
    dropped = [
        m for m in data["memories"] if any(s["message"] is None for s in m.get("sources") or [])
    ]
    assert dropped, "a memory formed from a message retention dropped"
    async with await MemoryManager.open(DAVE, config(tmp_path), clock=clock) as dave:
        await dave.import_data(data)
        contents = {m.content for m in await dave.list(limit=100)}
        assert {m["content"] for m in dropped} <= contents
        again = {m["uid"]: m.get("sources") for m in (await dave.export())["memories"]}
        assert all(again[m["uid"]] == m["sources"] for m in dropped)
        await dave.history.forget(CID)
        assert not {m["content"] for m in dropped} & {m.content for m in await dave.list(limit=100)}


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ({"conversation_id": "nowhere", "message": 0}, "does not hold"),
        ({"conversation_id": CID, "message": 99}, "holds 4"),
        ({"conversation_id": CID, "message": -1}, "message"),
    ],
)
async def test_a_source_naming_no_message_of_the_export_is_refused(
    alice: MemoryManager, dave: MemoryManager, source: dict[str, Any], says: str
) -> None:
    data = copy.deepcopy(await told(alice))
    next(m for m in data["memories"] if m.get("sources"))["sources"] = [source]
    with pytest.raises(InvalidToolInput, match=says):
        await dave.import_data(data)
    assert (await dave.stats()).total == 0
    assert await dave.history.conversations() == []


async def test_a_reset_travels_with_the_conversation(
    alice: MemoryManager, dave: MemoryManager
) -> None:
    """What came before a reset is kept but not replayed, after an import too."""
    await chat(alice, [("user", "My old plan was Rome"), ("assistant", "Noted")])
    assert await alice.history.reset(CID) is True
    await chat(alice, [("user", "Let us start over"), ("assistant", "Sure")], start=DAY + 600)
    replayed = [m.text for m in await alice.history.recent(CID, limit=10)]
    assert replayed == ["Let us start over", "Sure"]
    data = await alice.export()
    flags = [m["before_reset"] for m in data["conversations"][0]["messages"]]
    assert flags == [True, True, False, False]

    await dave.import_data(data)
    assert [m.text for m in await dave.history.recent(CID, limit=10)] == replayed
    assert len(await dave.history.messages(CID)) == 4  # kept, all four
    again = await dave.export()
    assert again["conversations"] == data["conversations"]
    assert await dave.import_data(data) == (0, 0)  # twice changes nothing
    assert await dave.export() == again
    report = await dave.form_memories()
    assert report.windows <= 1  # only what followed the reset is left to form


async def test_an_import_sets_aside_what_the_export_says_came_before_a_reset(
    alice: MemoryManager, tmp_path: Path
) -> None:
    """A copy taken before the reset, then one taken after it: the messages the first
    brought are set aside by the second."""
    await chat(alice, [("user", "My old plan was Rome"), ("assistant", "Noted")])
    before = await alice.export()
    await alice.history.reset(CID)
    await chat(alice, [("user", "Let us start over")], start=DAY + 600)
    after = await alice.export()
    async with await MemoryManager.open(DAVE, config(tmp_path / "erin"), clock=clock) as erin:
        await erin.import_data(before)
        assert len(await erin.history.recent(CID, limit=10)) == 2
        await erin.import_data(after)
        replayed = [m.text for m in await erin.history.recent(CID, limit=10)]
        assert replayed == ["Let us start over"]


async def test_what_is_set_aside_by_an_import_never_stops_the_forming(tmp_path: Path) -> None:
    """A copy taken before the reset left two messages pending here; the copy taken
    after it sets them aside: what came after the reset is formed, they never are."""
    async with await MemoryManager.open(ALICE, config(None), clock=clock) as alice:
        await chat(alice, [("user", "I live in Rome and I love cycling"), ("assistant", "Ok")])
        before = await alice.export()
        await alice.history.reset(CID)
        await chat(
            alice,
            [("user", "My sister Ada is a pilot in Oslo"), ("assistant", "Got it")],
            start=DAY + 600,
        )
        after = await alice.export()
    async with await MemoryManager.open(DAVE, config(tmp_path), clock=clock) as dave:
        await dave.import_data(before)
        await dave.import_data(after)
        info = await dave.history.info(CID)
        assert info is not None and info.pending == 2  # the two said after the reset
        report = await dave.form_memories()
        assert report.windows == 1 and report.discarded == 0 and report.memories >= 1
        info = await dave.history.info(CID)
        assert info is not None and info.pending == 0
        formed = [m.content for m in await dave.list()]
        assert any("Ada" in text for text in formed)
        assert not any("Rome" in text for text in formed)
