"""The visibility rule of scopes (``Viewer.sees`` / ``Viewer.may_change``), case by case."""

from __future__ import annotations

import dataclasses

import pytest

from spade_memory import Memory, Scope, Viewer

ALICE, BOB, CAROL = "alice@x.org", "bob@x.org", "carol@x.org"


def memory(scope: Scope, *, category: str = "fact", conversation: str | None = "c1") -> Memory:
    return Memory(
        id=1, uid="u", category=category, content="text", context=None, confidence=1.0,
        importance=0.5, status="active", source_conversation=conversation,
        source_sender=scope.owner, created_at=0.0, updated_at=0.0, last_accessed=None,
        access_count=0, scope=scope,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("scope", "viewer", "sees", "may_change"),
    [
        (Scope.agent(), Viewer(jid=BOB), True, False),
        (Scope.agent(), Viewer(jid=BOB, may_change_global=True), True, True),
        (Scope.private(ALICE), Viewer(jid=ALICE), True, True),
        (Scope.private(ALICE), Viewer(jid=BOB), False, False),
        (Scope.private(ALICE), Viewer(jid=BOB, may_change_global=True), False, False),
        (Scope.shared(ALICE, [BOB]), Viewer(jid=BOB), True, False),
        (Scope.shared(ALICE, [BOB]), Viewer(jid=CAROL), False, False),
        (Scope.shared(ALICE, [BOB]), Viewer(jid=ALICE), True, True),
        (Scope.conversation(ALICE), Viewer(jid=BOB, conversation_id="c1"), True, False),
        (Scope.conversation(ALICE), Viewer(jid=ALICE, conversation_id="c2"), False, False),
        (Scope.conversation(ALICE), Viewer(jid=ALICE, conversation_id="c1"), True, True),
    ],
)
def test_who_sees_and_changes_what(
    scope: Scope, viewer: Viewer, sees: bool, may_change: bool
) -> None:
    assert viewer.sees(memory(scope)) is sees
    assert viewer.may_change(memory(scope)) is may_change


def test_categories_limit_only_what_the_viewer_did_not_tell() -> None:
    viewer = Viewer(jid=ALICE, categories=frozenset({"fact"}))
    assert viewer.sees(memory(Scope.agent()))
    assert not viewer.sees(memory(Scope.agent(), category="private"))
    assert viewer.sees(memory(Scope.private(ALICE), category="private"))
    assert not viewer.sees(memory(Scope.shared(BOB, [ALICE]), category="private"))


def test_a_conversation_memory_without_its_conversation_is_seen_by_nobody() -> None:
    orphan = memory(Scope.conversation(ALICE), conversation=None)
    assert not Viewer(jid=ALICE).sees(orphan)
    assert not Viewer(jid=ALICE, conversation_id="c1").sees(orphan)


def test_memories_default_to_the_agents_global_scope() -> None:
    plain = dataclasses.replace(memory(Scope.agent()))
    assert plain.scope == Scope() and plain.to_dict()["scope"] == {
        "owner": None, "visibility": "global", "shared_with": [],
    }  # fmt: skip
