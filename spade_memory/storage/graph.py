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
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

import aiosqlite

from ..text.graph import MemoryGraph
from ..text.relations import FUNCTIONAL
from .on_thread import run_on_connection
from .scope_filter import same_scope
from .sql import SQL_CHUNK, chunks, placeholders

__all__ = [
    "Claim",
    "delete_graph",
    "delete_graph_rows",
    "forget_atoms",
    "reinforce_atoms",
    "release_atoms",
    "resettle_memory",
    "run_on_connection",
    "settle_all_claims",
    "settle_claims",
    "write_graph",
    "write_graph_rows",
]


async def write_graph(
    db: aiosqlite.Connection,
    memory_id: int,
    graph: MemoryGraph,
    *,
    now: float,
    settle: bool = True,
) -> None:
    """Write the graph of one memory; call inside the memory's write transaction.

    A few statements whatever the memory holds (the nodes in one upsert, the edges,
    the entry with its trigram row and entry nodes, the atoms in one insert), all
    run in one call on the connection's thread. ``settle``: its claims are settled
    against the others (:func:`settle_claims`, which needs the memories table);
    without it (a graph rebuild's shadow), they are settled when the shadow is
    switched in.
    """
    if graph.entities or graph.atoms:
        await run_on_connection(db, partial(write_graph_rows, memory_id, graph, now, settle=settle))


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
# ``reinforced_at`` moves forward only: a copy told long ago (an import) tells
# nothing newer than what is held.
_REINFORCE = (
    "UPDATE memory_atoms SET reinforcements = reinforcements + 1, "
    "reinforced_at = max(reinforced_at, ?), "
    "status = 'active', expires_at = ? + ttl_seconds * (1 + ? * (reinforcements + 1)) "
    "WHERE id = ?"
)
_REINFORCE_OF_MEMORY = (
    "UPDATE memory_atoms SET reinforcements = reinforcements + 1, "
    "reinforced_at = max(reinforced_at, ?), "
    "status = 'active', expires_at = ? + ttl_seconds * (1 + ? * (reinforcements + 1)) "
    "WHERE memory_id = ? AND status IN ('active', 'dormant', 'superseded')"
)
_INSERT_ATOM = (
    "INSERT INTO memory_atoms (memory_id, position, text, key, type, status, subject, "
    "predicate, object, importance, ttl_seconds, reinforcements, created_at, "
    "reinforced_at, expires_at) VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?, ?, ?, 0, ?, ?, ?)"
)
# The claim standing for one subject and predicate: of the atoms claiming a value
# that stand (live or dormant), the one told last (``reinforced_at``: when its
# memory was last told), within one scope (the memories of one owner and visibility
# and, for a conversation's memory, one conversation).
_SCOPE_OF = (
    "EXISTS (SELECT 1 FROM memories AS m, memories AS n WHERE m.id = {atom}.memory_id "
    f"AND n.id = ? AND {same_scope('m', 'n')})"
)
_STANDING_IN_SCOPE = (
    "SELECT a.id, a.memory_id, a.object FROM memory_atoms AS a "
    "WHERE a.subject = ? AND a.predicate = ? AND a.object IS NOT NULL "
    f"AND a.{_LIVE_OR_DORMANT} AND {_SCOPE_OF.format(atom='a')} "
    "ORDER BY a.reinforced_at DESC, a.id DESC LIMIT 1"
)
# Every other value of the claim that stands is superseded by the standing one
# (atoms of its own memory excepted: one text may name two values), in its scope.
_SUPERSEDE = (
    "UPDATE memory_atoms SET status = 'superseded', superseded_by = ? "
    "WHERE subject = ? AND predicate = ? AND object != ? AND memory_id != ? "
    f"AND {_LIVE_OR_DORMANT} AND {_SCOPE_OF.format(atom='memory_atoms')}"
)

# A claim of one subject and predicate, settled within the scope of a memory.
Claim = tuple[str, str, int]  # subject, predicate, a memory of the scope


