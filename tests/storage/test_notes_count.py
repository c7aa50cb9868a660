"""Notes counted without their parser: the parser's counts, or none at all.

:func:`count_notes` never counts a file the strict models would refuse, counts
what they count, and leaves torn, stale or damaged files to the store's open.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spade_memory.errors import SpadeMemoryError
from spade_memory.storage import interaction_file, notes_count, notes_journal
from spade_memory.storage.interaction import InteractionStore
from spade_memory.storage.notes_count import count_notes
from spade_memory.storage.notes_journal import journal_path

AGENT = "alice@example.org"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "alice_interactions.json"


def parsed_counts(path: Path) -> tuple[int, int]:
    conversations, _ = interaction_file.open_file(path, AGENT)
    return len(conversations), sum(len(notes) for notes in conversations.values())


def files_of(path: Path) -> dict[str, tuple[bytes, int]]:
    return {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in sorted(path.parent.iterdir())}


def test_the_format_tags_are_the_parsers() -> None:
    assert notes_count._SNAPSHOT_TAG == interaction_file.FORMAT_TAG
    assert notes_count._JOURNAL_TAG == notes_journal.JOURNAL_TAG
    assert notes_count._JOURNAL_VERSION == notes_journal.JOURNAL_VERSION
    assert notes_count._SNAPSHOT_VERSIONS == interaction_file._READABLE_VERSIONS


async def test_snapshot_and_journal_count_as_the_store_counts_them(path: Path) -> None:
    assert count_notes(path, AGENT) == (0, 0)
    async with await InteractionStore.open(path, agent=AGENT) as store:
        for conversation in ("c1", "c2", "c3"):
            await store.add(conversation, f"first of {conversation}", author="bob@example.org")
        await store.add("c1", "second")
        await store.clear("c2")
        await store.import_notes({"c4": [{"content": "old", "created_at": 5}]})
        expected = await store.counts()
    assert journal_path(path).exists()  # the journal has lines to apply
    before = files_of(path)
    assert count_notes(path, AGENT) == expected == parsed_counts(path) == (3, 4)
    assert files_of(path) == before


async def test_what_only_an_open_settles_is_not_counted(path: Path) -> None:
    async with await InteractionStore.open(path, agent=AGENT) as store:
        await store.add("c1", "one")
        await store.add("c1", "two")
    journal = journal_path(path)
    with journal.open("ab") as torn:
        torn.write(b'{"op": "clear", "conv')
    assert count_notes(path, AGENT) is None  # the open cuts the torn line
    assert parsed_counts(path) == (1, 2)
    assert count_notes(path, AGENT) == (1, 2)
    header, *lines = journal.read_bytes().split(b"\n")
    stale = json.loads(header)
    stale["snapshot"] = "another"
    journal.write_bytes(json.dumps(stale).encode() + b"\n" + b"\n".join(lines))
    assert count_notes(path, AGENT) is None  # the open removes a stale journal
    assert count_notes(path, "bob@example.org") is None  # another agent's file


def note_values() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=4),
        st.just("\ud800"),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )


def a_document(changes: list[tuple[str, str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {
        "format": interaction_file.FORMAT_TAG,
        "version": 2,
        "agent": AGENT,
        "journal": None,
        "conversations": {
            "c1": [{"content": "a", "author": None, "created_at": 1.5}],
            "c2": [{"content": "b", "created_at": 2}, {"content": "c", "created_at": 3.0}],
            "c3": [],
        },
    }
    order = {"note": 0, "conversation": 1, "top": 2}  # the outer ones last: they replace
    for where, key, value in sorted(changes, key=lambda change: order[change[0]]):
        if where == "top":
            document[key] = value
        elif where == "conversation":
            document["conversations"][key] = value
        else:
            document["conversations"]["c2"][1][key] = value
    return document


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("top"),
                st.sampled_from(["format", "version", "agent", "journal", "conversations"]),
                note_values(),
            ),
            st.tuples(
                st.just("conversation"), st.sampled_from(["c2", "\ud800", "c9"]), note_values()
            ),
            st.tuples(
                st.just("note"), st.sampled_from(["content", "author", "created_at"]), note_values()
            ),
        ),
        max_size=3,
    )
)
def test_a_count_is_given_only_for_what_the_parser_accepts_and_is_its_count(
    tmp_path: Path, changes: list[tuple[str, str, Any]]
) -> None:
    folder = tmp_path / "case"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    path = folder / "alice_interactions.json"
    path.write_text(json.dumps(a_document(changes), allow_nan=True))  # \ud800 escaped
    counted = count_notes(path, AGENT)
    try:
        parsed: tuple[int, int] | None = parsed_counts(path)
    except SpadeMemoryError:
        parsed = None
    if counted is not None:
        assert counted == parsed


def test_a_time_is_a_finite_number(path: Path) -> None:
    for when, counted in ((math.inf, None), (True, None), (7, (1, 1)), (7.5, (1, 1))):
        document = a_document([])
        document["conversations"] = {"c": [{"content": "x", "created_at": when}]}
        path.write_text(json.dumps(document, allow_nan=True))
        assert count_notes(path, AGENT) == counted
        os.unlink(path)
