"""The graph tables of the base memory: nodes, edges, entries, entry vectors and atoms.

A memory's graph (its entities, the relations between them, its entry summary and
its atoms) is written by :func:`write_graph` and removed by :func:`delete_graph`,
both called by the base store inside the transaction that writes or deletes the
memory itself, so a memory and its graph are never seen apart. Reads go through
:class:`~spade_memory.storage.graph_store.GraphStore`.

- ``graph_nodes``: one row per canonical entity key (``"alice"``,
  ``"date:2024-05-01"``); a node no edge or entry refers to any more is removed.
- ``graph_edges``: relations between nodes, each tagged with the memory it came from.
- ``graph_entries`` (+ ``graph_entries_fts``, trigram): one per memory naming an
  entity; ``graph_entry_nodes`` links it to its nodes.
- ``graph_embeddings``: one vector per entry (the FAISS graph index caches them).
- ``memory_atoms``: fine-grained facts of a memory with their lifetimes.
"""

from __future__ import annotations

import sqlite3
from functools import partial
from typing import Any

import aiosqlite

from ..text.graph import MemoryGraph
from .on_thread import run_on_connection
from .scope_filter import same_scope
from .sql import SQL_CHUNK, chunks, placeholders

__all__ = [
    "delete_graph",
    "delete_graph_rows",
    "reinforce_atoms",
    "run_on_connection",
    "write_graph",
    "write_graph_rows",
]


async def write_graph(
    db: aiosqlite.Connection,
    memory_id: int,
    graph: MemoryGraph,
    *,
    now: float,
    scoped: bool = True,
) -> None:
    """Write the graph of one memory; call inside the memory's write transaction.

    A few statements whatever the memory holds (the nodes in one upsert, the edges,
    the entry with its trigram row and entry nodes, the atoms in one insert), all
    run in one call on the connection's thread. ``scoped``: a newer claim supersedes
    only atoms of memories of its own scope (the memories table must be at hand);
    without it (a graph rebuild's shadow), any, and reading atoms undoes a
    supersession across scopes (``storage.atoms``).
    """
    if graph.entities or graph.atoms:
        await run_on_connection(db, partial(write_graph_rows, memory_id, graph, now, scoped=scoped))


_UPSERT_NODE = (
    "INSERT INTO graph_nodes (key, type, value, created_at, entries) VALUES (?, ?, ?, ?, 1) "
    "ON CONFLICT (key) DO UPDATE SET entries = graph_nodes.entries + 1, "
    "type = CASE WHEN graph_nodes.type = 'thing' THEN excluded.type ELSE graph_nodes.type END "
    "RETURNING id"
)
_COUNT_ENTRY = (
    "UPDATE graph_nodes SET entries = entries + 1, "
    "type = CASE WHEN type = 'thing' THEN ? ELSE type END WHERE key = ? RETURNING id"
)
# 'active' or 'dormant': of the atom statuses (atoms.ATOM_STATUSES) only these two
# sort between them. A range is one seek of memory_atoms_by_key (key, status); an
# IN list builds a table of its values on every run (twice the time of the look-up).
_LIVE_OR_DORMANT = "status BETWEEN 'active' AND 'dormant'"
_REVIVABLE = f"{_LIVE_OR_DORMANT} AND expires_at + ttl_seconds * ? > ?"
_NEWEST_BY_KEY = f"SELECT max(id) FROM memory_atoms WHERE key = ? AND {_REVIVABLE}"
_NEWEST_BY_CLAIM = (
    "SELECT max(id) FROM memory_atoms "
    f"WHERE subject = ? AND predicate = ? AND object = ? AND {_REVIVABLE}"
)
_REINFORCE = (
    "UPDATE memory_atoms SET reinforcements = reinforcements + 1, reinforced_at = ?, "
    "status = 'active', expires_at = ? + ttl_seconds * (1 + ? * (reinforcements + 1)) "
    "WHERE id = ?"
)
_REINFORCE_OF_MEMORY = (
    "UPDATE memory_atoms SET reinforcements = reinforcements + 1, reinforced_at = ?, "
    "status = 'active', expires_at = ? + ttl_seconds * (1 + ? * (reinforcements + 1)) "
    "WHERE memory_id = ? AND status IN ('active', 'dormant')"
)
_INSERT_ATOM = (
    "INSERT INTO memory_atoms (memory_id, position, text, key, type, status, subject, "
    "predicate, object, importance, ttl_seconds, reinforcements, created_at, "
    "reinforced_at, expires_at) VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?, ?, ?, 0, ?, ?, ?)"
)
_SUPERSEDE = (
    "UPDATE memory_atoms SET status = 'superseded', superseded_by = ? "
    "WHERE subject = ? AND predicate = ? AND object != ? AND memory_id != ? "
    "AND status IN ('active', 'dormant')"
)
# The same, only among memories of the new one's scope (owner, visibility and, for a
# conversation's memory, its conversation); an atom superseded so far only by a claim
# of another scope is taken over too. Where the memories table is at hand.
_SAME_SCOPE = (
    "EXISTS (SELECT 1 FROM memories AS m, memories AS n WHERE m.id = {atom}.memory_id "
    f"AND n.id = ? AND {same_scope('m', 'n')})"
)
_SUPERSEDE_IN_SCOPE = (
    "UPDATE memory_atoms SET status = 'superseded', superseded_by = ? "
    "WHERE subject = ? AND predicate = ? AND object != ? AND memory_id != ? "
    f"AND {_SAME_SCOPE.format(atom='memory_atoms')} "
    "AND (status IN ('active', 'dormant') OR (status = 'superseded' AND NOT EXISTS ("
    "SELECT 1 FROM memory_atoms AS s WHERE s.id = memory_atoms.superseded_by "
    f"AND {_SAME_SCOPE.format(atom='s')})))"
)


