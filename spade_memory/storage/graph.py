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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiosqlite

if TYPE_CHECKING:
    pass

__all__ = [
    "AtomRecord",
    "Entity",
    "MemoryGraph",
    "Relation",
    "delete_graph",
    "write_graph",
]

_CHUNK = 500


@dataclass(frozen=True, slots=True)
class Entity:
    """A graph node: its canonical ``key`` (one node per key), type and display value."""

    key: str
    type: str
    value: str


@dataclass(frozen=True, slots=True)
class Relation:
    """A directed, typed edge between two entity keys.

    ``clause`` is the index of the sentence it was found in (``None``: the whole
    memory, or given explicitly).
    """

    source: str
    relation: str
    target: str
    weight: float = 1.0
    clause: int | None = None


@dataclass(frozen=True, slots=True)
class AtomRecord:
    """An atom about to be written with its memory.

    ``ttl_seconds`` is its lifetime before any reinforcement; ``functional`` says that
    its predicate has one object per subject, so a newer atom with the same subject
    and predicate but another object supersedes it.
    """

    position: int
    text: str
    key: str
    type: str
    importance: float
    ttl_seconds: float
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    functional: bool = False


@dataclass(frozen=True, slots=True)
class MemoryGraph:
    """Everything written to the graph tables for one memory.

    Args:
        entities: the nodes the memory names (every relation endpoint among them).
        relations: the edges found in it.
        summary: the entry text (searched by trigrams and embedded).
        relation_type: the memory's main relation, if it has a typed one.
        atoms: its atoms, in order.
        reinforcement_factor: each reinforcement adds this fraction of an atom's
            lifetime.
        dormant_fraction: how long (as a fraction of its lifetime) an atom past its
            lifetime stays dormant and can still be reinforced back to life.
    """

    entities: tuple[Entity, ...] = ()
    relations: tuple[Relation, ...] = ()
    summary: str = ""
    relation_type: str | None = None
    atoms: tuple[AtomRecord, ...] = ()
    reinforcement_factor: float = 0.5
    dormant_fraction: float = 0.5


def _marks(count: int) -> str:
    return ",".join("?" * count)


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


async def write_graph(
    db: aiosqlite.Connection, memory_id: int, graph: MemoryGraph, *, now: float
) -> None:
    """Write the graph of one memory; call inside the memory's write transaction.

    A few statements whatever the memory holds: the nodes in one upsert, the edges,
    the entry (with its trigram row and entry nodes), the atoms in one insert.
    """
    entities = list({entity.key: entity for entity in reversed(graph.entities)}.values())
    node_ids: dict[str, int] = {}
    for chunk in _chunks(entities[::-1]):
        rows = await db.execute_fetchall(
            "INSERT INTO graph_nodes (key, type, value, created_at) VALUES "
            + ",".join(["(?, ?, ?, ?)"] * len(chunk))
            + " ON CONFLICT (key) DO UPDATE SET type = CASE WHEN graph_nodes.type = 'thing' "
            "THEN excluded.type ELSE graph_nodes.type END RETURNING id, key",
            [value for e in chunk for value in (e.key, e.type, e.value, now)],
        )
        node_ids.update((str(row[1]), int(row[0])) for row in rows)
    edges = [
        (node_ids[r.source], node_ids[r.target], r.relation, float(r.weight), memory_id)
        for r in graph.relations
        if r.source in node_ids and r.target in node_ids and r.source != r.target
    ]
    if edges:
        await db.executemany(
            "INSERT INTO graph_edges (source_id, target_id, relation, weight, memory_id) "
            "VALUES (?, ?, ?, ?, ?)",
            edges,
        )
    if node_ids:
        await db.execute(
            "INSERT INTO graph_entries (memory_id, summary, relation_type, updated_at) "
            "VALUES (?, ?, ?, ?)",
            (memory_id, graph.summary, graph.relation_type, now),
        )
        await db.execute(
            "INSERT INTO graph_entries_fts (rowid, summary) VALUES (?, ?)",
            (memory_id, graph.summary),
        )
        await db.executemany(
            "INSERT OR IGNORE INTO graph_entry_nodes (memory_id, node_id) VALUES (?, ?)",
            [(memory_id, node_id) for node_id in node_ids.values()],
        )
    if graph.atoms:
        await _write_atoms(db, memory_id, graph, now)


