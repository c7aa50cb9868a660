"""A new database built in one step has exactly the schema the migrations give."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from spade_memory import MemoryConfig, MemoryManager
from spade_memory.config import StorageConfig
from spade_memory.storage import migrations
from spade_memory.storage.base import BaseMemoryStore
from spade_memory.storage.migrations import create_database, migrate
from spade_memory.storage.schema import SCHEMA_VERSION


def schema_of(path: Path) -> tuple[list[tuple[str, ...]], int, str]:
    db = sqlite3.connect(path)
    try:
        master = db.execute(
            "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master ORDER BY name"
        ).fetchall()
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        journal = str(db.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        db.close()
    return master, version, journal


async def test_created_schema_equals_the_migrated_one(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    async with aiosqlite.connect(migrated, isolation_level=None) as db:
        await db.execute("PRAGMA journal_mode = WAL")
        assert await migrate(db, backup_dir=None, label="migrated") == SCHEMA_VERSION
    created = tmp_path / "created.db"
    assert create_database(created)
    master, version, journal = schema_of(created)
    assert (master, version, journal) == schema_of(migrated)
    assert version == SCHEMA_VERSION and journal == "wal"
    assert len([row for row in master if row[0] == "table"]) >= 10
    assert sorted(os.listdir(tmp_path)) == ["created.db", "migrated.db"]  # nothing left over


async def test_a_new_store_is_created_with_its_owner_and_opened_as_usual(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = await BaseMemoryStore.open(
        path,
        agent="a@x",
        storage=StorageConfig(),
        categories=("fact", "preference"),
        now=12.5,
        initial_meta={"format_note": "1"},
    )
    try:
        assert store.created
        rows = await store.fetchall("SELECT key, value FROM meta ORDER BY key")
        meta = {str(key): str(value) for key, value in rows}
        assert meta["agent"] == "a@x" and meta["format_note"] == "1" and len(meta["instance"]) == 32
        categories = await store.fetchall("SELECT name, created_at FROM categories ORDER BY name")
        assert [tuple(row) for row in categories] == [("fact", 12.5), ("preference", 12.5)]
        assert await store.fetchall("SELECT agent FROM agent_stats") == [("a@x",)]
    finally:
        await store.aclose()
    again = await BaseMemoryStore.open(
        path, agent="a@x", storage=StorageConfig(), initial_meta={"format_note": "2"}
    )
    try:
        assert not again.created
        rows = await again.fetchall("SELECT value FROM meta WHERE key = 'format_note'")
        assert rows == [("1",)]  # written only when the database was created
    finally:
        await again.aclose()


async def test_the_migrated_path_writes_the_same_first_rows(tmp_path: Path) -> None:
    store = await BaseMemoryStore.open(
        None, agent="a@x", storage=StorageConfig(), categories=("fact",), initial_meta={"k": "v"}
    )
    try:
        assert not store.created
        rows = await store.fetchall("SELECT key FROM meta ORDER BY key")
        assert [str(row[0]) for row in rows] == ["agent", "instance", "k"]
    finally:
        await store.aclose()


def test_an_existing_database_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    assert create_database(path, rows=[("INSERT INTO meta VALUES (?, ?)", [("who", "first")])])
    before = path.read_bytes()
    assert not create_database(path, rows=[("INSERT INTO meta VALUES (?, ?)", [("who", "2nd")])])
    assert path.read_bytes() == before
    # A log beside a missing file: not a new database either; left to the usual open.
    other = tmp_path / "b.db"
    other.with_name("b.db-wal").write_bytes(b"x")
    assert not create_database(other)
    assert not other.exists()


def test_a_race_lost_leaves_the_winner_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.db"
    real_build = migrations._build

    def build_then_lose(private: Path, *args: object) -> None:
        real_build(private, *args)  # type: ignore[arg-type]
        path.write_bytes(b"another process won")

    monkeypatch.setattr(migrations, "_build", build_then_lose)
    assert not create_database(path)
    assert path.read_bytes() == b"another process won"
    assert sorted(os.listdir(tmp_path)) == ["a.db"]


def test_stale_private_files_are_removed(tmp_path: Path) -> None:
    stale = tmp_path / ".a.db.123.abc.new"
    fresh = tmp_path / ".a.db.456.def.new"
    stale.write_bytes(b"left by a crash")
    fresh.write_bytes(b"another process is building")
    old = time.time() - 3_600
    os.utime(stale, (old, old))
    assert create_database(tmp_path / "a.db")
    assert not stale.exists() and fresh.exists()


async def test_a_new_agent_needs_no_graph_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rebuilt: list[str] = []

    async def rebuild(self: MemoryManager) -> None:
        rebuilt.append(self.jid)

    monkeypatch.setattr(MemoryManager, "rebuild_graph", rebuild)
    config = MemoryConfig(root=tmp_path, embedder="hashing")
    async with await MemoryManager.open("new@localhost", config) as manager:
        await manager.store("Alice met Bob in Paris")
    async with await MemoryManager.open("new@localhost", config) as manager:
        assert [m.content for m in await manager.list()] == ["Alice met Bob in Paris"]
    assert rebuilt == []


def test_a_folder_is_listed_once_for_many_creations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed: list[str] = []
    real = os.scandir

    def scandir(path: Any) -> Any:
        listed.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(migrations.os, "scandir", scandir)
    for number in range(5):
        assert create_database(tmp_path / f"agent{number}.db")
    assert listed == [os.fspath(tmp_path)]
