"""Storing what is already stored reinforces it instead of adding a copy."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from factories import UNDO_CONTENT_KEYS, UNDO_GIVEN, hashing_config

from spade_memory import MaintenanceConfig, MemoryConfig, MemoryManager, Scope
from spade_memory.errors import InvalidToolInput
from spade_memory.text.content_key import content_key, normalized_text

AGENT = "keeper@localhost"
ALICE, BOB = "alice@localhost", "bob@localhost"


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("Bob prefers answers in Chinese.", "  bob prefers ANSWERS in chinese", True),
        ("Ｂｏｂ，ｈｉ！", "bob hi", True),
        ("我喜欢茶。", "我喜欢茶", True),
        ("Alice is vegetarian", "Alice is not vegetarian", False),
        ("Alice knows C++", "Alice knows C", False),
        ("The budget is 3.5 million", "The budget is 35 million", False),
        ("Alice likes Bob", "Bob likes Alice", False),
    ],
)
def test_what_counts_as_the_same_text(a: str, b: str, same: bool) -> None:
    assert (content_key(a) == content_key(b)) is same
    assert (normalized_text(a) == normalized_text(b)) is same


def test_the_context_is_part_of_the_key() -> None:
    assert content_key("Yes!", None) == content_key("yes", "")
    assert content_key("Yes!", "8 May 2023") == content_key("yes", "8 may, 2023")
    assert content_key("Yes!", "8 May 2023") != content_key("Yes!", "9 June 2023")
    assert content_key("a", "b c") != content_key("a b", "c")


async def test_a_copy_reinforces_the_memory_it_copies(fresh_memory: MemoryManager) -> None:
    first = await fresh_memory.store("Bob prefers answers in Chinese.", importance=0.3)
    again = await fresh_memory.store(
        "bob prefers answers in chinese", importance=0.8, confidence=0.5
    )
    assert again.id == first.id and again.uid == first.uid
    assert again.content == first.content  # the text as first stored
    assert again.access_count == first.access_count + 1
    assert again.importance == 0.8 and again.confidence == 1.0  # the higher of the two
    assert [m.id for m in await fresh_memory.list()] == [first.id]
    assert await fresh_memory.get(first.id) == again
    hits = await fresh_memory.search("Bob answers Chinese")
    assert [hit.memory.id for hit in hits] == [first.id]


async def test_an_imported_older_copy_reinforces_without_moving_the_times_back(
    fresh_memory: MemoryManager,
) -> None:
    held = await fresh_memory.store("The build server is jenkins-02")
    older = 1_700_000_000.0  # told elsewhere, long ago
    export = {
        "format": "spade_memory.export",
        "version": 2,
        "memories": [
            {"uid": "a" * 32, "content": held.content, "created_at": older, "updated_at": older}
        ],
    }
    assert await fresh_memory.import_data(export) == (0, 0)
    after = await fresh_memory.get(held.id)
    assert after.access_count == 1
    assert after.updated_at == held.updated_at  # not the copy's older time
    assert after.last_accessed is not None and after.last_accessed >= held.updated_at


async def test_importing_a_copy_again_changes_nothing(fresh_memory: MemoryManager) -> None:
    """The copy's uid stands for the memory it reinforced: the same import twice
    tells it once (it told it again on every run), and its sources attach to it."""
    held = await fresh_memory.store("The build server is jenkins-02")
    export = {
        "format": "spade_memory.export",
        "version": 2,
        "memories": [{"uid": "a" * 32, "content": "the build server is Jenkins-02"}],
    }
    assert await fresh_memory.import_data(export) == (0, 0)
    assert (await fresh_memory.get(held.id)).access_count == 1
    for _ in range(2):
        assert await fresh_memory.import_data(export) == (0, 0)
    assert (await fresh_memory.get(held.id)).access_count == 1
    assert [m.id for m in await fresh_memory.list()] == [held.id]
    holder = await fresh_memory._engine.base.holder_of_uid("a" * 32)
    assert holder is not None and holder.id == held.id
    await fresh_memory.forget(held.id)  # the alias goes with the memory
    assert await fresh_memory._engine.base.holder_of_uid("a" * 32) is None
    assert await fresh_memory.import_data(export) == (1, 0)


async def test_dedupe_false_stores_the_copy(fresh_memory: MemoryManager) -> None:
    first = await fresh_memory.store("The archive closes at 6 pm")
    copy = await fresh_memory.store("The archive closes at 6 pm", dedupe=False)
    assert copy.id != first.id
    later = await fresh_memory.store("the archive closes at 6 PM!")
    assert later.id == copy.id  # the newest copy is the one reinforced
    with pytest.raises(InvalidToolInput, match="dedupe"):
        await fresh_memory.store("x", dedupe="no")  # type: ignore[arg-type]


async def test_only_a_copy_of_the_same_category_and_scope_is_reinforced(
    fresh_memory: MemoryManager,
) -> None:
    text = "The wifi password is blue-falcon-42"
    ids = {
        (await fresh_memory.store(text)).id,
        (await fresh_memory.store(text, context="said in the Lisbon office")).id,
        (await fresh_memory.store(text, category="preference")).id,
        (await fresh_memory.store(text, scope=Scope.private(ALICE))).id,
        (await fresh_memory.store(text, scope=Scope.private(BOB))).id,
        (await fresh_memory.store(text, scope=Scope.shared(ALICE, [BOB]))).id,
        (await fresh_memory.store(text, scope=Scope.shared(ALICE, [BOB, "carol@x.org"]))).id,
        (
            await fresh_memory.store(
                text, scope=Scope.conversation(ALICE), source_conversation="c1"
            )
        ).id,
        (
            await fresh_memory.store(
                text, scope=Scope.conversation(ALICE), source_conversation="c2"
            )
        ).id,
    }
    assert len(ids) == 9
    again = {
        (await fresh_memory.store(text.upper())).id,
        (await fresh_memory.store(text, scope=Scope.private(ALICE))).id,
        (await fresh_memory.store(text, scope=Scope.shared(ALICE, [BOB]))).id,
        (
            await fresh_memory.store(
                text, scope=Scope.conversation(ALICE), source_conversation="c2"
            )
        ).id,
    }
    assert again <= ids and len(again) == 4
    assert len(await fresh_memory.list(limit=50)) == 9


async def test_an_archived_memory_is_not_revived_by_a_copy(fresh_memory: MemoryManager) -> None:
    first = await fresh_memory.store("Planning starts on Mondays", category="pattern")
    await fresh_memory.archive(first.id)
    second = await fresh_memory.store("Planning starts on Mondays", category="pattern")
    assert second.id != first.id
    assert (await fresh_memory.get(first.id)).status == "archived"


async def test_copies_in_one_batch_and_at_once_become_one_memory(
    fresh_memory: MemoryManager,
) -> None:
    stored = await fresh_memory.store_many(
        [
            {"content": "The lab opens at 8"},
            {"content": "the lab opens at 8."},
            {"content": "The lab opens at 8", "dedupe": False},
            {"content": "The canteen closes at 3"},
        ]
    )
    assert stored[0].id == stored[1].id != stored[2].id
    assert len({m.id for m in stored}) == 3
    together = await asyncio.gather(
        *(fresh_memory.store("The printer on floor 2 is broken") for _ in range(20))
    )
    assert len({m.id for m in together}) == 1
    memory = await fresh_memory.get(together[0].id)
    assert memory.access_count == 19
    assert len(await fresh_memory.list(limit=50)) == 4


@pytest.mark.parametrize("background", [True, False], ids=["derived-behind", "derived-at-ack"])
async def test_a_memory_told_twice_in_one_batch_gets_its_graph(background: bool) -> None:
    """The first of two copies in one batch is inserted, so it is derived: only the
    second is a reinforcement (each was once taken for one, and no graph was made)."""
    config = hashing_config(derive_in_background=background)
    config = replace(config, maintenance=MaintenanceConfig(check_on_open=False))  # no mending
    async with await MemoryManager.open(AGENT, config) as memory:
        stored = await memory.store_many(
            [
                {"content": "Greta Holm repairs violins in Uppsala"},
                {"content": "The canteen closes at 3"},
                {"content": "greta holm repairs violins in uppsala."},
            ]
        )
        await memory.flush()
        assert stored[0].id == stored[2].id and stored[2].access_count == 1
        atoms = await memory.atoms(stored[0].id)
        assert atoms and all(atom.reinforcements == (0 if background else 1) for atom in atoms)
        report = await memory.check()
        assert report.clean, report.found
        hits = await memory.search("Who repairs violins?", limit=1)
        assert [hit.memory.id for hit in hits] == [stored[0].id]


async def test_a_copy_lengthens_the_lives_of_its_atoms(fresh_memory: MemoryManager) -> None:
    first = await fresh_memory.store("Carla works as an architect in Porto")
    await fresh_memory.flush()  # its atoms are derived right after the store
    before = await fresh_memory.atoms(first.id)
    await fresh_memory.store("Carla works as an architect in Porto.")
    after = await fresh_memory.atoms(first.id)
    assert before and len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        assert new.reinforcements == old.reinforcements + 1
        assert new.expires_at > old.expires_at


async def test_a_copy_of_a_memory_still_to_be_derived_starts_its_atoms_lives_anew(
    fresh_memory: MemoryManager,
) -> None:
    await fresh_memory._engine.deriver.aclose()  # stopped: the marks stay
    first = await fresh_memory.store("Dario works as a baker in Siena")
    await asyncio.sleep(0.01)
    copy = await fresh_memory.store("Dario works as a baker in Siena.")
    assert copy.id == first.id
    (pending,) = await fresh_memory._engine.base.pending_derivations(10)
    assert pending.graph_time == pytest.approx(copy.updated_at)  # not the first store's time
    assert pending.graph_time > first.created_at


async def test_memories_stored_before_content_keys_are_found_after_the_migration(
    tmp_path: Path,
) -> None:
    config = hashing_config(tmp_path)
    async with await MemoryManager.open(AGENT, config) as memory:
        old = await memory.store("The staging database password rotates every 30 days")
        path = memory.base_store.path
    assert path is not None
    db = sqlite3.connect(path)
    try:
        db.executescript(";".join(UNDO_CONTENT_KEYS) + ";")
    finally:
        db.close()
    async with await MemoryManager.open(AGENT, config) as memory:
        again = await memory.store("the staging database password rotates every 30 days")
        assert again.id == old.id
        assert len(await memory.list()) == 1


async def test_the_store_tool_says_when_it_reinforced_a_memory() -> None:
    from spade_memory.tools import ToolContext

    config = MemoryConfig(in_memory=True, embedder=None)
    frozen = 1_700_000_000.0  # both stores at one time, as a coarse clock gives
    async with await MemoryManager.open(AGENT, config, clock=lambda: frozen) as memory:
        store = {tool.name: tool for tool in memory.tools()}["store_memory"]
        context = ToolContext(manager=memory)
        arguments = {"category": "fact", "content": "The auditors visit in May"}
        first = await store.call(arguments, context)
        second = await store.call(arguments, context)
    assert first.text == "Stored as memory 1 in category fact."
    assert second.text == "Already stored as memory 1 in category fact; reinforced it."


async def test_a_memory_whose_text_changed_is_a_copy_of_its_new_text_only(
    fresh_memory: MemoryManager,
) -> None:
    tea = await fresh_memory.store("Bob likes tea")
    await fresh_memory.update(tea.id, content="Bob likes coffee")
    told_again = await fresh_memory.store("Bob likes tea")  # no memory says this now
    assert told_again.id != tea.id and told_again.content == "Bob likes tea"
    coffee = await fresh_memory.store("bob likes coffee")
    assert coffee.id == tea.id and coffee.content == "Bob likes coffee"
    assert sorted(m.content for m in await fresh_memory.list()) == [
        "Bob likes coffee",
        "Bob likes tea",
    ]


async def test_a_stale_content_key_is_made_anew_by_the_migration(tmp_path: Path) -> None:
    config = hashing_config(tmp_path)
    async with await MemoryManager.open(AGENT, config) as memory:
        tea = await memory.store("Bob likes coffee")
        path = memory.base_store.path
    assert path is not None
    db = sqlite3.connect(path)
    try:  # as an update from "Bob likes tea" left it before keys followed the text
        stale = content_key("Bob likes tea", None)
        db.execute("UPDATE memories SET content_key = ? WHERE id = ?", (stale, tea.id))
        db.executescript(";".join(UNDO_GIVEN[:-1]) + ";")
        db.execute("PRAGMA user_version = 11")
        db.commit()
    finally:
        db.close()
    async with await MemoryManager.open(AGENT, config) as memory:
        assert (await memory.store("Bob likes coffee")).id == tea.id
        assert (await memory.store("Bob likes tea")).id != tea.id
