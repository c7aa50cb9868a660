"""Backup names and numbers: every name a backup is given is listed back as given, names
of older versions still parse, and the number a backup takes only grows."""

from __future__ import annotations

import calendar
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.identity import AgentIdentity
from spade_memory.storage.backup_files import (
    backup_name,
    last_sequence,
    list_backups,
    notes_backup_of,
)
from spade_memory.storage.backup_sequence import recorded_sequence, take_sequence
from spade_memory.storage.schema import BACKUP_SEQUENCE_KEY

ALICE = AgentIdentity.of("alice@localhost")
BOB = AgentIdentity.of("bob@localhost")
LABEL = ALICE.database_name.removesuffix(".db")

times = st.integers(min_value=0, max_value=calendar.timegm((9999, 12, 31, 23, 59, 59)))


@settings(max_examples=200, deadline=None)
@given(
    when=times,
    sequence=st.integers(min_value=1, max_value=10**12),
    version=st.one_of(st.none(), st.integers(min_value=1, max_value=99)),
    pre_restore=st.booleans(),
)
def test_every_backup_name_is_listed_back_as_given(
    when: int, sequence: int, version: int | None, pre_restore: bool
) -> None:
    name = backup_name(LABEL, when, sequence, version=version, pre_restore=pre_restore)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "backup").mkdir()
        (root / "backup" / name).write_bytes(b"")
        [info] = list_backups(root, stem=ALICE.stem)
        assert (info.stem, info.created_at, info.sequence) == (ALICE.stem, when, sequence)
        kind = "pre-restore" if pre_restore else "migration" if version is not None else "manual"
        assert info.kind == kind
        assert last_sequence(root / "backup", LABEL) == sequence
        assert list_backups(root, stem=BOB.stem) == []
        notes = notes_backup_of(info.path).name
        assert notes.startswith(f"{ALICE.stem}_interactions.") and notes.endswith(".json")
        assert f".s{sequence}." in notes and ("pre-restore" in notes) == pre_restore


def test_names_of_older_versions_are_listed_by_time_before_numbered_ones(tmp_path: Path) -> None:
    folder = tmp_path / "backup"
    folder.mkdir()
    names = [
        f"{LABEL}.20240101T000000.db",
        f"{LABEL}.20240101T000000-2.db",
        f"{LABEL}.v3.20240102T000000.db",
        f"{LABEL}.20240103T000000.pre-restore.db",
        f"{LABEL}.20990101T000000.db",  # a clock far ahead: still before the numbered ones
        backup_name(LABEL, 0, 1),
        backup_name(LABEL, 0, 2, version=14),
        backup_name(LABEL, 0, 10, pre_restore=True),
    ]
    for name in reversed(names):
        (folder / name).write_bytes(b"")
    listed = list_backups(tmp_path)
    assert [info.path.name for info in listed] == names
    assert [info.sequence for info in listed] == [None] * 5 + [1, 2, 10]
    assert last_sequence(folder, LABEL) == 10
    assert last_sequence(folder, "not_a_database") == 0
    assert last_sequence(tmp_path / "none", LABEL) == 0


def test_a_backup_number_grows_above_the_counter_and_the_backups_there(tmp_path: Path) -> None:
    database = tmp_path / "memory.db"
    connection = sqlite3.connect(database, isolation_level=None)
    try:
        connection.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        assert recorded_sequence(database) == 0
        taken = [take_sequence(connection, after=after) for after in (0, 0, 9, 3, 0)]
        assert taken == [1, 2, 10, 11, 12]  # never back, whatever the folder says
        assert not connection.in_transaction
        assert recorded_sequence(database) == 12
        connection.execute(
            "UPDATE meta SET value = 'not a number' WHERE key = ?", (BACKUP_SEQUENCE_KEY,)
        )
        assert recorded_sequence(database) == 0
        assert take_sequence(connection, after=12) == 13
    finally:
        connection.close()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    assert recorded_sequence(garbage) == 0
