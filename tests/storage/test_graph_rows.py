"""The graph rows of a memory are what one plain statement per row writes.

``write_graph_rows`` counts an entry of a known node with an update by key (an
insert only for a new node) and finds an earlier atom of the same fact with a
status range instead of an ``IN`` list. Here the same random memories (shared
entity keys, a ``thing`` typed later, repeated facts, functional claims, atoms
lapsed, forgotten, expired or superseded, forgotten memories) are written once
with it and once with the plain statements it stands for, and every graph table
must come out the same.
"""

from __future__ import annotations

import random
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from spade_memory.config import StorageConfig
from spade_memory.storage import graph as graph_rows
from spade_memory.storage.base import BaseMemoryStore, IndexedText, NewMemory
from spade_memory.storage.graph import write_graph_rows
from spade_memory.storage.memory_writes import InsertTransaction
from spade_memory.text.atoms import ATOM_STATUSES
from spade_memory.text.graph import (
    AtomRecord,
    Entity,
    MemoryGraph,
    Relation,
)

Writer = Callable[[int, MemoryGraph, float, sqlite3.Connection], None]

_DAY = 86_400.0
_TABLES = {
    "graph_nodes": "SELECT * FROM graph_nodes ORDER BY id",
    "graph_edges": "SELECT * FROM graph_edges ORDER BY id",
    "graph_entries": "SELECT * FROM graph_entries ORDER BY memory_id",
    "graph_entry_nodes": "SELECT * FROM graph_entry_nodes ORDER BY memory_id, node_id",
    "graph_entries_fts": "SELECT rowid, summary FROM graph_entries_fts ORDER BY rowid",
    "memory_atoms": "SELECT * FROM memory_atoms ORDER BY id",
}


def _plain_rows(memory_id: int, graph: MemoryGraph, now: float, db: sqlite3.Connection) -> None:
    """The graph rows written the plain way: an upsert per node, IN-list look-ups."""
    if not (graph.entities or graph.atoms):
        return
    node_ids: dict[str, int] = {}
    for entity in graph.entities:
        if entity.key not in node_ids:
            row = db.execute(
                "INSERT INTO graph_nodes (key, type, value, created_at, entries) "
                "VALUES (?, ?, ?, ?, 1) ON CONFLICT (key) DO UPDATE SET "
                "entries = graph_nodes.entries + 1, type = CASE WHEN graph_nodes.type = "
                "'thing' THEN excluded.type ELSE graph_nodes.type END RETURNING id",
                (entity.key, entity.type, entity.value, now),
            ).fetchone()
            node_ids[entity.key] = int(row[0])
    db.executemany(
        "INSERT INTO graph_edges (source_id, target_id, relation, weight, memory_id) "
        "VALUES (?, ?, ?, ?, ?)",
        [
            (node_ids[r.source], node_ids[r.target], r.relation, float(r.weight), memory_id)
            for r in graph.relations
            if r.source in node_ids and r.target in node_ids and r.source != r.target
        ],
    )
    if node_ids:
        db.execute(
            "INSERT INTO graph_entries (memory_id, summary, relation_type, updated_at) "
            "VALUES (?, ?, ?, ?)",
            (memory_id, graph.summary, graph.relation_type, now),
        )
        db.execute(
            "INSERT INTO graph_entries_fts (rowid, summary) VALUES (?, ?)",
            (memory_id, graph.summary),
        )
        db.executemany(
            "INSERT OR IGNORE INTO graph_entry_nodes (memory_id, node_id) VALUES (?, ?)",
            [(memory_id, node_id) for node_id in node_ids.values()],
        )
    live = "status IN ('active', 'dormant') AND expires_at + ttl_seconds * ? > ?"
    found: set[int] = set()
    for atom in graph.atoms:
        looks = [("key = ?", (atom.key,))]
        if atom.subject is not None and atom.predicate is not None and atom.object is not None:
            claim = (atom.subject, atom.predicate, atom.object)
            looks.append(("subject = ? AND predicate = ? AND object = ?", claim))
        for where, params in looks:
            row = db.execute(
                f"SELECT max(id) FROM memory_atoms WHERE {where} AND {live}",
                (*params, graph.dormant_fraction, now),
            ).fetchone()
            if row[0] is not None:
                found.add(int(row[0]))
    for atom_id in sorted(found):
        db.execute(
            "UPDATE memory_atoms SET reinforcements = reinforcements + 1, reinforced_at = ?, "
            "status = 'active', expires_at = ? + ttl_seconds * (1 + ? * (reinforcements + 1)) "
            "WHERE id = ?",
            (now, now, graph.reinforcement_factor, atom_id),
        )
    for atom in graph.atoms:
        db.execute(
            "INSERT INTO memory_atoms (memory_id, position, text, key, type, status, subject, "
            "predicate, object, importance, ttl_seconds, reinforcements, created_at, "
            "reinforced_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?, ?, ?, 0, ?, ?, ?)",
            (
                *(memory_id, atom.position, atom.text, atom.key, atom.type),
                *(atom.subject, atom.predicate, atom.object, atom.importance, atom.ttl_seconds),
                *(now, now, now + atom.ttl_seconds),
            ),
        )
    # the claim told last stands (every memory here is of one scope)
    claims = [
        (atom.subject, atom.predicate)
        for atom in graph.atoms
        if atom.functional and atom.subject and atom.predicate and atom.object
    ]
    for subject, predicate in dict.fromkeys(claims):
        standing = db.execute(
            "SELECT id, memory_id, object FROM memory_atoms WHERE subject = ? AND predicate = ? "
            "AND object IS NOT NULL AND status IN ('active', 'dormant') "
            "ORDER BY reinforced_at DESC, id DESC LIMIT 1",
            (subject, predicate),
        ).fetchone()
        if standing is None:
            continue
        db.execute(
            "UPDATE memory_atoms SET status = 'superseded', superseded_by = ? "
            "WHERE subject = ? AND predicate = ? AND object != ? AND memory_id != ? "
            "AND status IN ('active', 'dormant')",
            (standing[0], subject, predicate, standing[2], standing[1]),
        )


