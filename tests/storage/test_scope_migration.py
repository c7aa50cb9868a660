"""Schema v6 (scopes) on an existing v5 database: backed up first, every memory global."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from factories import UNDO_SCOPES

from spade_memory import MemoryConfig, MemoryManager, Scope, Viewer
from spade_memory.storage.schema import SCHEMA_VERSION

AGENT = "agent@x.org"


def _schema(path: Path) -> set[tuple[str, str]]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall()
    return {(str(name), " ".join(str(sql).split())) for name, sql in rows}


async def test_a_v5_database_migrates_with_every_memory_global(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None)
    async with await MemoryManager.open(AGENT, config) as memory:
        stored = [await memory.store(f"Fact number {n} about Lisbon") for n in range(3)]
    (database,) = tmp_path.glob("*_base_memory.db")
    fresh = _schema(database)
    with sqlite3.connect(database) as db:
        for statement in UNDO_SCOPES:
            db.execute(statement)
    assert "memory_readers" not in {name for name, _ in _schema(database)}
    async with await MemoryManager.open(AGENT, config) as memory:
        listed = await memory.list()
        assert sorted(m.id for m in listed) == [m.id for m in stored]
        assert all(m.scope == Scope() for m in listed)
        # global: everyone the agent talks with still sees them
        found = await memory.search("Lisbon", limit=5, viewer=Viewer(jid="bob@x.org"))
        assert len(found) == 3
        secret = await memory.store("Her code is 4711", scope=Scope.private("alice@x.org"))
        assert (await memory.get(secret.id)).scope == Scope.private("alice@x.org")
    assert _schema(database) == fresh  # as a database created at v6
    assert len(list((tmp_path / "backup").glob(f"{database.stem}.v5.*.db"))) == 1
    with sqlite3.connect(database) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        with pytest.raises(sqlite3.IntegrityError):
            db.execute("UPDATE memories SET visibility = 'everyone' WHERE id = ?", (secret.id,))
