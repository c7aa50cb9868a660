"""Scopes on writes and changes: stored and read back whole, checked on input, and a
viewer forgets or changes only what it may (refusals change nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_memory import (
    InvalidToolInput,
    MemoryConfig,
    MemoryManager,
    MemoryNotFound,
    Scope,
    ScopeDenied,
    Viewer,
)

ALICE, BOB = "alice@x.org", "bob@x.org"


@pytest.fixture
async def memory(tmp_path: Path) -> MemoryManager:
    opened = await MemoryManager.open("agent@x.org", MemoryConfig(root=tmp_path, embedder=None))
    yield opened  # type: ignore[misc]
    await opened.aclose()


async def test_scopes_are_stored_normalised_and_read_back(memory: MemoryManager) -> None:
    shared = await memory.store(
        "The plan", scope=Scope.shared("Alice@X.org/phone", ["BOB@x.org", "carol@x.org"])
    )
    assert shared.scope == Scope.shared(ALICE, [BOB, "carol@x.org"])
    assert (await memory.get(shared.id)).scope == shared.scope
    many = await memory.store_many(
        [
            {"content": "one", "scope": {"owner": ALICE, "visibility": "private"}},
            {"content": "two", "scope": Scope.conversation(BOB), "source_conversation": "c1"},
            {"content": "three"},
        ]
    )
    assert [m.scope for m in many] == [Scope.private(ALICE), Scope.conversation(BOB), Scope()]
    assert [(await memory.get(m.id)).scope for m in many] == [m.scope for m in many]


@pytest.mark.parametrize(
    ("scope", "conversation", "message"),
    [
        (Scope(visibility="private"), None, "private memory needs an owner"),
        (Scope(owner=ALICE, visibility="shared"), None, "at least one reader"),
        (Scope.conversation(ALICE), None, "needs its source_conversation"),
        ({"owner": "not a jid", "visibility": "private"}, None, "not a valid agent JID"),
        ({"visibility": "secret"}, None, "visibility must be one of"),
        ({"owner": ALICE, "readers": [BOB]}, None, "unknown fields"),
        (Scope(owner=ALICE, visibility="private", shared_with=frozenset({BOB})), None, "only a"),
        ("private", None, "must be a Scope or a mapping"),
    ],
)
async def test_bad_scopes_write_nothing(
    memory: MemoryManager, scope: object, conversation: str | None, message: str
) -> None:
    with pytest.raises(InvalidToolInput, match=message):
        await memory.store("text", scope=scope, source_conversation=conversation)  # type: ignore[arg-type]
    with pytest.raises(InvalidToolInput, match=message):
        await memory.store_many([{"content": "fine"}, {"content": "text", "scope": scope}])
    assert await memory.list() == []


async def test_the_sender_is_kept_as_its_bare_jid_as_a_scope_owner_is(
    memory: MemoryManager,
) -> None:
    told = await memory.store(
        "The plan", source_sender="Alice@X.org/phone", scope=Scope.private("Alice@X.org/phone")
    )
    assert (told.source_sender, told.scope.owner) == (ALICE, ALICE)
    assert (await memory.get(told.id)).source_sender == ALICE
    (many,) = await memory.store_many([{"content": "one", "source_sender": "BOB@x.org"}])
    assert many.source_sender == BOB
    assert (await memory.store("nobody told it", source_sender="  ")).source_sender is None


@pytest.mark.parametrize("sender", ["not a jid", "Bob", "x" * 5000, "a\x00b@x.org", 5])
async def test_a_sender_that_is_no_jid_writes_nothing(
    memory: MemoryManager, sender: object
) -> None:
    with pytest.raises(InvalidToolInput, match="source_sender"):
        await memory.store("text", source_sender=sender)  # type: ignore[arg-type]
    with pytest.raises(InvalidToolInput, match="item 1: source_sender"):
        await memory.store_many([{"content": "fine"}, {"content": "text", "source_sender": sender}])
    assert await memory.list() == []


async def test_get_of_an_unseen_memory_is_not_found_like_a_missing_one(
    memory: MemoryManager,
) -> None:
    secret = await memory.store("secret", scope=Scope.private(ALICE))
    with pytest.raises(MemoryNotFound) as unseen:
        await memory.get(secret.id, viewer=Viewer(jid=BOB))
    with pytest.raises(MemoryNotFound) as missing:
        await memory.get(secret.id + 1, viewer=Viewer(jid=BOB))
    assert str(unseen.value) == str(missing.value).replace(str(secret.id + 1), str(secret.id))
    assert (await memory.get(secret.id, viewer=Viewer(jid="ALICE@x.org/home"))).id == secret.id
    for call in (memory.atoms, memory.live_atoms, memory.recall_memory):
        with pytest.raises(MemoryNotFound):
            await call(secret.id, viewer=Viewer(jid=BOB))


async def test_forget_and_update_refusals_change_nothing(memory: MemoryManager) -> None:
    secret = await memory.store("alice's secret", scope=Scope.private(ALICE))
    told = await memory.store("what alice told all", scope=Scope(owner=ALICE))
    own = await memory.store("the agent's own fact")
    bob = Viewer(jid=BOB)
    with pytest.raises(MemoryNotFound):
        await memory.forget(secret.id, viewer=bob)
    with pytest.raises(MemoryNotFound):
        await memory.update(secret.id, content="changed", viewer=bob)
    with pytest.raises(ScopeDenied, match=f"memory {told.id} was told by someone else"):
        await memory.forget(told.id, viewer=bob)
    with pytest.raises(ScopeDenied, match="you may change only what you told me"):
        await memory.update(told.id, content="changed", viewer=bob)
    with pytest.raises(ScopeDenied, match="the agent's own"):
        await memory.forget(own.id, viewer=bob)
    # may_change_global: global memories, never what is private to another
    with pytest.raises(MemoryNotFound):
        await memory.forget(secret.id, viewer=Viewer(jid=BOB, may_change_global=True))
    assert [m.content for m in await memory.list()] == [own.content, told.content, secret.content]
    await memory.update(own.id, importance=0.9, viewer=Viewer(jid=BOB, may_change_global=True))
    # the owner may change and forget its own
    await memory.update(secret.id, content="alice's new secret", viewer=Viewer(jid=ALICE))
    assert (await memory.get(secret.id)).content == "alice's new secret"
    await memory.forget(secret.id, viewer=Viewer(jid=ALICE))
    with pytest.raises(MemoryNotFound):
        await memory.get(secret.id)
    shared = await memory.store("for two", scope=Scope.shared(ALICE, [BOB]))
    await memory.forget(shared.id)  # its readers go with it
    assert await memory.base_store.fetchall("SELECT * FROM memory_readers") == []


async def test_rescoping(memory: MemoryManager) -> None:
    note = await memory.store("the plan", scope=Scope.private(ALICE))
    bob = Viewer(jid=BOB)
    with pytest.raises(ScopeDenied, match="only if it told it"):
        await memory.update(note.id, scope=Scope.shared(BOB, [BOB]), viewer=Viewer(jid=ALICE))
    alice = Viewer(jid=ALICE)
    shared = await memory.update(note.id, scope=Scope.shared(ALICE, [BOB]), viewer=alice)
    assert shared.scope == Scope.shared(ALICE, [BOB])
    assert [m.id for m in await memory.list(viewer=bob)] == [note.id]
    with pytest.raises(InvalidToolInput, match="needs its source_conversation"):
        await memory.update(note.id, scope=Scope.conversation(ALICE))
    readers = "SELECT count(*) FROM memory_readers WHERE memory_id = ?"
    assert (await memory.base_store.fetchall(readers, (note.id,)))[0][0] == 1
    public = await memory.update(note.id, scope=Scope())  # the agent re-scopes anything
    assert (await memory.base_store.fetchall(readers, (note.id,)))[0][0] == 0
    assert public.scope == Scope() and (await memory.get(note.id, viewer=bob)).id == note.id
    # a viewer that may change global memories still may not take one told by another
    told = await memory.store("the office opens at nine", scope=Scope(owner=ALICE))
    agents = await memory.store("the agent's own rule")
    for taken in (told, agents):
        with pytest.raises(ScopeDenied, match="only if it told it"):
            await memory.update(
                taken.id, scope=Scope.private(BOB), viewer=Viewer(jid=BOB, may_change_global=True)
            )
        assert (await memory.get(taken.id)).scope == taken.scope


async def test_forget_atom_with_a_viewer(memory: MemoryManager) -> None:
    secret = await memory.store("Alice lives in Porto.", scope=Scope.private(ALICE))
    await memory.flush()  # its atoms are derived right after the store
    (atom,) = await memory.atoms(secret.id)
    with pytest.raises(MemoryNotFound, match=f"no memory atom with id {atom.id}"):
        await memory.forget_atom(atom.id, viewer=Viewer(jid=BOB))
    told = await memory.store("Bob lives in Faro.", scope=Scope(owner=ALICE))
    await memory.flush()
    (other,) = await memory.atoms(told.id)
    with pytest.raises(ScopeDenied):
        await memory.forget_atom(other.id, viewer=Viewer(jid=BOB))
    assert all(a.status == "active" for a in await memory.atoms(told.id))
    forgotten = await memory.forget_atom(atom.id, viewer=Viewer(jid=ALICE))
    assert forgotten.status == "forgotten"


async def test_a_viewers_categories_may_be_any_set_of_names(memory: MemoryManager) -> None:
    told = await memory.store("Carol prefers tea", category="preference", scope=Scope(owner=ALICE))
    for categories in ({"preference"}, ["preference"], ("preference",)):
        viewer = Viewer(jid=BOB, categories=categories)  # type: ignore[arg-type]
        assert [r.memory.id for r in await memory.search("tea", viewer=viewer)] == [told.id]
        assert [r.memory.id for r in await memory.recall("tea", viewer=viewer)] == [told.id]
    once = Viewer(jid=BOB, categories=(c for c in ["preference"]))  # type: ignore[arg-type]
    assert [r.memory.id for r in await memory.search("tea", viewer=once)] == [told.id]
    for bad in ("preference", [1]):
        with pytest.raises(InvalidToolInput, match="categories must be a set"):
            await memory.search("tea", viewer=Viewer(jid=BOB, categories=bad))  # type: ignore[arg-type]
