"""The visibility rule of scopes as SQL: what a viewer may see, inside every query.

:meth:`~spade_memory.models.Viewer.sees` is the rule; :func:`visible_clause` is the
same rule as a ``WHERE`` term over the ``memories`` table, so that a filtered read
cuts its candidates after the filter, never before (no result is lost to it).
Without a viewer (the agent itself) the clause is ``"1"`` and queries run as they
did before scopes. Each column is compared with ``IS``, so the clause is never
``NULL`` and may be negated or coalesced safely.
"""

from __future__ import annotations

from typing import Any

from ..models import Memory, Viewer

__all__ = [
    "memories_joined",
    "readers_key",
    "same_scope",
    "told_in_one_scope",
    "visible_clause",
]


def memories_joined(viewer: Viewer | None) -> str:
    """How a query joins ``memories AS m`` for a filter: by the index holding every
    column the filter reads (``memories_scope``) when a viewer's filter runs, as
    before (by rowid) otherwise. A filter that drops most candidates makes a
    route walk many more of them; each then costs an index probe, not a row read."""
    return "memories AS m" if viewer is None else "memories AS m INDEXED BY memories_scope"


def visible_clause(viewer: Viewer | None, alias: str = "") -> tuple[str, list[Any]]:
    """A ``WHERE`` term (``"1"`` for no viewer) and its parameters: the memories
    ``viewer`` sees (:meth:`Viewer.sees`).

    ``alias`` prefixes the column names, e.g. ``"m."``; without one the columns
    are those of ``memories`` itself.
    """
    if viewer is None:
        return "1", []
    table = alias[:-1] if alias.endswith(".") else "memories"
    params: list[Any] = []
    # A conversation memory only inside its own conversation (none: nowhere).
    if viewer.conversation_id is None:
        within = f"{alias}visibility != 'conversation'"
    else:
        within = f"({alias}visibility != 'conversation' OR {alias}source_conversation IS ?)"
        params.append(viewer.conversation_id)
    # What the viewer told is its own; the rest only of its categories, and only
    # if global, of its conversation, or shared with it.
    params.append(viewer.jid)
    others = (
        f"({alias}visibility IN ('global', 'conversation') OR ({alias}visibility = 'shared' "
        "AND EXISTS (SELECT 1 FROM memory_readers AS r "
        f"WHERE r.memory_id = {table}.id AND r.reader = ?)))"
    )
    if viewer.categories is not None:
        categories = sorted(viewer.categories)
        if categories:
            marks = ",".join("?" * len(categories))
            others = f"{alias}category IN ({marks}) AND {others}"
            params.extend(categories)
        else:
            others = "0"
    if others != "0":
        params.append(viewer.jid)
    return f"({within} AND ({alias}owner IS ? OR ({others})))", params


def readers_key(alias: str) -> str:
    """The readers of memory ``alias`` (an alias of ``memories``) as one JSON array,
    sorted: equal for two memories exactly when their readers are."""
    return (
        "(SELECT json_group_array(reader) FROM (SELECT reader FROM memory_readers "
        f"WHERE memory_id = {alias}.id ORDER BY reader))"
    )


def same_scope(a: str, b: str) -> str:
    """A term true when memories ``a`` and ``b`` (aliases of ``memories``) are told in
    one scope: the same owner and visibility and, for conversation memories, the same
    conversation, for shared ones the same readers. A newer claim supersedes older
    atoms only within one scope."""
    return (
        f"({a}.owner IS {b}.owner AND {a}.visibility = {b}.visibility "
        f"AND ({b}.visibility != 'conversation' "
        f"OR {a}.source_conversation IS {b}.source_conversation) "
        f"AND ({b}.visibility != 'shared' OR {readers_key(a)} = {readers_key(b)}))"
    )


def told_in_one_scope(a: Memory, b: Memory) -> bool:
    """:func:`same_scope` on two memories in hand (for claims not written yet)."""
    return (
        a.scope.owner == b.scope.owner
        and a.scope.visibility == b.scope.visibility
        and (b.scope.visibility != "conversation" or a.source_conversation == b.source_conversation)
        and (b.scope.visibility != "shared" or a.scope.shared_with == b.scope.shared_with)
    )
