"""Opening one agent's memory: its root, its stores, its indexer, its engine.

:func:`open_engine` checks the storage paths stay inside the root, refuses a stem
registered to another JID before touching any file, opens the SQLite base memory
(expecting a schema when the agent's memory existed before), registers the agent,
opens the interaction memory and the background vector indexer, and closes what
it opened when a later step fails. :meth:`MemoryManager.open
<spade_memory.manager.MemoryManager.open>` builds on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import MemoryConfig
from ..embedding import resolve_embedder
from ..identity import AgentIdentity, resolve_inside
from ..storage.base import BaseMemoryStore
from ..storage.graph_store import GraphStore
from ..storage.interaction import InteractionStore
from ..storage.registry import Registry
from ..text.extraction import GRAPH_VERSION
from .engine import Engine
from .indexer import VectorIndexer

__all__ = ["GRAPH_VERSION_KEY", "graph_outdated", "open_engine"]

logger = logging.getLogger(__name__)

GRAPH_VERSION_KEY = "graph_version"


async def open_engine(
    identity: AgentIdentity, config: MemoryConfig, clock: Callable[[], float]
) -> Engine:
    """Open the stores of ``identity``'s memory and the engine over them.

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
                embed_pending=config.maintenance.embed_on_open,
            )
    except BaseException:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                await close()
        raise
    engine = Engine(
        identity,
        config,
        base=base,
        interactions=interactions,
        indexer=indexer,
        root=root,
        clock=clock,
    )
    logger.debug("opened memory of %s (%s)", identity.jid, root or "in memory")
    return engine


async def graph_outdated(engine: Engine) -> bool:
    """Whether the stored graph was made by another extraction version (or none)."""
    return await engine.base.meta_get(GRAPH_VERSION_KEY) != str(GRAPH_VERSION)


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
