"""Counting the memories of a database file without changing any file: as a killed
writer left it (log with or without its index), as a clean close left it, and while a
writer in another process keeps committing."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from spade_memory.storage.file_peek import count_memories_readonly

ROWS = 300

# A writer in WAL mode that never checkpoints; it stops as told by its argument.
WRITER = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("CREATE TABLE memories (id INTEGER PRIMARY KEY, content TEXT)")
for number in range(int(sys.argv[2])):
    db.execute("INSERT INTO memories (content) VALUES (?)", (f"memory {number} " * 20,))
if sys.argv[3] == "close":
    db.close()
elif sys.argv[3] == "kill":
    os._exit(0)
else:  # keep writing until told to stop
    print("ready", flush=True)
    number = 0
    while not sys.stdin.readline().strip():
        db.execute("INSERT INTO memories (content) VALUES (?)", (f"late {number}",))
        number += 1
        print(number, flush=True)
"""


def _write(database: Path, how: str) -> None:
    subprocess.run([sys.executable, "-c", WRITER, str(database), str(ROWS), how], check=True)


def _files(folder: Path) -> dict[str, tuple[str, int]]:
    return {
        path.name: (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for path in sorted(folder.iterdir())
    }


@pytest.mark.parametrize("index", ["with its index", "without its index"])
def test_a_log_left_by_a_killed_writer_is_read_and_left_alone(tmp_path: Path, index: str) -> None:
    database = tmp_path / "agent_base_memory.db"
    _write(database, "kill")
    shm = database.with_name(database.name + "-shm")
    if index == "without its index":
        shm.unlink()
    wal = database.with_name(database.name + "-wal")
    assert wal.stat().st_size > 0  # every row is in the log, none in the file yet
    before = _files(tmp_path)
    assert count_memories_readonly(database) == ROWS
    assert _files(tmp_path) == before


def test_a_cleanly_closed_database_is_read_and_left_alone(tmp_path: Path) -> None:
    database = tmp_path / "agent_base_memory.db"
    _write(database, "close")
    before = _files(tmp_path)
    assert set(before) == {database.name}
    assert count_memories_readonly(database) == ROWS
    assert _files(tmp_path) == before


def test_a_running_writer_is_read_as_committed(tmp_path: Path) -> None:
    database = tmp_path / "agent_base_memory.db"
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, str(database), str(ROWS), "run"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as writer:
        assert writer.stdin is not None and writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        for _ in range(5):
            writer.stdin.write("\n")
            writer.stdin.flush()
            committed = ROWS + int(writer.stdout.readline())
            assert count_memories_readonly(database) == committed
        writer.stdin.write("stop\n")
        writer.stdin.flush()
    assert writer.returncode == 0


def test_an_unreadable_file_gives_none_and_is_not_changed(tmp_path: Path) -> None:
    database = tmp_path / "agent_base_memory.db"
    database.write_bytes(b"not a database" * 100)
    before = _files(tmp_path)
    assert count_memories_readonly(database) is None
    assert _files(tmp_path) == before
