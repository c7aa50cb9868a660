"""The base-memory SQLite schema, as an ordered list of migrations.

Each migration is a list of SQL statements run inside one transaction. The
database records the version it has reached in ``PRAGMA user_version``. To
change the schema, append a migration; never edit one that has shipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration"]


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of the schema: from ``version - 1`` to ``version``."""

    version: int
    description: str
    statements: Sequence[str]


_V1 = (
    # Key/value facts about the database: owner agent, generations, counters.
    """CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    """CREATE TABLE categories (
        name        TEXT PRIMARY KEY,
        description TEXT,
        created_at  REAL NOT NULL
    )""",
    # AUTOINCREMENT: a deleted memory's id is never reused, so a stale vector in a
    # FAISS snapshot can never be mistaken for a newer memory.
    """CREATE TABLE memories (
        id                  INTEGER PRIMARY KEY AUTOINCREMENT,
        uid                 TEXT NOT NULL UNIQUE,
        category            TEXT NOT NULL,
        content             TEXT NOT NULL,
        context             TEXT,
        confidence          REAL NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
        importance          REAL NOT NULL CHECK (importance >= 0 AND importance <= 1),
        status              TEXT NOT NULL DEFAULT 'active',
        source_conversation TEXT,
        source_sender       TEXT,
        created_at          REAL NOT NULL,
        updated_at          REAL NOT NULL,
        last_accessed       REAL,
        access_count        INTEGER NOT NULL DEFAULT 0,
        metadata            TEXT NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX memories_by_category ON memories (status, category, created_at)",
    "CREATE INDEX memories_by_created ON memories (status, created_at)",
    # Pre-tokenised text (our tokenizer's output joined by spaces); rowid = memories.id.
    """CREATE VIRTUAL TABLE memories_fts USING fts5 (
        content_tokens, context_tokens, tokenize = 'ascii'
    )""",
    # Embedding vectors: the source of truth the FAISS index is a cache of.
    """CREATE TABLE embeddings (
        memory_id   INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
        fingerprint TEXT NOT NULL,
        dim         INTEGER NOT NULL,
        vector      BLOB NOT NULL,
        seq         INTEGER NOT NULL
    )""",
    "CREATE INDEX embeddings_by_seq ON embeddings (fingerprint, seq)",
    """CREATE TABLE agent_stats (
        agent          TEXT PRIMARY KEY,
        stores         INTEGER NOT NULL DEFAULT 0,
        updates        INTEGER NOT NULL DEFAULT 0,
        forgets        INTEGER NOT NULL DEFAULT 0,
        searches       INTEGER NOT NULL DEFAULT 0,
        last_store_at  REAL,
        last_search_at REAL
    )""",
)

MIGRATIONS: tuple[Migration, ...] = (Migration(1, "initial schema", _V1),)

SCHEMA_VERSION = MIGRATIONS[-1].version
