"""How a BM25 keyword query runs over FTS5, so that it stays fast on large memories.

FTS5 answers ``a OR b OR c`` by visiting every row that holds any of the terms
and scoring each with ``bm25()``: about a microsecond per row. A question over
100,000 memories easily names a term held by a quarter of them, and the query
then takes 30 to 50 ms. So the planner looks at each term's document frequency
(from an ``fts5vocab`` table, cached) and:

- when the terms' rows add up to at most ``exact_rows``, runs the one exact OR
  query (every small or medium memory: results exactly as before);
- otherwise narrows from the rarest terms: the rows holding all of the rarest
  four terms, then three, then two (best BM25 first within each), and fills the
  rest from an OR of the rarest terms whose rows fit ``budget_rows``. A memory that
  holds more of the query's rare terms ranks above one that holds fewer, and the
  work is bounded by the rarest terms' rows, not by the most common term's.
  When even the rarest term is held by more than ``budget_rows`` memories (a
  one-word query for a name said everywhere), the fill looks at the newest rows
  only, about ``budget_rows`` of them; older ones are left to the vector route.

Document frequencies move slowly; the cache is dropped when the memory has grown
by a tenth (or 1,000 rows) since it was filled (looked at every few seconds). A
stale frequency only changes which terms are tried first, never what matches. A
term no memory holds is remembered as absent only until the connection writes
anything (its change counter moves) and for a few seconds at most, so a term that
arrives later is never taken for absent; without that counter, an absent term is
looked up again every time.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .sql import placeholders

__all__ = ["KeywordPlanner", "and_query", "or_query"]

logger = logging.getLogger(__name__)

Fetch = Callable[[str, Sequence[Any]], Awaitable[list[Any]]]

_VOCAB = "temp.memories_fts_vocab"
_MAX_AND_TERMS = 4
_CHECK_SECONDS = 5.0  # how often the memory's growth is looked at
_OVERFETCH = 8  # rows asked of FTS5 beyond the limit, for those a filter drops
_FILTER_FIRST = 0.5  # a filter passing fewer rows than this share goes inside the query
_LOOKUP_CHUNK = 500  # terms per vocabulary lookup


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def or_query(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression matching any of ``terms``."""
    return " OR ".join(_quote(term) for term in terms if term)