def settle_claims(claims: Iterable[Claim], db: sqlite3.Connection) -> None:
    """Settle functional claims (inside the caller's transaction): of the atoms
    claiming a value for one subject and predicate in one scope, the claim told last
    stands and every atom claiming another value is superseded by it.

    Run after every change of such atoms (written, told again, forgotten, deleted,
    moved to another scope), so that the claim told last wins whatever the order of
    the writes. An atom superseded by a claim that goes away or moves is released
    first (:func:`release_atoms`): the one told last is always among the live or
    dormant ones.
    """
    for subject, predicate, memory_id in dict.fromkeys(claims):
        if predicate not in FUNCTIONAL:
            continue
        found = db.execute(_STANDING_IN_SCOPE, (subject, predicate, memory_id)).fetchone()
        if found is None:
            continue
        standing, standing_memory, value = int(found[0]), int(found[1]), str(found[2])
        db.execute(_SUPERSEDE, (standing, subject, predicate, value, standing_memory, memory_id))


def settle_all_claims(db: sqlite3.Connection) -> None:
    """Settle every functional claim of the memory in its scope (after a graph
    rebuild, whose shadow has no memories table to tell scopes by)."""
    rows = db.execute(
        "SELECT DISTINCT subject, predicate, memory_id FROM memory_atoms "
        "WHERE subject IS NOT NULL AND predicate IS NOT NULL AND object IS NOT NULL "
        "AND status IN ('active', 'dormant', 'superseded')"
    ).fetchall()
    settle_claims([(str(r[0]), str(r[1]), int(r[2])) for r in rows if str(r[1]) in FUNCTIONAL], db)


def release_atoms(where: str, params: Sequence[Any], db: sqlite3.Connection) -> list[Claim]:
    """Release what the atoms selected by ``where`` (a condition on ``memory_atoms``)
    superseded, before they are deleted or forgotten: the claims to settle then,
    theirs and those of the atoms released (each in its own memory's scope, which an
    update may have left)."""
    claims: list[Claim] = []
    for chunk in _atom_chunks(where, params, db):
        claims.extend(_claims_among(chunk, db))
        db.execute(
            "UPDATE memory_atoms SET status = 'active', superseded_by = NULL "
            f"WHERE status = 'superseded' AND superseded_by IN ({placeholders(len(chunk))})",
            chunk,
        )
    return claims


def forget_atoms(where: str, params: Sequence[Any], db: sqlite3.Connection) -> int:
    """Mark forgotten the atoms selected by ``where`` (not forgotten yet), inside the
    caller's transaction; what they superseded is released and their claims settled
    again (forgetting the claim that stands lets the one told before it stand, as
    forgetting its memory does). Returns how many were marked."""
    where = f"({where}) AND status != 'forgotten'"
    claims = release_atoms(where, params, db)
    changed = db.execute(
        f"UPDATE memory_atoms SET status = 'forgotten' WHERE {where}", params
    ).rowcount
    settle_claims(claims, db)
    return int(changed)


def _claims_of(where: str, params: Sequence[Any], db: sqlite3.Connection) -> list[Claim]:
    """The claims the atoms selected by ``where`` make, and those of the atoms they
    superseded (each settled in its own memory's scope, which an update may have
    left)."""
    claims: list[Claim] = []
    for chunk in _atom_chunks(where, params, db):
        claims.extend(_claims_among(chunk, db))
    return claims


def _atom_chunks(where: str, params: Sequence[Any], db: sqlite3.Connection) -> list[Sequence[int]]:
    """The ids of the atoms selected by ``where``, in chunks for ``IN`` lists."""
    ids = [int(r[0]) for r in db.execute(f"SELECT id FROM memory_atoms WHERE {where}", params)]
    return list(chunks(ids))


def _claims_among(ids: Sequence[int], db: sqlite3.Connection) -> list[Claim]:
    """The functional claims of the atoms ``ids`` and of the atoms they superseded."""
    marks = placeholders(len(ids))
    rows = db.execute(
        "SELECT subject, predicate, memory_id FROM memory_atoms "
        f"WHERE (id IN ({marks}) OR superseded_by IN ({marks})) "
        "AND subject IS NOT NULL AND predicate IS NOT NULL AND object IS NOT NULL",
        [*ids, *ids],
    ).fetchall()
    return [(str(r[0]), str(r[1]), int(r[2])) for r in rows if str(r[1]) in FUNCTIONAL]


def resettle_memory(memory_id: int, db: sqlite3.Connection) -> None:
    """Settle a memory's claims again where it now is (its scope changed) and where
    the atoms it superseded are (its scope before): what it superseded, and its own
    atoms that were superseded, are released and settled in their scopes."""
    claims = release_atoms("memory_id = ?", (memory_id,), db)
    db.execute(
        "UPDATE memory_atoms SET status = 'active', superseded_by = NULL "
        "WHERE memory_id = ? AND status = 'superseded'",
        (memory_id,),
    )
    settle_claims(claims, db)