async def _write_atoms(
    db: aiosqlite.Connection, memory_id: int, graph: MemoryGraph, now: float
) -> None:
    atoms = graph.atoms[:_CHUNK]
    claims = [
        (a.subject, a.predicate, a.object)
        for a in atoms
        if a.subject is not None and a.predicate is not None and a.object is not None
    ]
    # The same fact said again (the same text, or the same subject-predicate-object):
    # reinforce the live and dormant atoms of other memories that hold it.
    # explicit ORs, not a row-value IN, so that the partial claim index is used
    claim_clause = " OR (subject = ? AND predicate = ? AND object = ?)" * len(claims)
    await db.execute(
        "UPDATE memory_atoms SET reinforcements = reinforcements + 1, reinforced_at = ?, "
        "status = 'active', expires_at = ? + ttl_seconds * (1 + ? * (reinforcements + 1)) "
        "WHERE memory_id != ? AND status IN ('active', 'dormant') "
        f"AND expires_at + ttl_seconds * ? > ? AND (key IN ({_marks(len(atoms))}){claim_clause})",
        [
            now,
            now,
            graph.reinforcement_factor,
            memory_id,
            graph.dormant_fraction,
            now,
            *(a.key for a in atoms),
            *(part for claim in claims for part in claim),
        ],
    )
    rows = await db.execute_fetchall(
        "INSERT INTO memory_atoms (memory_id, position, text, key, type, status, subject, "
        "predicate, object, importance, ttl_seconds, reinforcements, created_at, "
        "reinforced_at, expires_at) VALUES "
        + ",".join(["(?, ?, ?, ?, ?, 'active', ?, ?, ?, ?, ?, 0, ?, ?, ?)"] * len(atoms))
        + " RETURNING id, position",
        [
            value
            for a in atoms
            for value in (
                memory_id,
                a.position,
                a.text,
                a.key,
                a.type,
                a.subject,
                a.predicate,
                a.object,
                a.importance,
                a.ttl_seconds,
                now,
                now,
                now + a.ttl_seconds,
            )
        ],
    )
    ids = {int(row[1]): int(row[0]) for row in rows}
    for atom in atoms:
        if atom.functional and atom.subject and atom.predicate and atom.object:
            # A newer claim on the same subject and predicate with another object wins.
            await db.execute(
                "UPDATE memory_atoms SET status = 'superseded', superseded_by = ? "
                "WHERE subject = ? AND predicate = ? AND object != ? AND memory_id != ? "
                "AND status IN ('active', 'dormant')",
                (ids[atom.position], atom.subject, atom.predicate, atom.object, memory_id),
            )


async def delete_graph(db: aiosqlite.Connection, memory_id: int) -> None:
    """Remove the graph of one memory and the nodes left orphaned; inside its transaction.

    Atoms this memory had superseded become active again (the newer claim is gone).
    """
    rows = await db.execute_fetchall(
        "SELECT node_id FROM graph_entry_nodes WHERE memory_id = ? "
        "UNION SELECT source_id FROM graph_edges WHERE memory_id = ? "
        "UNION SELECT target_id FROM graph_edges WHERE memory_id = ?",
        (memory_id, memory_id, memory_id),
    )
    touched = [int(row[0]) for row in rows]
    await db.execute(
        "UPDATE memory_atoms SET status = 'active', superseded_by = NULL "
        "WHERE status = 'superseded' AND superseded_by IN "
        "(SELECT id FROM memory_atoms WHERE memory_id = ?)",
        (memory_id,),
    )
    for table in ("memory_atoms", "graph_edges", "graph_entry_nodes", "graph_embeddings"):
        await db.execute(f"DELETE FROM {table} WHERE memory_id = ?", (memory_id,))
    await db.execute("DELETE FROM graph_entries WHERE memory_id = ?", (memory_id,))
    await db.execute("DELETE FROM graph_entries_fts WHERE rowid = ?", (memory_id,))
    for chunk in _chunks(touched):
        await db.execute(
            f"DELETE FROM graph_nodes WHERE id IN ({_marks(len(chunk))}) "
            "AND NOT EXISTS (SELECT 1 FROM graph_entry_nodes WHERE node_id = graph_nodes.id) "
            "AND NOT EXISTS (SELECT 1 FROM graph_edges WHERE source_id = graph_nodes.id) "
            "AND NOT EXISTS (SELECT 1 FROM graph_edges WHERE target_id = graph_nodes.id)",
            list(chunk),
        )