def and_query(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression matching all of ``terms``."""
    return " AND ".join(_quote(term) for term in terms if term)


class KeywordPlanner:
    """Plans and runs BM25 queries for one store's connection.

    Args:
        fetch: runs one read query on the store's connection.
        bm25_weights: the column weights given to ``bm25()``.
        exact_rows: up to this many matching rows, the exact OR query runs.
        budget_rows: the most rows the OR fill of a narrowed query visits.
        changes: the connection's count of rows written so far (SQLite's
            ``total_changes``), when the store has one connection and it is the
            only writer.
    """

    def __init__(
        self,
        fetch: Fetch,
        *,
        bm25_weights: str,
        exact_rows: int = 3_000,
        budget_rows: int = 2_000,
        changes: Callable[[], int] | None = None,
    ) -> None:
        self._fetch = fetch
        self._weights = bm25_weights
        self._exact_rows = exact_rows
        self._budget_rows = budget_rows
        self._vocab_ready = False
        self._frequencies: dict[str, int] = {}
        self._changes = changes
        self._absent: set[str] = set()  # held by no memory at ``_absent_at`` changes
        self._absent_at = -1
        self._filled_at = 0
        self._max_id = 0
        self._checked_at = -math.inf

    async def search(
        self,
        terms: Sequence[str],
        *,
        where: str,
        params: Sequence[Any],
        limit: int,
        share: float = 1.0,
        joined: str = "memories AS m",
    ) -> list[tuple[int, float]]:
        """``(memory id, score)`` best first for ``terms`` under the SQL filter ``where``.

        ``share`` is about which part of the rows pass ``where`` (a viewer who sees
        a tenth of the memory: 0.1). Below one half the filter runs inside the
        query at once: only the rows it keeps are scored, instead of scoring the
        best rows first and likely running again with the filter inside. It only
        changes the work, never the results. ``joined`` is how the filtered query
        joins ``memories AS m`` (see ``scope_filter.memories_joined``).
        """
        unique = list(dict.fromkeys(term for term in terms if term))
        if not unique or limit <= 0:
            return []
        frequencies, _ = await self.document_frequencies(unique)
        if sum(frequencies.values()) <= self._exact_rows:
            return await self._bm25(
                or_query(unique), where, params, limit, share=share, joined=joined
            )
        present = sorted((t for t in unique if frequencies[t] > 0), key=lambda t: frequencies[t])
        found: dict[int, float] = {}
        for count in range(min(_MAX_AND_TERMS, len(present)), 1, -1):
            hits = await self._bm25(
                and_query(present[:count]), where, params, limit, share=share, joined=joined
            )
            self._merge(found, hits)
            if len(found) >= limit:
                return list(found.items())[:limit]
        chosen: list[str] = []
        rows = 0
        for term in present:
            if chosen and rows + frequencies[term] > self._budget_rows:
                break
            chosen.append(term)
            rows += frequencies[term]
        floor = 0
        if rows > self._budget_rows:  # ids grow with time: keep the newest matches
            floor = int(self._max_id * (1.0 - self._budget_rows / rows))
        self._merge(
            found,
            await self._bm25(
                or_query(chosen), where, params, limit, floor, share=share, joined=joined
            ),
        )
        return list(found.items())[:limit]

    @staticmethod
    def _merge(found: dict[int, float], hits: list[tuple[int, float]]) -> None:
        """Add hits after those found so far, scored below them (order is kept)."""
        ceiling = min(found.values()) if found else None
        for memory_id, score in hits:
            if memory_id in found:
                continue
            if ceiling is not None and score >= ceiling:
                score = ceiling * 0.999
            found[memory_id] = score
            ceiling = score if ceiling is None else min(ceiling, score)

    async def _bm25(
        self,
        match: str,
        where: str,
        params: Sequence[Any],
        limit: int,
        floor: int = 0,
        *,
        share: float = 1.0,
        joined: str = "memories AS m",
    ) -> list[tuple[int, float]]:
        # The best rows by FTS5 alone, then the filter on those few, in the same
        # query: joining ``memories`` for every matching row doubled the cost of a
        # query (a row lookup per match), so the join is on the cut rows only (a
        # subquery with a LIMIT is not flattened into the join). Only if the filter
        # drops so many that fewer than ``limit`` remain does the query run again
        # with the filter inside.
        fetched = limit + _OVERFETCH + limit // 2
        top = (
            f"SELECT rowid, bm25(memories_fts, {self._weights}) AS score FROM memories_fts "
            "WHERE memories_fts MATCH ? AND rowid >= ? ORDER BY score LIMIT ?"
        )
        if where == "1":
            rows = await self._fetch(top, [match, int(floor), int(fetched)])
            return [(int(row[0]), -float(row[1])) for row in rows[:limit]]
        if share < _FILTER_FIRST:
            # Most rows fail the filter (a viewer who sees a small part of the
            # memory): filtered inside, only the rows it keeps are scored.
            return await self._filtered(match, where, params, limit, floor, joined)
        # NOT INDEXED: by primary key. Otherwise SQLite may pick the (status, ...)
        # index for the filter and walk every active memory (15 ms at 100k).
        rows = await self._fetch(
            f"SELECT h.rowid, h.score, coalesce({where}, 0) FROM ({top}) AS h "
            "LEFT JOIN memories AS m NOT INDEXED ON m.id = h.rowid",
            [*params, match, int(floor), int(fetched)],
        )
        # The subquery drives the join, so its order (ties included) comes through;
        # the sort (stable) only guards that.
        rows.sort(key=lambda row: float(row[1]))
        hits = [(int(row[0]), -float(row[1])) for row in rows if row[2]]
        if len(hits) < limit and len(rows) == fetched:
            return await self._filtered(match, where, params, limit, floor, joined)
        return hits[:limit]

    async def _filtered(
        self,
        match: str,
        where: str,
        params: Sequence[Any],
        limit: int,
        floor: int,
        joined: str = "memories AS m",
    ) -> list[tuple[int, float]]:
        """The best ``limit`` rows matching ``match`` that pass ``where`` (inside the query)."""
        rows = await self._fetch(
            f"SELECT f.rowid, bm25(memories_fts, {self._weights}) AS rank "
            f"FROM memories_fts AS f JOIN {joined} ON m.id = f.rowid "
            f"WHERE memories_fts MATCH ? AND f.rowid >= ? AND {where} "
            "ORDER BY rank LIMIT ?",
            [match, int(floor), *params, int(limit)],
        )
        return [(int(row[0]), -float(row[1])) for row in rows]

    async def document_frequencies(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """How many memories hold each term (cached; see the module docstring), and
        the memory's size (its largest id, refreshed every few seconds); ``({}, 0)``
        when the frequencies cannot be read."""
        try:
            return await self._document_frequencies(terms), self._max_id
        except Exception as exc:  # e.g. the temp vocabulary table was rolled back
            logger.debug("document frequencies unavailable (%s)", exc)
            self._vocab_ready = False
            return {}, 0

    async def _document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        if not self._vocab_ready:
            await self._fetch(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {_VOCAB} "
                "USING fts5vocab(main, memories_fts, row)",
                (),
            )
            self._vocab_ready = True
        now = time.monotonic()
        if now - self._checked_at >= _CHECK_SECONDS:  # at most one look per interval
            self._checked_at = now
            self._absent.clear()  # and whatever another connection wrote is seen
            rows = await self._fetch("SELECT max(rowid) FROM memories", ())
            size = int(rows[0][0] or 0) if rows else 0
            self._max_id = size
            if size - self._filled_at > max(1_000, self._filled_at // 10):
                self._frequencies.clear()
                self._filled_at = size
        changes = self._changed()
        if changes != self._absent_at:
            self._absent.clear()
            self._absent_at = changes
        missing = [
            term for term in terms if term not in self._frequencies and term not in self._absent
        ]
        if missing:
            found = await self._fetch(
                f"SELECT term, doc FROM {_VOCAB} WHERE term IN ({placeholders(len(missing))})",
                missing,
            )
            self._frequencies.update((str(row[0]), int(row[1])) for row in found if row[1])
            if changes >= 0:
                # Read at ``changes`` or later: absent until the next write at least.
                self._absent.update(term for term in missing if term not in self._frequencies)
        return {term: self._frequencies.get(term, 0) for term in terms}

    async def held_terms(self, terms: Sequence[str]) -> dict[str, int]:
        """The document frequency of each of ``terms`` some memory holds (absent
        terms left out), read from the vocabulary now: nothing is cached, so that
        hundreds of looked-up respellings do not crowd the frequency cache."""
        await self.document_frequencies(())  # makes the vocabulary table
        unique = list(dict.fromkeys(term for term in terms if term))
        found: dict[str, int] = {}
        for start in range(0, len(unique), _LOOKUP_CHUNK):
            chunk = unique[start : start + _LOOKUP_CHUNK]
            rows = await self._fetch(
                f"SELECT term, doc FROM {_VOCAB} WHERE term IN ({placeholders(len(chunk))})",
                chunk,
            )
            found.update((str(row[0]), int(row[1])) for row in rows if row[1])
        return found

    def _changed(self) -> int:
        """The connection's write count, or -1 when unknown (absent terms are then
        never remembered)."""
        if self._changes is None:
            return -1
        try:
            return int(self._changes())
        except Exception:  # e.g. the connection is closing
            return -1
