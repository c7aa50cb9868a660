"""The base-memory SQLite schema, as an ordered list of migrations.

Each migration is a list of SQL statements run inside one transaction. The
database records the version it has reached in ``PRAGMA user_version``. To
change the schema, append a migration; never edit one that has shipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .scope_filter import same_scope

__all__ = [
    "BACKUP_SEQUENCE_KEY",
    "CLAIMS_KEY",
    "GRAPH_VERSION_KEY",
    "INDEX_TEXT_VERSION_KEY",
    "LAST_RUN_KEY",
    "LOST_KEY",
    "MIGRATIONS",
    "NOTES_KEY",
    "SCHEDULED_JOBS",
    "SCHEMA_VERSION",
    "Migration",
]

GRAPH_VERSION_KEY = "graph_version"
"""The ``meta`` row naming the extraction version the stored graph was made with."""

INDEX_TEXT_VERSION_KEY = "index_text_version"
"""The ``meta`` row naming the keyword-index text version the stored rows were made with."""

CLAIMS_KEY = "claims_to_settle"
"""The ``meta`` row saying every functional claim is to be settled in its scope on
the next open (set by the migration to v13)."""

LOST_KEY = "memories_lost_at"
"""The ``meta`` row of a database made empty in place of a lost one (``start_empty``):
when (Unix seconds). While it stays empty, each open says its memories were lost."""

NOTES_KEY = "notes_file"
"""The ``meta`` row saying the agent's notes file was written ("1") and must be there."""

LAST_RUN_KEY = "maintenance:{}_at"
"""The ``meta`` row of when a scheduled job (``.format(job)``) last ran, as JSON seconds."""

BACKUP_SEQUENCE_KEY = "backup_sequence"
"""The ``meta`` row of the number the last backup of the database took (the order
backups were taken in: :mod:`spade_memory.storage.backup_sequence`)."""

SCHEDULED_JOBS = ("expiry", "decay", "consolidation", "backup")
"""The maintenance jobs run on a schedule, whose last runs are kept."""


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

