from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.errors import InvalidAgentId, PathEscapeError
from spade_memory.identity import (
    AgentIdentity,
    conversation_id_for,
    normalize_jid,
    resolve_inside,
    storage_stem,
)


def test_resource_and_case_do_not_change_identity() -> None:
    assert normalize_jid("Alice@Example.com/phone") == "alice@example.com"
    assert AgentIdentity.of("Alice@Example.com/phone") == AgentIdentity.of("alice@example.com")


@pytest.mark.parametrize(
    ("first", "second"),
    [("a_b@c", "a@b_c"), ("a_b@c", "a@b/c"), ("a@b_c", "a@b/c"), ("a.b@c", "a_b@c")],
)
def test_lookalike_jids_get_distinct_stems(first: str, second: str) -> None:
    assert AgentIdentity.of(first).stem != AgentIdentity.of(second).stem


@pytest.mark.parametrize("bad", ["", "@x", "a@", "a@b@c", "a b@x", "justdomain", "a\x00b@x"])
def test_invalid_jids_are_refused(bad: str) -> None:
    with pytest.raises(InvalidAgentId):
        normalize_jid(bad)


HOSTILE = [
    "..@localhost",
    "a\\b@x",
    "%2e%2e@x",
    "CON@x",
    "nul@x",
    "alice@localhost/../../etc/passwd",
    "ａｌｉｃｅ@x",
    "x" * 300 + "@x",
    ".@x",
]


@pytest.mark.parametrize("jid", HOSTILE)
def test_hostile_jids_stay_inside_the_root(jid: str, tmp_path: Path) -> None:
    try:
        identity = AgentIdentity.of(jid)
    except InvalidAgentId:
        return
    for name in (identity.database_name, identity.interactions_name, identity.snapshot_name):
        path = resolve_inside(tmp_path, name)
        assert path.parent == tmp_path.resolve()
        assert len(name.encode()) < 255
        assert "/" not in name and "\\" not in name and not name.startswith(".")


def test_fullwidth_letters_fold_to_ascii() -> None:
    assert normalize_jid("ａｌｉｃｅ@x") == "alice@x"


def test_symlink_leading_out_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside / "target.db", root / "evil.db")
    with pytest.raises(PathEscapeError):
        resolve_inside(root, "evil.db")
    for name in ("..", ".", "a/b", "", "a\x00"):
        with pytest.raises(PathEscapeError):
            resolve_inside(root, name)


def test_conversation_id_is_symmetric_and_stable() -> None:
    first = conversation_id_for("alice@x/phone", "Bob@X")
    assert first == conversation_id_for("bob@x", "alice@x")
    assert first != conversation_id_for("alice@x", "carol@x")


local_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="@/")


@settings(max_examples=300, deadline=None)
@given(
    local=st.text(local_chars, min_size=1, max_size=60),
    domain=st.sampled_from(["x", "example.com", "localhost"]),
)
def test_normaliser_never_escapes_and_is_idempotent(local: str, domain: str) -> None:
    try:
        bare = normalize_jid(f"{local}@{domain}")
    except InvalidAgentId:
        return
    assert normalize_jid(bare) == bare
    stem = storage_stem(bare)
    assert stem.replace("-", "").replace("_", "").isalnum()
    assert stem == storage_stem(normalize_jid(bare + "/resource"))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=8),
        min_size=2,
        max_size=30,
        unique=True,
    )
)
def test_distinct_bare_jids_never_share_a_stem(locals_: list[str]) -> None:
    jids = {normalize_jid(f"{name}@host") for name in locals_}
    assert len({storage_stem(jid) for jid in jids}) == len(jids)


@settings(max_examples=400, deadline=None)
@given(
    st.from_regex(r"[a-z0-9._-]{1,12}@[a-z0-9.-]{1,24}", fullmatch=True)
    | st.from_regex(r"[a-z0-9]{1,8}@[a-z0-9]{1,8}(\.[a-z0-9-]{1,8}){0,3}", fullmatch=True)
)
def test_plain_jids_skip_slixmpp_only_where_it_would_change_nothing(text: str) -> None:
    from slixmpp.jid import JID, InvalidJID

    from spade_memory import identity

    if identity._PLAIN_BARE.fullmatch(text) is None:
        return
    try:
        prepared = str(JID(text).bare)
    except (InvalidJID, UnicodeError, ValueError) as exc:
        raise AssertionError(f"{text!r} is taken as plain but slixmpp refuses it: {exc}") from exc
    assert prepared == text == normalize_jid(text)