def write_graph_rows(
    memory_id: int,
    graph: MemoryGraph,
    now: float,
    db: sqlite3.Connection,
    *,
    settle: bool = True,
    told: float | None = None,
) -> None:
    """:func:`write_graph` on the connection's own thread (inside the write transaction).

    ``now``: when the atoms' lives start. ``told``: when the memory was last told
    (default ``now``), which orders its claims against others (:func:`settle_claims`):
    an imported memory's atoms live from its import but claim what they claimed
    when it was told.
    """
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
        _write_atoms(db, memory_id, graph, now, settle, now if told is None else told)


def reinforce_atoms(
    memory_id: int, factor: float, now: float, db: sqlite3.Connection, *, told: float | None = None
) -> None:
    """The same memory told again (at ``told``, default ``now``): each of its live,
    dormant or superseded atoms is reinforced (a longer life from ``now``, dormant
    ones active again), and its claims are settled again, standing if told last;
    inside the caller's transaction."""
    db.execute(_REINFORCE_OF_MEMORY, (now if told is None else told, now, factor, memory_id))
    settle_claims(_claims_of("memory_id = ?", (memory_id,), db), db)


def _write_atoms(
    db: sqlite3.Connection,
    memory_id: int,
    graph: MemoryGraph,
    now: float,
    settle: bool,
    told: float,
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
            [(told, now, graph.reinforcement_factor, atom_id) for atom_id in sorted(found)],
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
            told,
            now + atom.ttl_seconds,
        )
        for atom in atoms
    ]
    db.executemany(_INSERT_ATOM, rows)
    if not settle:
        return
    # A claim told now (or one reinforced above) on a subject and predicate with
    # another value told before: the claim told last stands.
    settle_claims(
        [
            (atom.subject, atom.predicate, memory_id)
            for atom in atoms
            if atom.functional and atom.subject and atom.predicate and atom.object
        ],
        db,
    )


async def delete_graph(db: aiosqlite.Connection, memory_id: int, *, settle: bool = True) -> None:
    """Remove the graph of one memory and the nodes left orphaned; inside its transaction.

    The claims its atoms made are settled again without them (:func:`settle_claims`):
    an atom it had superseded stands again unless a claim told since stands instead.
    """
    await run_on_connection(db, partial(delete_graph_rows, memory_id, settle=settle))


def delete_graph_rows(memory_id: int, db: sqlite3.Connection, *, settle: bool = True) -> None:
    rows = db.execute(
        "SELECT node_id FROM graph_entry_nodes WHERE memory_id = ? "
        "UNION SELECT source_id FROM graph_edges WHERE memory_id = ? "
        "UNION SELECT target_id FROM graph_edges WHERE memory_id = ?",
        (memory_id, memory_id, memory_id),
    ).fetchall()
    touched = [int(row[0]) for row in rows]
    # Free what its atoms superseded; the settling below supersedes it again by
    # whichever claim stands now.
    claims = release_atoms("memory_id = ?", (memory_id,), db)
    db.execute(
        "UPDATE graph_nodes SET entries = max(0, entries - 1) "
        "WHERE id IN (SELECT node_id FROM graph_entry_nodes WHERE memory_id = ?)",
        (memory_id,),
    )
    for table in ("memory_atoms", "graph_edges", "graph_entry_nodes", "graph_embeddings"):
        db.execute(f"DELETE FROM {table} WHERE memory_id = ?", (memory_id,))
    db.execute("DELETE FROM graph_entries WHERE memory_id = ?", (memory_id,))
    db.execute("DELETE FROM graph_entries_fts WHERE rowid = ?", (memory_id,))
    if settle:
        settle_claims(claims, db)  # the memory's own row is still there
    for chunk in chunks(touched):
        db.execute(
            f"DELETE FROM graph_nodes WHERE id IN ({placeholders(len(chunk))}) "
            "AND NOT EXISTS (SELECT 1 FROM graph_entry_nodes WHERE node_id = graph_nodes.id) "
            "AND NOT EXISTS (SELECT 1 FROM graph_edges WHERE source_id = graph_nodes.id) "
            "AND NOT EXISTS (SELECT 1 FROM graph_edges WHERE target_id = graph_nodes.id)",
            list(chunk),
        )
