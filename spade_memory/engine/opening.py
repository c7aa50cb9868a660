"""Opening one agent's memory: its root, its stores, its indexer, its engine.

:func:`open_engine` checks the storage paths stay inside the root, refuses a stem
registered to another JID before touching any file, reads the traces the agent's
memory left in the root (:mod:`spade_memory.storage.traces`), restores or refuses
a known agent's lost database or notes file (:mod:`.recovery`), opens the SQLite
base memory (expecting a schema when the agent's memory existed before),
registers the agent, opens the interaction memory (its database records once the
notes file exists, so that a vanished one is noticed) and the background vector
indexer, warns when a known agent starts on an empty memory, and closes what it
opened when a later step fails. :meth:`MemoryManager.open
<spade_memory.manager.MemoryManager.open>` builds on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from ..config import MemoryConfig
from ..embedding import resolve_embedder
from ..errors import StorageError
from ..identity import AgentIdentity, resolve_inside
from ..models import MemoryRecovery
from ..storage.base import BaseMemoryStore
from ..storage.graph_store import GraphStore
from ..storage.interaction import InteractionStore
from ..storage.memory_rows import INDEX_TEXT_VERSION
from ..storage.registry import Registry
from ..storage.schema import GRAPH_VERSION_KEY, INDEX_TEXT_VERSION_KEY, LOST_KEY
from ..storage.traces import Traces, find_traces
from ..text.extraction import GRAPH_VERSION
from ..text.tokenizer import use_dictionary_cache
from .engine import Engine, checked_clock
from .indexer import VectorIndexer
from .recovery import NOTES_KEY, settle_lost_database, settle_lost_notes

__all__ = [
    "GRAPH_VERSION_KEY",
    "graph_outdated",
    "index_text_outdated",
    "mark_index_text_current",
    "open_engine",
]

logger = logging.getLogger(__name__)


DICTIONARY_CACHE = "cache"
"""The folder under the root where jieba keeps the cache of its dictionary."""


async def open_engine(
    identity: AgentIdentity,
    config: MemoryConfig,
    clock: Callable[[], float],
    *,
    start_empty: bool = False,
) -> Engine:
    """Open the stores of ``identity``'s memory and the engine over them.

    A known agent whose database or notes file is gone is restored from a
    backup, refused, or started empty (:mod:`.recovery`); what was done is in
    ``Engine.recoveries``.

    Args:
        identity: the agent.
        config: how the memory is kept.
        clock: the time source.
        start_empty: accept an empty memory if the agent's memory is gone (as
            ``config.start_empty``).

    Raises:
        PathEscapeError: a storage path would leave the root (e.g. a symlink).
        StorageCorrupted: a file was damaged; it was quarantined.
        MemoryLost: the agent's memory is gone and was not restored.
    """
    start_empty = start_empty or config.start_empty
    clock = checked_clock(clock)  # every part reads the time through it
    release_cache = use_dictionary_cache(None)  # nothing held (in-memory mode)
    root: Path | None = None
    db_path = json_path = snapshot_path = backup_dir = None
    registry: Registry | None = None
    registered = False
    traces: Traces | None = None
    recoveries: list[MemoryRecovery] = []
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
        # jieba's dictionary cache, if it is loaded while this memory is open
        # (in-memory mode writes none; released when the engine closes)
        release_cache = use_dictionary_cache(resolve_inside(root, DICTIONARY_CACHE))
        registry = Registry(root, clock=clock)
        # Read only: a stem registered to another JID is refused before any file
        # is touched; the entry is written once the database exists (below).
        registry_missing = not await asyncio.to_thread(os.path.lexists, registry.path)
        registered = await asyncio.to_thread(registry.registered, identity)  # rebuilt if missing
        traces = await asyncio.to_thread(
            _traces_of, root, identity, registered=registered, registry_missing=registry_missing
        )
        if traces and not db_path.exists():
            recovery = await asyncio.to_thread(
                settle_lost_database,
                root,
                identity,
                traces,
                on_damage=config.on_damage,
                start_empty=start_empty,
            )
            if recovery is not None:
                recoveries.append(recovery)
    closers: list[Callable[[], Any]] = []
    try:
        base = await BaseMemoryStore.open(
            db_path,
            agent=identity.jid,
            storage=config.storage,
            categories=config.categories,
            backup_dir=backup_dir,
            now=clock(),
            # a known agent's database must hold a schema, unless it starts empty
            expect_existing=bool(traces)
            and not any(r.action == "started_empty" for r in recoveries),
            # an empty memory's graph is up to date: no rebuild on first open
            initial_meta={
                GRAPH_VERSION_KEY: str(GRAPH_VERSION),
                INDEX_TEXT_VERSION_KEY: str(INDEX_TEXT_VERSION),
                **(
                    {LOST_KEY: repr(clock())}
                    if any(r.action == "started_empty" for r in recoveries)
                    else {}
                ),
            },
        )
        closers.append(base.aclose)
        if not base.created:  # a migration may have asked for claims to be settled
            await base.settle_claims_if_asked()
        if registry is not None and not registered:
            # After the database: a registered agent's memory exists (the mark
            # that tells a lost or emptied database from a new agent).
            await asyncio.to_thread(registry.register, identity)
        notes_written = False
        if root is not None and json_path is not None and traces is not None:
            notes_written = await base.meta_get(NOTES_KEY) == "1"
            if notes_written and not json_path.exists():
                notes_recovery = await asyncio.to_thread(
                    settle_lost_notes,
                    root,
                    identity,
                    await asyncio.to_thread(_listed, root, identity, traces),
                    on_damage=config.on_damage,
                    start_empty=start_empty,
                )
                recoveries.append(notes_recovery)
                if notes_recovery.action == "started_empty":
                    await base.meta_set(NOTES_KEY, "0")
                    notes_written = False

        async def notes_file_created() -> None:
            await base.meta_set(NOTES_KEY, "1")

        interactions = await InteractionStore.open(
            json_path,
            agent=identity.jid,
            clock=clock,
            max_note_chars=config.max_note_chars,
            on_file_created=None if json_path is None else notes_file_created,
        )
        closers.append(interactions.aclose)
        if json_path is not None and not notes_written and interactions.file_exists:
            try:  # written by an earlier version, or restored
                await notes_file_created()
            except (StorageError, sqlite3.Error) as exc:
                logger.warning("could not record that %s exists (%s)", json_path, exc)
        if root is not None and traces and not base.created:
            await _warn_if_empty(base, root, identity, traces, recoveries)
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
        release_cache()
        raise
    engine = Engine(
        identity,
        config,
        base=base,
        interactions=interactions,
        indexer=indexer,
        root=root,
        clock=clock,
        recoveries=tuple(recoveries),
        on_close=release_cache,
    )
    logger.debug("opened memory of %s (%s)", identity.jid, root or "in memory")
    return engine


async def graph_outdated(engine: Engine) -> bool:
    """Whether the stored graph was made by another extraction version (or none)."""
    return await engine.base.meta_get(GRAPH_VERSION_KEY) != str(GRAPH_VERSION)


async def index_text_outdated(engine: Engine) -> bool:
    """Whether the keyword rows were made by another index-text version (or none)."""
    return await engine.base.meta_get(INDEX_TEXT_VERSION_KEY) != str(INDEX_TEXT_VERSION)


async def mark_index_text_current(engine: Engine) -> None:
    """Record that every keyword row is of the current index-text version."""
    await engine.base.meta_set(INDEX_TEXT_VERSION_KEY, str(INDEX_TEXT_VERSION))


def _traces_of(
    root: Path, identity: AgentIdentity, *, registered: bool, registry_missing: bool
) -> Traces:
    """The traces of the agent's memory, listed when a decision needs them.

    The root and its backups are listed when the database is missing and the
    cheap traces (registry, notes, snapshot) show a known agent, or when the
    registry itself is gone (then only a listing can tell a lost memory from a
    new one). A new agent in a root with a registry costs no listing.
    """
    traces = find_traces(root, identity, registered=registered, listing=False)
    database_missing = not (root / identity.database_name).exists()
    if (traces and database_missing) or registry_missing:
        return _listed(root, identity, traces)
    return traces


def _listed(root: Path, identity: AgentIdentity, traces: Traces) -> Traces:
    if traces.listed:
        return traces
    return find_traces(root, identity, registered=traces.registered, listing=True)


async def _warn_if_empty(
    base: BaseMemoryStore,
    root: Path,
    identity: AgentIdentity,
    traces: Traces,
    recoveries: list[MemoryRecovery],
) -> None:
    """Log a WARNING when a known agent starts on the empty memory that replaced its
    lost one (every time, until it holds something again).

    A memory empty by the agent's own doing (it never stored anything, forgot all it
    held, or keeps only notes) is no loss and is not warned about.
    """
    lost = await base.meta_get(LOST_KEY)
    if lost is None:
        return
    if await base.has_memories() or await base.has_messages():
        await base.meta_delete(LOST_KEY)  # it remembers again
        return  # kept conversations not formed yet are a memory too
    if any(r.file == "database" and r.action == "started_empty" for r in recoveries):
        return  # said already, at length
    listed = await asyncio.to_thread(_listed, root, identity, traces)
    logger.warning(
        "the memory of %s starts with no memories: they were lost%s and it was started "
        "empty in %s (%s); see the backups (spade-memory backup %s --list --root %s)",
        identity.jid,
        _since(lost),
        root,
        listed.describe(),
        identity.jid,
        root,
    )


def _since(lost: str) -> str:
    """`` on <date>`` for a :data:`LOST_KEY` value, or nothing if it is no time."""
    try:
        return " on " + datetime.fromtimestamp(float(lost)).isoformat(sep=" ", timespec="seconds")
    except (ValueError, OverflowError, OSError):
        return ""


def _make_root(root: Path) -> None:
    """Create the memory root (0700) if it is missing.

    Raises:
        StorageError: it is a file, lies under one, cannot be made, or is not writable.
    """
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:
        raise StorageError(f"memory root {root} is a file, not a folder") from None
    except OSError as exc:
        raise StorageError(f"memory root {root} cannot be made: {exc.strerror or exc}") from None
    if not os.access(root, os.W_OK):
        raise StorageError(f"memory root {root} is not writable")