def _random_graph(rng: random.Random) -> MemoryGraph:
    keys = rng.sample(["alice", "bob", "acme", "paris", "berlin", "hiking", "team x"], 4)
    entities = [
        Entity(key=key, type=rng.choice(["thing", "name", "place", "thing"]), value=key.title())
        for key in keys[: rng.randint(0, 4)]
    ]
    if entities and rng.random() < 0.3:
        entities.append(Entity(key=entities[0].key, type="organization", value="again"))
    relations = [
        Relation(
            rng.choice(keys), rng.choice(["related_to", "lives_in", "likes"]), rng.choice(keys)
        )
        for _ in range(rng.randint(0, 3))
    ]
    atoms = []
    for position in range(rng.randint(0, 4)):
        claim = rng.random() < 0.4
        predicate = rng.choice(["lives_in", "likes"])
        atoms.append(
            AtomRecord(
                position=position,
                text=f"fact {position}",
                key=rng.choice(["k1", "k2", "k3", "k4", "k5"]),
                type=rng.choice(["fact", "plan", "episode"]),
                importance=0.5,
                ttl_seconds=rng.choice([1.0, 2.0, 10.0]) * _DAY,
                subject=rng.choice(["alice", "bob"]) if claim else None,
                predicate=predicate if claim else None,
                object=rng.choice(["paris", "berlin"]) if claim else None,
                functional=claim and predicate == "lives_in",
            )
        )
    return MemoryGraph(
        entities=tuple(entities),
        relations=tuple(relations),
        summary="; ".join(entity.value for entity in entities),
        relation_type=rng.choice([None, "lives_in"]),
        atoms=tuple(atoms),
    )


@pytest.fixture
async def databases(tmp_path: Path) -> AsyncIterator[tuple[sqlite3.Connection, sqlite3.Connection]]:
    paths = [tmp_path / "plain.db", tmp_path / "rows.db"]
    for path in paths:
        store = await BaseMemoryStore.open(path, agent="a@localhost", storage=StorageConfig())
        await store.aclose()
    connections = [sqlite3.connect(path, isolation_level=None) for path in paths]
    for db in connections:
        db.execute("PRAGMA foreign_keys = ON")
    yield connections[0], connections[1]
    for db in connections:
        db.close()


def _store(db: sqlite3.Connection, graph: MemoryGraph, now: float, writer: Writer) -> int:
    new = NewMemory(
        uid=uuid.uuid4().hex,
        category="fact",
        content="text",
        context=None,
        confidence=1.0,
        importance=0.5,
        created_at=now,
    )
    (memory_id,) = InsertTransaction.of([(new, IndexedText("text"))], "a@localhost", None, None)(db)
    db.execute("BEGIN IMMEDIATE")
    writer(memory_id, graph, now, db)
    db.execute("COMMIT")
    return memory_id


@pytest.mark.parametrize("seed", range(12))
async def test_graph_rows_match_one_plain_statement_per_row(
    databases: tuple[sqlite3.Connection, sqlite3.Connection], seed: int
) -> None:
    rng = random.Random(seed)
    now = 1_000_000.0
    stored: list[int] = []
    for _ in range(40):
        graph = _random_graph(rng)
        now += rng.choice([60.0, 3_600.0, _DAY, 2.5 * _DAY, 20 * _DAY])
        ids = {
            _store(db, graph, now, writer) for db, writer in zip(databases, WRITERS, strict=True)
        }
        assert len(ids) == 1
        stored.append(ids.pop())
        change, lapsed = rng.random(), rng.choice(["forgotten", "expired"])
        for db in databases:  # the same change to both
            if change < 0.1:  # the newest atom forgotten or expired
                db.execute(
                    "UPDATE memory_atoms SET status = ? "
                    "WHERE id = (SELECT max(id) FROM memory_atoms)",
                    (lapsed,),
                )
            elif change < 0.25:  # lifetimes recorded (as AtomBook.refresh does)
                db.execute(
                    "UPDATE memory_atoms SET status = 'dormant' "
                    "WHERE status = 'active' AND expires_at <= ?",
                    (now,),
                )
            elif change < 0.35:  # a memory forgotten, its graph with it
                db.execute("BEGIN IMMEDIATE")
                graph_rows.delete_graph_rows(stored[len(stored) // 2], db)
                db.execute("COMMIT")
    plain, rows = databases
    for table, query in _TABLES.items():
        assert plain.execute(query).fetchall() == rows.execute(query).fetchall(), table
    statuses = {row[0] for row in rows.execute("SELECT DISTINCT status FROM memory_atoms")}
    assert {"active", "superseded"} <= statuses  # the run saw claims replaced
    assert rows.execute("SELECT max(reinforcements) FROM memory_atoms").fetchone()[0] > 0


WRITERS: tuple[Writer, Writer] = (_plain_rows, write_graph_rows)


def test_the_status_range_holds_only_active_and_dormant() -> None:
    # The look-up of an earlier atom asks for a status between 'active' and 'dormant'.
    assert "BETWEEN 'active' AND 'dormant'" in graph_rows._NEWEST_BY_KEY
    assert [s for s in sorted(ATOM_STATUSES) if "active" <= s <= "dormant"] == [
        "active",
        "dormant",
    ]
