"""What one memory's text yields for the graph tables: entities, relations, atoms.

Plain values made by :mod:`spade_memory.text.extraction` and
:mod:`spade_memory.text.atoms`, written by :mod:`spade_memory.storage.graph`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["AtomRecord", "Entity", "MemoryGraph", "Relation"]


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
        given_entities: the entity names the caller named for the memory (kept with
            it, so that extracting its graph again gives the same).
        given_relations: the relations the caller named (``{source, relation, target}``).
    """

    entities: tuple[Entity, ...] = ()
    relations: tuple[Relation, ...] = ()
    summary: str = ""
    relation_type: str | None = None
    atoms: tuple[AtomRecord, ...] = ()
    reinforcement_factor: float = 0.5
    dormant_fraction: float = 0.5
    given_entities: tuple[str, ...] = ()
    given_relations: tuple[Mapping[str, str], ...] = ()