_V2 = (
    # Graph nodes: one row per canonical entity key ("alice", "date:2024-05-01").
    """CREATE TABLE graph_nodes (
        id         INTEGER PRIMARY KEY,
        key        TEXT NOT NULL UNIQUE,
        type       TEXT NOT NULL,
        value      TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    # Edges between nodes, each from one memory (deleted with it).
    """CREATE TABLE graph_edges (
        id        INTEGER PRIMARY KEY,
        source_id INTEGER NOT NULL REFERENCES graph_nodes (id),
        target_id INTEGER NOT NULL REFERENCES graph_nodes (id),
        relation  TEXT NOT NULL,
        weight    REAL NOT NULL DEFAULT 1.0,
        memory_id INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE
    )""",
    "CREATE INDEX graph_edges_by_source ON graph_edges (source_id, target_id)",
    "CREATE INDEX graph_edges_by_target ON graph_edges (target_id, source_id)",
    "CREATE INDEX graph_edges_by_memory ON graph_edges (memory_id)",
    # One graph entry per memory that names at least one entity.
    """CREATE TABLE graph_entries (
        memory_id     INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
        summary       TEXT NOT NULL,
        relation_type TEXT,
        updated_at    REAL NOT NULL
    )""",
    """CREATE TABLE graph_entry_nodes (
        memory_id INTEGER NOT NULL REFERENCES graph_entries (memory_id) ON DELETE CASCADE,
        node_id   INTEGER NOT NULL REFERENCES graph_nodes (id),
        PRIMARY KEY (memory_id, node_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX graph_entry_nodes_by_node ON graph_entry_nodes (node_id, memory_id)",
    # Substring search over entry summaries; rowid = graph_entries.memory_id.
    "CREATE VIRTUAL TABLE graph_entries_fts USING fts5 (summary, tokenize = 'trigram')",
    # One vector per graph entry (the FAISS graph index is a cache of these).
    """CREATE TABLE graph_embeddings (
        memory_id   INTEGER PRIMARY KEY REFERENCES graph_entries (memory_id) ON DELETE CASCADE,
        fingerprint TEXT NOT NULL,
        dim         INTEGER NOT NULL,
        vector      BLOB NOT NULL
    )""",
    # Memory atoms: fine-grained facts split from a memory, each with a lifetime.
    """CREATE TABLE memory_atoms (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        memory_id      INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
        position       INTEGER NOT NULL,
        text           TEXT NOT NULL,
        key            TEXT NOT NULL,
        type           TEXT NOT NULL,
        status         TEXT NOT NULL DEFAULT 'active',
        subject        TEXT,
        predicate      TEXT,
        object         TEXT,
        importance     REAL NOT NULL,
        ttl_seconds    REAL NOT NULL,
        reinforcements INTEGER NOT NULL DEFAULT 0,
        created_at     REAL NOT NULL,
        reinforced_at  REAL NOT NULL,
        expires_at     REAL NOT NULL,
        superseded_by  INTEGER REFERENCES memory_atoms (id) ON DELETE SET NULL
    )""",
    "CREATE INDEX memory_atoms_by_memory ON memory_atoms (memory_id, position)",
    "CREATE INDEX memory_atoms_by_key ON memory_atoms (key, status)",
    # Partial: most atoms make no claim and supersede nothing; their writes skip these.
    "CREATE INDEX memory_atoms_by_claim ON memory_atoms (subject, predicate, status) "
    "WHERE subject IS NOT NULL",
    "CREATE INDEX memory_atoms_by_superseder ON memory_atoms (superseded_by) "
    "WHERE superseded_by IS NOT NULL",
)

_V3 = (
    # How many graph entries name each node, kept with the node (written by the same
    # upsert that writes the node), so that weighing an entity reads one row.
    "ALTER TABLE graph_nodes ADD COLUMN entries INTEGER NOT NULL DEFAULT 0",
    "UPDATE graph_nodes SET entries = "
    "(SELECT count(*) FROM graph_entry_nodes WHERE node_id = graph_nodes.id)",
)

_V4 = (
    # Edges of one node newest first straight from the index (no sort of a node's
    # thousands of edges), and the few typed ones of a node apart: the graph route
    # follows only those from an entity that is named everywhere.
    "DROP INDEX graph_edges_by_source",
    "DROP INDEX graph_edges_by_target",
    "CREATE INDEX graph_edges_by_source ON graph_edges (source_id)",
    "CREATE INDEX graph_edges_by_target ON graph_edges (target_id)",
    "CREATE INDEX graph_edges_typed_by_source ON graph_edges (source_id) "
    "WHERE relation != 'related_to'",
    "CREATE INDEX graph_edges_typed_by_target ON graph_edges (target_id) "
    "WHERE relation != 'related_to'",
)

_V5 = (
    # The previous turn of a memory's conversation: the newest memory of the same
    # source_conversation stored before it (set in the inserting transaction), so a
    # search finds a hit's neighbouring turns however stores interleave. Existing
    # rows are linked in their order of insertion within their conversation.
    "ALTER TABLE memories ADD COLUMN previous_id INTEGER",
    "CREATE INDEX memories_by_conversation ON memories (source_conversation) "
    "WHERE source_conversation IS NOT NULL",
    "UPDATE memories SET previous_id = (SELECT max(p.id) FROM memories AS p "
    "WHERE p.source_conversation = memories.source_conversation AND p.id < memories.id) "
    "WHERE source_conversation IS NOT NULL",
    "CREATE INDEX memories_by_previous ON memories (previous_id) WHERE previous_id IS NOT NULL",
)

_V6 = (
    # Scopes: who told a memory and who may see it besides the agent (models.Scope).
    # Existing memories become global: everyone the agent talked with saw them.
    "ALTER TABLE memories ADD COLUMN owner TEXT",
    "ALTER TABLE memories ADD COLUMN visibility TEXT NOT NULL DEFAULT 'global' "
    "CHECK (visibility IN ('global', 'private', 'shared', 'conversation'))",
    # The readers of a shared memory besides its owner (a viewer's filter probes
    # (memory, reader) by primary key).
    """CREATE TABLE memory_readers (
        memory_id INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
        reader    TEXT NOT NULL,
        PRIMARY KEY (memory_id, reader)
    ) WITHOUT ROWID""",
    "CREATE INDEX memory_readers_by_reader ON memory_readers (reader)",
    # What one owner told, and the few memories that are not global: the filters'
    # "is there anything a viewer may not see" and per-owner reads.
    "CREATE INDEX memories_by_owner ON memories (owner) WHERE owner IS NOT NULL",
    "CREATE INDEX memories_not_global ON memories (visibility) WHERE visibility != 'global'",
    # Every column a viewer's filter reads, by id: a route joining its candidates to
    # memories for that filter reads this index, never the (large) rows.
    "CREATE INDEX memories_scope ON memories "
    "(id, status, visibility, owner, category, source_conversation)",
)

_V7 = (
    # The key under which a stored copy of a memory is found (text.content_key: its
    # content and context with case, width, punctuation and spacing set aside), so
    # that storing it again reinforces the memory instead of adding a copy. The SQL
    # function is registered by the migration runner; older memories get keys here.
    "ALTER TABLE memories ADD COLUMN content_key BLOB",
    "UPDATE memories SET content_key = spade_content_key(content, context)",
    "CREATE INDEX memories_by_content_key ON memories (content_key)",
)

_V8 = (
    # A checksum of each memory's row, written with it by per-connection triggers
    # (storage/checksums.py): damage inside a row that SQLite's checks cannot see
    # is found on open. seq grows with every write, so an open verifies only the
    # rows written since the last verified one. Existing rows are summed here.
    """CREATE TABLE memory_checksums (
        memory_id INTEGER PRIMARY KEY,
        seq       INTEGER NOT NULL,
        digest    BLOB NOT NULL
    )""",
    "CREATE INDEX memory_checksums_by_seq ON memory_checksums (seq)",
    "INSERT INTO memory_checksums (memory_id, seq, digest) SELECT id, id, "
    "spade_memory_digest(uid, category, content, context, created_at, "
    "source_conversation, source_sender, metadata) FROM memories",
)

_V9 = (
    # The conversation store: each conversation the agent takes part in, with the
    # partner it talks with, its revision (a reset starts the next) and its cursor:
    # the id of the last message formed into memories (committed with them).
    """CREATE TABLE conversations (
        id              INTEGER PRIMARY KEY,
        conversation_id TEXT NOT NULL UNIQUE,
        peer            TEXT NOT NULL,
        revision        INTEGER NOT NULL DEFAULT 1,
        formed_through  INTEGER NOT NULL DEFAULT 0,
        created_at      REAL NOT NULL,
        updated_at      REAL NOT NULL
    )""",
    # Its messages; AUTOINCREMENT, so a cursor never meets a reused id.
    """CREATE TABLE conversation_messages (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        revision   INTEGER NOT NULL,
        role       TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        sender     TEXT NOT NULL,
        text       TEXT NOT NULL,
        at         REAL NOT NULL,
        message_id TEXT
    )""",
    "CREATE INDEX conversation_messages_by_session ON conversation_messages (session_id, id)",
    # An XMPP message delivered twice is kept once.
    "CREATE UNIQUE INDEX conversation_messages_by_xmpp_id "
    "ON conversation_messages (session_id, message_id) WHERE message_id IS NOT NULL",
    # The messages each formed memory came from (formed = 1), or that told a memory
    # again (formed = 0). Kept when retention drops the message itself, so that
    # forgetting its conversation still finds what was formed from it. A source
    # imported after retention had dropped its message has the conversation's id,
    # negated, as its message.
    """CREATE TABLE memory_sources (
        memory_id  INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
        message_id INTEGER NOT NULL,
        session_id INTEGER NOT NULL,
        formed     INTEGER NOT NULL CHECK (formed IN (0, 1)),
        PRIMARY KEY (memory_id, message_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX memory_sources_by_session ON memory_sources (session_id, memory_id)",
)

_V10 = (
    # Memories whose graph rows and atoms are still to be derived: marked in the
    # transaction that inserts the memory, cleared in the one that writes them
    # (engine/derivation.py), so a crash in between derives them on the next open.
    # The entities and relations a caller named (JSON), and when the atoms start
    # their lives (NULL: the memory's created_at). Existing memories are derived.
    """CREATE TABLE derive_pending (
        memory_id  INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
        entities   TEXT,
        relations  TEXT,
        graph_time REAL
    )""",
)

_V11 = (
    # A turn of a conversation is embedded with the turn before it when whoever
    # sees it sees that turn too (storage/embeddings.py, CONTEXT_JOIN as it was
    # here): the vectors of such turns are dropped and made again in the background.
    "DELETE FROM embeddings WHERE memory_id IN (SELECT m.id FROM memories AS m "
    "JOIN memories AS p ON p.id = m.previous_id AND p.category = m.category "
    "AND p.owner IS m.owner AND p.visibility = m.visibility AND m.visibility != 'shared')",
)

_V12 = (
    # A memory's content key was kept from its first text when an update or a merge
    # changed the text (memory_writes.refresh_content_key now keys it anew): every
    # memory is keyed under its text as it is.
    "UPDATE memories SET content_key = spade_content_key(content, context)",
)

_V13 = (
    # The entities and relations a caller named for a memory (JSON, as derive_pending
    # holds them), kept as long as the memory: a graph rebuild or repair extracts
    # its graph again from its text and these (storage/given_graph.py). Those still
    # pending are kept; those of memories derived before are gone with their marks.
    """CREATE TABLE memory_given (
        memory_id INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
        entities  TEXT,
        relations TEXT
    )""",
    # When a memory still to be derived was last told (NULL: its creation), which
    # orders its claims (an import's memory: before the import).
    "ALTER TABLE derive_pending ADD COLUMN told_at REAL",
    # a memory told again before it was derived: graph_time held when
    "UPDATE derive_pending SET told_at = graph_time WHERE graph_time IS NOT NULL "
    "AND graph_time > (SELECT created_at FROM memories WHERE id = derive_pending.memory_id)",
    "INSERT INTO memory_given (memory_id, entities, relations) "
    "SELECT memory_id, entities, relations FROM derive_pending "
    "WHERE entities IS NOT NULL OR relations IS NOT NULL",
    # Claims are settled in their scope now (storage/graph.py settle_claims): an atom
    # an older version superseded by a claim of another scope (read as standing all
    # along) stands again, and every claim is settled in its scope on the next open
    # (CLAIMS_KEY).
    "UPDATE memory_atoms SET status = 'active', superseded_by = NULL "
    "WHERE status = 'superseded' AND EXISTS (SELECT 1 FROM memory_atoms AS s "
    "JOIN memories AS sm ON sm.id = s.memory_id JOIN memories AS am "
    "ON am.id = memory_atoms.memory_id WHERE s.id = memory_atoms.superseded_by "
    f"AND NOT {same_scope('sm', 'am')})",
    f"INSERT OR REPLACE INTO meta (key, value) SELECT '{CLAIMS_KEY}', '1' "
    "WHERE EXISTS (SELECT 1 FROM memory_atoms)",
)

_V14 = (
    # The uids a memory stands for besides its own: an imported memory that copied
    # one held here (it reinforced that one) and a memory a consolidation merged
    # into another. An import finds them held, so importing the same export again
    # changes nothing (it told the copy again on every run).
    """CREATE TABLE memory_aliases (
        uid       TEXT PRIMARY KEY,
        memory_id INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE
    ) WITHOUT ROWID""",
    "CREATE INDEX memory_aliases_by_memory ON memory_aliases (memory_id)",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _V1),
    Migration(2, "graph nodes, edges, entries and memory atoms", _V2),
    Migration(3, "entry counts of graph nodes", _V3),
    Migration(4, "graph edge indexes for the newest and the typed edges of a node", _V4),
    Migration(5, "the previous turn of each memory of a conversation", _V5),
    Migration(6, "scopes: the owner and visibility of each memory, readers of shared ones", _V6),
    Migration(7, "the content key of each memory, to find stored copies", _V7),
    Migration(8, "a checksum of each memory's row", _V8),
    Migration(9, "the conversation store and the sources of formed memories", _V9),
    Migration(10, "memories whose graph and atoms are still to be derived", _V10),
    Migration(11, "turns of a conversation embedded with the turn before them", _V11),
    Migration(12, "content keys of memories whose text changed", _V12),
    Migration(13, "the entities and relations named for a memory; claims settled in scope", _V13),
    Migration(14, "uids a memory stands for besides its own (imported copies, merges)", _V14),
)

SCHEMA_VERSION = MIGRATIONS[-1].version
