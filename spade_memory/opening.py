"""Opening one agent's memory: its root, its stores, its indexer and its retriever.

:func:`open_manager` is the body of :meth:`MemoryManager.open
<spade_memory.manager.MemoryManager.open>`: it checks the storage paths stay
inside the root, refuses a stem registered to another JID before touching any
file, opens the SQLite base memory (expecting a schema when the agent's memory
existed before), registers the agent, opens the interaction memory and the
background vector indexer, and closes what it opened when a later step fails.
:func:`build_retriever` wires the dual-route retriever over those stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .atoms import AtomBook
from .config import MemoryConfig
from .identity import AgentIdentity, resolve_inside
from .indexing import VectorIndexer
from .retrieval.embedders import resolve_embedder
from .retrieval.entities import GRAPH_VERSION, EntityExtractor
from .retrieval.graph import GraphRetriever
from .retrieval.retriever import Retriever
from .retrieval.tokenizer import Tokenizer
from .storage.base import BaseMemoryStore
from .storage.graph_store import GraphStore
from .storage.interaction import InteractionStore
from .storage.registry import Registry

if TYPE_CHECKING:
    from .manager import MemoryManager

__all__ = ["GRAPH_VERSION_KEY", "build_retriever", "open_manager"]

logger = logging.getLogger(__name__)

GRAPH_VERSION_KEY = "graph_version"


async def open_manager(
    cls: type[MemoryManager],
    identity: AgentIdentity,
    config: MemoryConfig,
    clock: Callable[[], float],
) -> MemoryManager:
    """Open the stores of ``identity``'s memory and the manager ``cls`` over them.

    Raises:
        PathEscapeError: a storage path would leave the root (e.g. a symlink).
        StorageCorrupted: a file was damaged; it was quarantined.
    """
    root: Path | None = None
    db_path = json_path = snapshot_path = backup_dir = None
    registry: Registry | None = None
    registered = False
    if not config.in_memory:
        root = config.resolved_root()
        await asyncio.to_thread(_make_root, root)
        db_path = resolve_inside(root, identity.database_name)
        json_path = resolve_inside(root, identity.interactions_name)
        snapshot_path = resolve_inside(root, identity.snapshot_name)
        backup_dir = resolve_inside(root, "backup")
        # files opened by name beside these (by SQLite, by the notes' lock)
        for side in ("-wal", "-shm", "-journal"):
            resolve_inside(root, identity.database_name + side)
        resolve_inside(root, f".{identity.interactions_name}.lock")
        registry = Registry(root, clock=clock)
        # Read only: a stem registered to another JID is refused before any file
        # is touched; the entry is written once the database exists (below).
        registered = await asyncio.to_thread(registry.registered, identity)
    closers: list[Callable[[], Any]] = []
    try:
        base = await BaseMemoryStore.open(
            db_path,
            agent=identity.jid,
            storage=config.storage,
            categories=config.categories,
            backup_dir=backup_dir,
            now=clock(),
            expect_existing=root is not None
            and await asyncio.to_thread(_memory_existed, root, identity, registered),
            # an empty memory's graph is up to date: no rebuild on first open
            initial_meta={GRAPH_VERSION_KEY: str(GRAPH_VERSION)},
        )
        closers.append(base.aclose)
        if registry is not None and not registered:
            # After the database: a registered agent's memory exists (the mark
            # that tells a lost or emptied database from a new agent).
            await asyncio.to_thread(registry.register, identity)
        interactions = await InteractionStore.open(
            json_path, agent=identity.jid, clock=clock, max_note_chars=config.max_note_chars
        )
        closers.append(interactions.aclose)
        embedder = resolve_embedder(config.embedder)
        indexer = None
        if embedder is not None:
            indexer = await VectorIndexer.open(
                base,
                embedder,
                snapshot_path=snapshot_path,
                storage=config.storage,
                graph=GraphStore(base),
            )
    except BaseException:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                await close()
        raise
    manager = cls(
        identity,
        config,
        base=base,
        interactions=interactions,
        indexer=indexer,
        root=root,
        clock=clock,
    )
    try:
        if await base.meta_get(GRAPH_VERSION_KEY) != str(GRAPH_VERSION):
            await manager.rebuild_graph()
    except BaseException:
        await manager.aclose()
        raise
    # A database this open created holds nothing to check (built in one
    # transaction); opening many new agents in a row skips as many checks.
    if config.maintenance.check_on_open and not base.created:
        manager.maintenance.start_background()  # the memory is usable meanwhile
    logger.debug("opened memory of %s (%s)", identity.jid, root or "in memory")
    return manager


def build_retriever(
    base: BaseMemoryStore,
    tokenizer: Tokenizer,
    *,
    config: MemoryConfig,
    indexer: VectorIndexer | None,
    graph: GraphStore,
    extractor: EntityExtractor,
    atoms: AtomBook,
    clock: Callable[[], float],
) -> Retriever:
    """The dual-route retriever (documents: keywords + vectors; graph) of a memory."""
    embedder = indexer.embedder if indexer is not None else None
    return Retriever(
        base,
        tokenizer,
        config=config.retrieval,
        vectors=indexer,
        fingerprint=embedder.fingerprint if embedder is not None else None,
        dim=embedder.dim if embedder is not None else 0,
        clock=clock,
        graph=GraphRetriever(graph, extractor, config=config.retrieval, vectors=indexer),
        hidden=atoms.hidden if config.atoms.hide_expired else None,
    )


def _memory_existed(root: Path, identity: AgentIdentity, registered: bool) -> bool:
    """Whether the agent's memory was created before, so its database must hold a schema.

    An agent is registered in the root's registry right after its new database
    is created (an interaction file, written by the first note, shows it too,
    as it did in earlier versions, which created that file on open). A database
    quarantined before means the agent was already told its memory is gone, and
    may start afresh.
    """
    if not registered and not (root / identity.interactions_name).exists():
        return False
    told = root.glob(glob.escape(identity.database_name) + ".corrupt-*")
    return next(told, None) is None


def _make_root(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not os.access(root, os.W_OK):
        raise PermissionError(f"memory root {root} is not writable")
