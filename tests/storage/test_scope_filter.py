"""The visibility rule as SQL: a filtered read returns exactly what ``Viewer.sees`` accepts."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.models import VISIBILITIES, Scope, Viewer
from spade_memory.storage.memory_rows import COLUMNS, IndexedText, NewMemory, row_to_memory
from spade_memory.storage.memory_writes import insert_rows
from spade_memory.storage.migrations import schema_functions, schema_script
from spade_memory.storage.schema import MIGRATIONS
from spade_memory.storage.scope_filter import same_scope, told_in_one_scope, visible_clause
from spade_memory.storage.sql import status_category_filter

JIDS = ("alice@x.org", "bob@x.org", "carol@x.org", "dave@x.org")
CATEGORIES = ("fact", "preference", "private")
CONVERSATIONS = (None, "c1", "c2")

# Any owner and visibility, even those the input checks refuse (a private memory
# without owner): the SQL must agree with the rule on every row. Only a shared memory
# has readers (the input checks refuse them on others).
scopes = st.builds(
    lambda owner, visibility, readers: Scope(
        owner=owner,
        visibility=visibility,
        shared_with=readers if visibility == "shared" else frozenset(),
    ),
    st.sampled_from((None, *JIDS[:3])),
    st.sampled_from(VISIBILITIES),
    st.frozensets(st.sampled_from(JIDS[:3]), max_size=3),
)
memories = st.tuples(
    scopes, st.sampled_from(CATEGORIES), st.sampled_from(CONVERSATIONS), st.booleans()
)
viewers = st.builds(
    Viewer,
    jid=st.sampled_from(JIDS),
    conversation_id=st.sampled_from(CONVERSATIONS),
    categories=st.none() | st.frozensets(st.sampled_from(CATEGORIES)),
    may_change_global=st.booleans(),
)


@pytest.fixture(scope="module")
def db() -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(":memory:", isolation_level=None)
    schema_functions(connection)
    connection.executescript(schema_script(MIGRATIONS))
    connection.execute("PRAGMA foreign_keys = ON")
    try:
        yield connection
    finally:
        connection.close()


def _fill(db: sqlite3.Connection, items: list[tuple[Scope, str, str | None, bool]]) -> None:
    db.execute("DELETE FROM memories")
    rows = [
        (
            NewMemory(
                uid=f"u{position}",
                category=category,
                content=f"memory {position}",
                context=None,
                confidence=1.0,
                importance=0.5,
                created_at=float(position),
                source_conversation=conversation,
                status="active" if active else "archived",
                scope=scope,
            ),
            IndexedText("memory"),
            "{}",
        )
        for position, (scope, category, conversation, active) in enumerate(items)
    ]
    db.execute("BEGIN")
    insert_rows(rows, "agent@x.org", 0.0, db)
    db.execute("COMMIT")


@settings(max_examples=150, deadline=None)
@given(st.lists(memories, max_size=12), st.lists(viewers, min_size=1, max_size=4))
def test_the_sql_filter_is_the_rule(
    db: sqlite3.Connection,
    items: list[tuple[Scope, str, str | None, bool]],
    looking: list[Viewer],
) -> None:
    _fill(db, items)
    stored = [row_to_memory(row) for row in db.execute(f"SELECT {COLUMNS} FROM memories")]
    assert [m.scope for m in stored] == [scope for scope, *_ in items]  # read back whole
    for viewer in looking:
        where, params = visible_clause(viewer)
        found = {row[0] for row in db.execute(f"SELECT id FROM memories WHERE {where}", params)}
        assert found == {m.id for m in stored if viewer.sees(m)}
        # aliased, and with the status filter, as the routes use it
        where, params = status_category_filter(None, ("active",), "m.", viewer)
        found = {
            row[0] for row in db.execute(f"SELECT m.id FROM memories AS m WHERE {where}", params)
        }
        assert found == {m.id for m in stored if m.status == "active" and viewer.sees(m)}
        # never NULL: its negation is the complement
        where, params = visible_clause(viewer)
        hidden = {
            row[0] for row in db.execute(f"SELECT id FROM memories WHERE NOT {where}", params)
        }
        assert hidden == {m.id for m in stored if not viewer.sees(m)}


def test_no_viewer_filters_nothing() -> None:
    assert visible_clause(None) == ("1", [])
    assert status_category_filter(None, None, viewer=None) == ("1", [])


@settings(max_examples=100, deadline=None)
@given(st.lists(memories, min_size=1, max_size=8))
def test_one_scope_in_python_is_the_sql_rule(
    db: sqlite3.Connection, items: list[tuple[Scope, str, str | None, bool]]
) -> None:
    _fill(db, items)
    stored = {row[0]: row_to_memory(row) for row in db.execute(f"SELECT {COLUMNS} FROM memories")}
    pairs = {
        (int(a), int(b))
        for a, b in db.execute(
            f"SELECT a.id, b.id FROM memories AS a, memories AS b WHERE {same_scope('a', 'b')}"
        )
    }
    assert pairs == {
        (a.id, b.id) for a in stored.values() for b in stored.values() if told_in_one_scope(a, b)
    }