def write_graph_rows(
    memory_id: int, graph: MemoryGraph, now: float, db: sqlite3.Connection, *, scoped: bool = True
) -> None:
    """:func:`write_graph` on the connection's own thread (inside the write transaction)."""
    if not (graph.entities or graph.atoms):
        return
    # One fixed statement per row: on the connection's thread a row costs a few
    # microseconds, and fixed statements are prepared once (sqlite3's statement
    # cache) where a statement of as many rows as the memory has is prepared anew.
    node_ids: dict[str, int] = {}
    for entity in graph.entities:
        if entity.key not in node_ids:
            # Most entities of a memory are known nodes: counting one more entry of a
            # node found by its key costs half an upsert, which tries an insert first.
            row = db.execute(_COUNT_ENTRY, (entity.type, entity.key)).fetchone()
            if row is None:
                new = (entity.key, entity.type, entity.value, now)
                row = db.execute(_UPSERT_NODE, new).fetchone()
            node_ids[entity.key] = int(row[0])
    edges = [
        (node_ids[r.source], node_ids[r.target], r.relation, float(r.weight), memory_id)
        for r in graph.relations
        if r.source in node_ids and r.target in node_ids and r.source != r.target
    ]
    if edges:
        db.executemany(
            "INSERT INTO graph_edges (source_id, target_id, relation, weight, memory_id) "
            "VALUES (?, ?, ?, ?, ?)",
            edges,
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
    if graph.atoms:
        _write_atoms(db, memory_id, graph, now, scoped)


def reinforce_atoms(memory_id: int, factor: float, now: float, db: sqlite3.Connection) -> None:
    """The same memory told again: each of its live or dormant atoms is reinforced
    (a longer life, dormant ones active again); inside the caller's transaction."""
    db.execute(_REINFORCE_OF_MEMORY, (now, now, factor, memory_id))


def _write_atoms(
    db: sqlite3.Connection, memory_id: int, graph: MemoryGraph, now: float, scoped: bool
) -> None:
    atoms = graph.atoms[:SQL_CHUNK]
    # The same fact said again (the same text, or the same subject-predicate-object)
    # reinforces the newest live or dormant atom that holds it: one atom per fact,
    # so a phrase said a thousand times costs no more than one said twice. (This
    # memory's own atoms are not written yet, or were just removed on an update.)
    revivable = (graph.dormant_fraction, now)
    newest: list[Any] = []
    for key in dict.fromkeys(atom.key for atom in atoms):
        newest.append(db.execute(_NEWEST_BY_KEY, (key, *revivable)).fetchone()[0])
    for atom in atoms:
        if atom.subject is not None and atom.predicate is not None and atom.object is not None:
            claim = (atom.subject, atom.predicate, atom.object, *revivable)
            newest.append(db.execute(_NEWEST_BY_CLAIM, claim).fetchone()[0])
    found = {int(atom_id) for atom_id in newest if atom_id is not None}  # max() of no row: None
    if found:
        db.executemany(
            _REINFORCE,
            [(now, now, graph.reinforcement_factor, atom_id) for atom_id in sorted(found)],
        )
    rows = [
        (
            memory_id,
            atom.position,
            atom.text,
            atom.key,
            atom.type,
            atom.subject,
            atom.predicate,
            atom.object,
            atom.importance,
            atom.ttl_seconds,
            now,
            now,
            now + atom.ttl_seconds,
        )
        for atom in atoms
    ]
    if not any(atom.functional for atom in atoms):
        db.executemany(_INSERT_ATOM, rows)  # no claim to supersede others: no ids needed
        return
    for atom, row in zip(atoms, rows, strict=True):
        cursor = db.execute(_INSERT_ATOM, row)
        if atom.functional and atom.subject and atom.predicate and atom.object:
            # A newer claim on the same subject and predicate with another object wins.
            db.execute(
                _SUPERSEDE_IN_SCOPE if scoped else _SUPERSEDE,
                (cursor.lastrowid, atom.subject, atom.predicate, atom.object, memory_id)
                + ((memory_id, memory_id) if scoped else ()),
            )


async def delete_graph(db: aiosqlite.Connection, memory_id: int) -> None:
    """Remove the graph of one memory and the nodes left orphaned; inside its transaction.

    Atoms this memory had superseded become active again (the newer claim is gone).
    """
    await run_on_connection(db, partial(delete_graph_rows, memory_id))


def delete_graph_rows(memory_id: int, db: sqlite3.Connection) -> None:
    rows = db.execute(
        "SELECT node_id FROM graph_entry_nodes WHERE memory_id = ? "
        "UNION SELECT source_id FROM graph_edges WHERE memory_id = ? "
        "UNION SELECT target_id FROM graph_edges WHERE memory_id = ?",
        (memory_id, memory_id, memory_id),
    ).fetchall()
    touched = [int(row[0]) for row in rows]
    db.execute(
        "UPDATE memory_atoms SET status = 'active', superseded_by = NULL "
        "WHERE status = 'superseded' AND superseded_by IN "
        "(SELECT id FROM memory_atoms WHERE memory_id = ?)",
        (memory_id,),
    )
    db.execute(
        "UPDATE graph_nodes SET entries = max(0, entries - 1) "
        "WHERE id IN (SELECT node_id FROM graph_entry_nodes WHERE memory_id = ?)",
        (memory_id,),
    )
    for table in ("memory_atoms", "graph_edges", "graph_entry_nodes", "graph_embeddings"):
        db.execute(f"DELETE FROM {table} WHERE memory_id = ?", (memory_id,))
    db.execute("DELETE FROM graph_entries WHERE memory_id = ?", (memory_id,))
    db.execute("DELETE FROM graph_entries_fts WHERE rowid = ?", (memory_id,))
    for chunk in chunks(touched):
        db.execute(
            f"DELETE FROM graph_nodes WHERE id IN ({placeholders(len(chunk))}) "
            "AND NOT EXISTS (SELECT 1 FROM graph_entry_nodes WHERE node_id = graph_nodes.id) "
            "AND NOT EXISTS (SELECT 1 FROM graph_edges WHERE source_id = graph_nodes.id) "
            "AND NOT EXISTS (SELECT 1 FROM graph_edges WHERE target_id = graph_nodes.id)",
            list(chunk),
        )
