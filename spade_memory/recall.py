"""Recall through atoms: what a memory gives back for a prompt, atom by atom.

A memory's text is cut into atoms (:mod:`spade_memory.atoms`), each with a
lifetime; an atom can lapse, be superseded or be forgotten on its own.
:class:`RecallMixin` holds the :class:`~spade_memory.manager.MemoryManager`
methods that read and change atoms: :meth:`~RecallMixin.recall` (a search whose
results carry only their live atoms), :meth:`~RecallMixin.recall_memory`,
:meth:`~RecallMixin.live_atoms`, :meth:`~RecallMixin.atoms`,
:meth:`~RecallMixin.forget_atom` and :meth:`~RecallMixin.refresh_atoms`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .atoms import Atom, AtomBook
from .models import Memory, SearchResult
from .validation import check_id

if TYPE_CHECKING:
    from .retrieval.retriever import Retriever

__all__ = ["RecallMixin"]


class RecallMixin:
    """The atom methods of :class:`~spade_memory.manager.MemoryManager`."""

    if TYPE_CHECKING:  # provided by MemoryManager
        _atoms: AtomBook
        _clock: Callable[[], float]
        _retriever: Retriever

        def _check_open(self) -> None: ...

        def _after_write(self) -> None: ...

        async def get(self, memory_id: int) -> Memory: ...

        async def search(
            self,
            query: str,
            *,
            limit: int = 5,
            category: str | None = None,
            categories: Sequence[str] | None = None,
            explain: bool = False,
        ) -> list[SearchResult]: ...

    async def live_atoms(self, memory_id: int) -> list[Atom]:
        """The atoms of a memory that are live now, in order (what to recall of it).

        A memory stored before atoms existed has none; recall its whole content.
        """
        self._check_open()
        return await self._atoms.live(check_id(memory_id), self._clock())

    async def recall(
        self,
        query: str,
        *,
        limit: int = 5,
        category: str | None = None,
        categories: Sequence[str] | None = None,
    ) -> list[SearchResult]:
        """:meth:`search` for prompt assembly: each memory carries only its live atoms.

        A memory whose atoms are all live comes back as stored; one with some atoms
        no longer live comes back with the text of its live ones as content, in
        order (a superseded or lapsed sentence is left out, and a memory with none
        live is left out); one stored before atoms existed comes back whole.
        """
        results = await self.search(query, limit=limit, category=category, categories=categories)
        found = await self._atoms.atoms([r.memory.id for r in results], self._clock())
        recalled: list[SearchResult] = []
        for result in results:
            memory = _live_view(result.memory, found.get(result.memory.id))
            if memory is result.memory:
                recalled.append(result)
            elif memory is not None:
                recalled.append(dataclasses.replace(result, memory=memory))
        return recalled

    async def recall_memory(self, memory_id: int) -> Memory | None:
        """One memory as :meth:`recall` would give it: only its live atoms, and
        ``None`` when it is not active or nothing of it is live. Raises MemoryNotFound."""
        memory = await self.get(memory_id)
        if memory.status != "active":
            return None
        found = await self._atoms.atoms([memory.id], self._clock())
        return _live_view(memory, found.get(memory.id))

    async def atoms(self, memory_id: int) -> list[Atom]:
        """Every atom of a memory with its status now (active, dormant, superseded, ...)."""
        self._check_open()
        found = await self._atoms.atoms([check_id(memory_id)], self._clock())
        return found.get(memory_id, [])

    async def forget_atom(self, atom_id: int) -> Atom:
        """Mark one atom forgotten, keeping its memory. Raises MemoryNotFound."""
        self._check_open()
        atom = await self._atoms.forget(check_id(atom_id))
        self._after_write()
        return atom

    async def refresh_atoms(self) -> dict[str, int]:
        """Record atoms whose lifetime lapsed as dormant or expired; returns the counts."""
        self._check_open()
        changed = await self._atoms.refresh(self._clock())
        if any(changed.values()):
            self._retriever.invalidate()
        return changed


def _live_view(memory: Memory, atoms: list[Atom] | None) -> Memory | None:
    """``memory`` with only its live atoms as content; itself when all are live (or it
    has none: stored before atoms existed); ``None`` when none is."""
    if atoms is None:
        return memory
    live = [atom.text for atom in atoms if atom.live]
    if len(live) == len(atoms):
        return memory  # the text as it was stored
    return dataclasses.replace(memory, content=" ".join(live)) if live else None
