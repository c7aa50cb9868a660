"""Small SQL-building helpers shared by the stores: placeholders, chunks, filters."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from ..models import Viewer
from .scope_filter import visible_clause

__all__ = ["SQL_CHUNK", "chunks", "placeholders", "status_category_filter"]

T = TypeVar("T")

SQL_CHUNK = 500
"""Most ids bound in one ``IN (...)``: far below SQLite's variable limit."""


def placeholders(count: int) -> str:
    """``?,?,...`` for ``count`` bound values."""
    return ",".join("?" * count)


def chunks(items: Sequence[T], size: int = SQL_CHUNK) -> Iterable[Sequence[T]]:
    """``items`` in consecutive slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def status_category_filter(
    categories: Sequence[str] | None,
    statuses: Sequence[str] | None,
    alias: str = "",
    viewer: Viewer | None = None,
) -> tuple[str, list[Any]]:
    """A ``WHERE`` clause (``"1"`` when empty) and its parameters for memory filters.

    ``alias`` prefixes the column names, e.g. ``"m."``; ``viewer`` keeps only the
    memories it sees (:func:`~spade_memory.storage.scope_filter.visible_clause`).
    """
    clauses: list[str] = []
    params: list[Any] = []
    if viewer is not None:
        clause, values = visible_clause(viewer, alias)
        clauses.append(clause)
        params.extend(values)
    if statuses:
        clauses.append(f"{alias}status IN ({placeholders(len(statuses))})")
        params.extend(statuses)
    if categories:
        clauses.append(f"{alias}category IN ({placeholders(len(categories))})")
        params.extend(categories)
    return (" AND ".join(clauses) or "1"), params
