"""Disclosure: the categories, viewer and scope of a partner, from the memory's config."""

from __future__ import annotations

import pytest

from spade_memory.config import MemoryConfig, ScopePolicy, SharingConfig
from spade_memory.disclosure import Disclosure, visible_categories
from spade_memory.errors import ConfigError
from spade_memory.models import Scope, Viewer

CATEGORIES = ("fact", "pattern", "preference", "private")
ANALYST, VISITOR = "analyst@x.org", "visitor@x.org"


def config(**fields: object) -> MemoryConfig:
    return MemoryConfig(in_memory=True, embedder=None, categories=CATEGORIES, **fields)  # type: ignore[arg-type]


def test_without_sharing_every_category_but_the_private_ones() -> None:
    assert visible_categories(None, CATEGORIES, VISITOR) == ("fact", "pattern", "preference")


def test_with_sharing_the_allow_lists_hold_and_unlisted_categories_are_seen_by_nobody() -> None:
    sharing = SharingConfig(allow={"fact": [ANALYST], "preference": ["*"]})
    assert visible_categories(sharing, CATEGORIES, ANALYST) == ("fact", "preference")
    assert visible_categories(sharing, CATEGORIES, VISITOR) == ("preference",)
    custom = SharingConfig(allow={"private": ["*"]}, private_categories=frozenset({"pattern"}))
    assert visible_categories(custom, CATEGORIES, VISITOR) == ("private",)


def test_the_viewer_of_a_partner() -> None:
    disclosure = Disclosure(
        config(
            sharing=SharingConfig(allow={"fact": [ANALYST]}),
            scope=ScopePolicy(may_change_global=True),
        )
    )
    assert disclosure.viewer(ANALYST, "c1") == Viewer(
        jid=ANALYST,
        conversation_id="c1",
        categories=frozenset({"fact"}),
        may_change_global=True,
    )
    assert disclosure.viewer(VISITOR).categories == frozenset()


@pytest.mark.parametrize(
    ("mode", "conversation", "scope"),
    [
        ("per_sender", "c1", Scope.private(VISITOR)),
        ("per_conversation", "c1", Scope.conversation(VISITOR)),
        ("per_conversation", None, Scope.private(VISITOR)),
        ("shared", "c1", Scope(owner=VISITOR, visibility="global")),
    ],
)
def test_the_scope_of_what_a_partner_tells(
    mode: str, conversation: str | None, scope: Scope
) -> None:
    disclosure = Disclosure(config(scope=ScopePolicy(mode=mode)))  # type: ignore[arg-type]
    assert disclosure.scope_for(VISITOR, conversation) == scope


def test_senders_are_bare_jids_or_anyone() -> None:
    assert Disclosure(config()).admits(VISITOR)
    only = Disclosure(config(scope=ScopePolicy(senders=["Analyst@X.org/phone"])))
    assert only.admits(ANALYST) and not only.admits(VISITOR)
    with pytest.raises(ConfigError, match=r"ScopePolicy\.senders"):
        ScopePolicy(senders=["not a jid"])
