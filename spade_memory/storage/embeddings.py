"""The ``embeddings`` table of the base memory: one vector per memory, with a sequence.

Vectors are written with a growing ``seq`` (its last value in ``meta`` as
``embedding_seq``), so a FAISS index can load only what was written since its
snapshot. A vector is kept only while its memory is unchanged: it is written
only if the memory, read again inside the write transaction, still gives the
:class:`PendingVector` read for embedding: the same text (the memory's content
and the turn before it), the same ``updated_at`` and the same turn's
``updated_at``. The text is compared too, since two writes may share a clock
reading (a coarse or injected clock): an update made while the old text was
being embedded never keeps the old text's vector.
The fingerprint of the embedder that wrote vectors last is kept in ``meta`` as
``embedder`` too, so a memory whose vectors were all lost still names it; a memory
opened to be embedded before it holds any vector names its embedder there at once
(:func:`name_embedder`), so a tool looking at it knows which embedder it uses and
what waits for a vector before the first one is written.

A turn of a conversation is embedded with the turn before it (:func:`vector_text`):
an answer ("Sweden, where my grandma lives") rarely repeats the question it
answers ("where did you move from?"). The turn before is the memory's
``previous_id`` when whoever sees the memory sees it too (:data:`CONTEXT_JOIN`).
Its vector then also depends on that turn, so a change of that turn (its text,
category or scope, or its deletion) deletes the vector (:data:`DEPENDENTS_SQL`),
and a vector is written only if the turn read for it is unchanged too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from ..errors import StorageError
from .memory_rows import Fetch, Transaction
from .sql import SQL_CHUNK, chunks, placeholders

if TYPE_CHECKING:  # imported where vectors are read or written: counting loads no numpy
    import numpy as np

__all__ = [
    "CONTEXT_CHARS",
    "CONTEXT_JOIN",
    "DEPENDENTS_SQL",
    "EMBEDDER_KEY",
    "LAST_EMBEDDER_SQL",
    "MAIN_FINGERPRINT_SQL",
    "PendingVector",
    "count_embedded",
    "count_pending_embeddings",
    "counts_by_fingerprint",
    "decode_vectors",
    "embedding_ids",
    "load_vectors",
    "main_fingerprint",
    "name_embedder",
    "pending_embeddings",
    "put_embeddings",
    "vector_text",
    "vector_texts",
    "vectors_for",
]

EMBEDDER_KEY = "embedder"
"""The ``meta`` key of the fingerprint of the embedder that wrote vectors last (or,
before any did, the one the memory was opened to be embedded with)."""


MAIN_FINGERPRINT_SQL: Final = (
    "SELECT fingerprint FROM embeddings GROUP BY fingerprint ORDER BY count(*) DESC LIMIT 1"
)
"""The fingerprint of most stored vectors (no row: no vector)."""

LAST_EMBEDDER_SQL: Final = f"SELECT value FROM meta WHERE key = '{EMBEDDER_KEY}'"
"""The fingerprint of the embedder that wrote vectors last, or was named before any
did (no row: the memory never had an embedder)."""


CONTEXT_JOIN: Final = (
    "p.id = m.previous_id AND p.category = m.category AND p.owner IS m.owner "
    "AND p.visibility = m.visibility AND m.visibility != 'shared'"
)
"""When memory ``p`` is the context of memory ``m``'s vector: ``m``'s previous turn
(same conversation, see ``memories.previous_id``), of the same category, owner and
visibility, so that whoever sees ``m`` sees ``p`` too (a shared memory's readers
are a set of their own: never)."""

CONTEXT_CHARS: Final = 400
"""At most this many characters of the turn before make a memory's vector context
(its end: what was said last before the memory)."""

DEPENDENTS_SQL: Final = (
    "DELETE FROM embeddings WHERE memory_id IN (SELECT id FROM memories WHERE previous_id = ?)"
)
"""Delete the vectors made with a memory as their context (one parameter: its id):
run when its text, category or scope changes or it is deleted; they are made again."""


class PendingVector(NamedTuple):
    """A memory to embed: its id, the text its vector is made of
    (:func:`vector_text`), its ``updated_at``, and the ``updated_at`` of the turn
    in that text (0.0: none)."""

    memory_id: int
    text: str
    updated_at: float
    context_at: float


def vector_text(content: str, previous: str | None) -> str:
    """The text a memory's vector is made of: its content, after the end of the turn
    before it (at most :data:`CONTEXT_CHARS` characters, from a word's start) when
    it has one (:data:`CONTEXT_JOIN`)."""
    if not previous:
        return content
    tail = previous[-CONTEXT_CHARS:]
    if len(previous) > CONTEXT_CHARS:
        cut = tail.find(" ")
        if 0 <= cut < len(tail) - 1:
            tail = tail[cut + 1 :]
    return f"{tail}\n{content}"


_WITH_CONTEXT: Final = (
    "SELECT m.id, m.content, m.updated_at, p.content, p.updated_at FROM memories AS m "
    f"LEFT JOIN memories AS p ON {CONTEXT_JOIN} "
)
"""Memories ``m`` with the turn their vector is made with, if any (:func:`_pending`)."""


def _pending(row: Sequence[Any]) -> PendingVector:
    context = None if row[3] is None else str(row[3])
    return PendingVector(
        int(row[0]),
        vector_text(str(row[1]), context),
        float(row[2]),
        0.0 if row[4] is None else float(row[4]),
    )


async def main_fingerprint(fetch: Fetch) -> str | None:
    """The embedder fingerprint of most stored vectors, else the one that wrote
    vectors last or was named before any (:func:`name_embedder`); ``None`` when the
    memory never had an embedder."""
    for sql in (MAIN_FINGERPRINT_SQL, LAST_EMBEDDER_SQL):
        rows = await fetch(sql, ())
        if rows and rows[0][0] is not None:
            return str(rows[0][0])
    return None


async def name_embedder(fetch: Fetch, transaction: Transaction, fingerprint: str) -> bool:
    """Record ``fingerprint`` as the memory's embedder while it holds no vector;
    whether it was written (not when a vector is stored, nor when it is named
    already). A memory whose vectors exist is named by them (:func:`main_fingerprint`)."""
    if await fetch("SELECT 1 FROM embeddings LIMIT 1", ()):
        return False
    named = await fetch(LAST_EMBEDDER_SQL, ())
    if named and named[0][0] == fingerprint:
        return False
    async with transaction() as db:
        # checked again under the write lock: another process may have embedded since
        if await db.execute_fetchall("SELECT 1 FROM embeddings LIMIT 1"):
            return False
        await db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (EMBEDDER_KEY, fingerprint),
        )
    return True


async def pending_embeddings(
    fetch: Fetch, fingerprint: str, limit: int, after_id: int
) -> list[PendingVector]:
    """Memories without a vector of ``fingerprint``, with the text to embed.

    Ordered by id, starting after ``after_id`` (a cursor for one pass).
    """
    rows = await fetch(
        f"{_WITH_CONTEXT}LEFT JOIN embeddings AS e ON e.memory_id = m.id AND e.fingerprint = ? "
        "WHERE e.memory_id IS NULL AND m.id > ? ORDER BY m.id LIMIT ?",
        (fingerprint, int(after_id), int(limit)),
    )
    return [_pending(row) for row in rows]


async def vector_texts(fetch: Fetch, memory_ids: Sequence[int]) -> dict[int, str]:
    """The text each of these memories' vector is made of (:func:`vector_text`)."""
    found: dict[int, str] = {}
    for chunk in chunks(list(dict.fromkeys(int(i) for i in memory_ids))):
        rows = await fetch(
            f"{_WITH_CONTEXT}WHERE m.id IN ({placeholders(len(chunk))})",
            chunk,
        )
        found.update((item.memory_id, item.text) for item in map(_pending, rows))
    return found


async def count_pending_embeddings(fetch: Fetch, fingerprint: str) -> int:
    """How many memories have no vector of ``fingerprint``."""
    rows = await fetch(
        "SELECT count(*) FROM memories AS m "
        "LEFT JOIN embeddings AS e ON e.memory_id = m.id AND e.fingerprint = ? "
        "WHERE e.memory_id IS NULL",
        (fingerprint,),
    )
    return int(rows[0][0])


async def put_embeddings(
    transaction: Transaction,
    max_seq: Callable[[], Awaitable[int]],
    fingerprint: str,
    dim: int,
    items: Sequence[tuple[PendingVector, np.ndarray]],
) -> tuple[list[int], int]:
    """Store vectors of ``fingerprint`` (each of ``dim`` values), each made of its
    :class:`PendingVector`; return the ids stored and the last seq.

    A memory deleted or changed since it was read for embedding is skipped, so a
    stale vector is never kept: its :class:`PendingVector`, read again in the
    write transaction, differs (another text, ``updated_at`` or context turn;
    see the module docstring). ``max_seq`` gives the last seq when there is
    nothing to store.

    Raises:
        StorageError: a vector is not ``dim`` finite values; nothing was stored.
    """
    import numpy as np

    if not items:
        return [], await max_seq()
    checked: list[tuple[PendingVector, np.ndarray]] = []
    for item, vector in items:
        array = np.ascontiguousarray(vector, dtype=np.float32)
        if array.ndim != 1 or not np.all(np.isfinite(array)):
            raise StorageError(f"refusing a malformed vector for memory {item.memory_id}")
        if array.shape[0] != dim:
            raise StorageError(
                f"refusing a vector of {array.shape[0]} values for memory {item.memory_id}: "
                f"the vectors of {fingerprint} have {dim}"
            )
        checked.append((item, array))
    async with transaction() as db:
        rows = await db.execute_fetchall("SELECT value FROM meta WHERE key = 'embedding_seq'")
        first = int(next(iter(rows))[0]) if rows else 0
        # The memories as they are now, under the write lock: a vector is written
        # only for a memory that still reads as it was read for embedding. One read
        # and one executemany, not round trips per vector: the write lock (which
        # stores wait for) is held for a few round trips only.
        now: dict[int, PendingVector] = {}
        wanted = list(dict.fromkeys(item.memory_id for item, _ in checked))
        for chunk in chunks(wanted):
            found = await db.execute_fetchall(
                f"{_WITH_CONTEXT}WHERE m.id IN ({placeholders(len(chunk))})", chunk
            )
            now.update((item.memory_id, item) for item in map(_pending, found))
        # Numbered in the order given, refused ones too: the batch spans
        # first + 1 .. first + len(items) whatever was kept (see VectorIndexer._advance).
        kept = [
            (first + n, item, array)
            for n, (item, array) in enumerate(checked, start=1)
            if now.get(item.memory_id) == item
        ]
        if kept:
            await db.executemany(
                "INSERT INTO embeddings (memory_id, fingerprint, dim, vector, seq) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (memory_id) DO UPDATE SET "
                "fingerprint = excluded.fingerprint, dim = excluded.dim, "
                "vector = excluded.vector, seq = excluded.seq",
                [
                    (item.memory_id, fingerprint, int(dim), array.tobytes(), seq)
                    for seq, item, array in kept
                ],
            )
        seq = first + len(checked)
        await db.execute(
            "INSERT INTO meta (key, value) VALUES ('embedding_seq', ?), (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(seq), EMBEDDER_KEY, fingerprint),
        )
    stored = list(dict.fromkeys(item.memory_id for _, item, _ in kept))
    return stored, seq


async def load_vectors(
    fetch: Fetch, fingerprint: str, dim: int, after_seq: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Vectors of ``fingerprint`` with ``seq > after_seq``: ``(ids, matrix, max seq)``."""
    import numpy as np

    rows = await fetch(
        "SELECT memory_id, vector, seq FROM embeddings "
        "WHERE fingerprint = ? AND dim = ? AND seq > ? ORDER BY seq",
        (fingerprint, int(dim), int(after_seq)),
    )
    ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    matrix = np.zeros((len(rows), dim), dtype=np.float32)
    for index, row in enumerate(rows):
        matrix[index] = np.frombuffer(row[1], dtype=np.float32, count=dim)
    max_seq = int(rows[-1][2]) if rows else int(after_seq)
    return ids, matrix, max_seq


async def vectors_for(
    fetch: Fetch, fingerprint: str, dim: int, memory_ids: Iterable[int]
) -> dict[int, np.ndarray]:
    """The stored vectors of some memories (those that have one)."""
    import numpy as np

    wanted = list(dict.fromkeys(int(i) for i in memory_ids))
    found: dict[int, np.ndarray] = {}
    for start in range(0, len(wanted), SQL_CHUNK):
        chunk = wanted[start : start + SQL_CHUNK]
        # The unary "+" keeps SQLite from scanning the (fingerprint, seq) index
        # over every vector: the ids are looked up by primary key (49 ms -> 0.1
        # ms for 15 ids among 100k vectors).
        rows = await fetch(
            "SELECT memory_id, vector FROM embeddings WHERE +fingerprint = ? AND +dim = ? "
            f"AND memory_id IN ({placeholders(len(chunk))})",
            [fingerprint, int(dim), *chunk],
        )
        for row in rows:
            found[int(row[0])] = np.frombuffer(row[1], dtype=np.float32, count=dim)
    return found


async def count_embedded(fetch: Fetch, fingerprint: str) -> int:
    """How many memories hold a vector of ``fingerprint``."""
    rows = await fetch("SELECT count(*) FROM embeddings WHERE fingerprint = ?", (fingerprint,))
    return int(rows[0][0])


async def embedding_ids(fetch: Fetch, fingerprint: str) -> np.ndarray:
    """Ids of the memories holding a vector of ``fingerprint``."""
    import numpy as np

    rows = await fetch("SELECT memory_id FROM embeddings WHERE fingerprint = ?", (fingerprint,))
    return np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))


def decode_vectors(rows: Iterable[Any], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, matrix)`` of ``(memory id, vector blob)`` rows of vectors of ``dim``."""
    import numpy as np

    pairs = list(rows)
    ids = np.fromiter((int(row[0]) for row in pairs), dtype=np.int64, count=len(pairs))
    matrix = np.zeros((len(pairs), dim), dtype=np.float32)
    for position, row in enumerate(pairs):
        matrix[position] = np.frombuffer(row[1], dtype=np.float32, count=dim)
    return ids, matrix


async def counts_by_fingerprint(fetch: Fetch) -> dict[str, int]:
    """How many vectors are stored of each embedder fingerprint."""
    rows = await fetch("SELECT fingerprint, count(*) FROM embeddings GROUP BY fingerprint", ())
    return {str(row[0]): int(row[1]) for row in rows}
