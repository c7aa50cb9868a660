"""The graph rebuild: into a shadow generation, switched atomically once complete and verified.

The graph tables (nodes, edges, entries with their trigram text and vectors, and
atoms) are built again from the memories into a shadow database file beside the
memory's own (``<database>.graph-rebuild``; a temporary file for an in-memory
memory), through a connection of its own: the live graph keeps answering
searches, and the agent keeps writing, for the whole rebuild. Triggers on
``memories`` log every memory inserted, changed or deleted meanwhile; the log is
replayed into the shadow. Then, behind the write lock, the last logged writes are
applied, the shadow is attached and verified against the memories, and in one
transaction the live graph tables are emptied and filled from it. Entry vectors
whose summary did not change are kept (the others are embedded again in the
background), and so is the status of atoms their owner forgot; every other atom
starts its life again, as extracted.

Each batch commits together with its checkpoint in the shadow file, so an
interrupted rebuild (an error, a crash, a closed memory) resumes after the last
batch it committed; the change log keeps catching writes while it waits.

Disk space: while it runs, the shadow holds a second full copy of the graph, and
the switch writes the graph once more into the write-ahead log. A rebuild needs
free space of about twice the size of the graph tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import StorageError
from ..models import Memory
from ..storage import graph_shadow
from ..storage.graph_shadow import GraphShadowFile, ShadowLocked, ShadowMismatch
from ..text.extraction import GRAPH_VERSION
from ..text.graph import MemoryGraph

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["GraphRebuild", "GraphRebuildResult", "shadow_path"]

logger = logging.getLogger(__name__)

CHECKPOINT_KEY = "rebuild:graph"
_LOG = "rebuild_log_graph"
# what a memory's graph is made of: a change of these is replayed
_WATCHED = "content, category, importance"
_SUFFIX = ".graph-rebuild"
_MAX_REPLAY_ROUNDS = 20

Report = Callable[[int, int], Awaitable[None]]
"""Told ``(done, total)`` after each batch."""


def shadow_path(database: Path | None) -> Path | None:
    """Where the shadow of a database file is built (``None`` for an in-memory one)."""
    return None if database is None else database.with_name(database.name + _SUFFIX)


def _remove_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


@dataclass(frozen=True, slots=True)
class GraphRebuildResult:
    """What one graph rebuild did (see :class:`~spade_memory.maintenance.RebuildResult`)."""

    processed: int
    replayed: int
    resumed: bool
    generation: int


class GraphRebuild:
    """One rebuild of a memory's graph into a shadow, resuming an interrupted one.

    Args:
        engine: the open memory.
        batch: memories per batch (one shadow transaction and checkpoint each).
    """

    def __init__(self, engine: Engine, *, batch: int) -> None:
        self._engine = engine
        self._base = engine.base
        self._batch = batch
        self._shadow = GraphShadowFile(engine.base.agent)

    async def run(self, report: Report) -> GraphRebuildResult:
        """Rebuild the graph; see the module docstring.

        Raises:
            StorageError: the shadow failed verification (it was dropped and the
                live graph kept: run the rebuild again) or the database failed.
        """
        path, resumed = await self._begin()
        try:
            state = await self._state()
            cursor, done, last = int(state["cursor"]), int(state["done"]), int(state["last"])
            total = await self._base.count(statuses=None)
            processed = 0
            await report(min(done, total), total)
            while cursor < last:
                ids = await graph_shadow.memory_ids_between(self._base, cursor, last, self._batch)
                if not ids:
                    break
                cursor, done = ids[-1], done + len(ids)
                processed += await self._write(ids, cursor=cursor, done=done)
                await report(min(done, total), total)
            replayed = await self._replay()
            try:
                generation, finals = await self._switch(path)
            except ShadowMismatch as exc:
                await self.abandon()
                raise StorageError(
                    f"the rebuilt graph of {self._base.agent} did not match its memories "
                    f"({exc}); it was dropped and the live graph kept: run the rebuild again"
                ) from exc
        finally:
            await self._close_shadow()
        _remove_files(path)
        await report(total, total)
        return GraphRebuildResult(processed, replayed + finals, resumed, generation)

    async def abandon(self) -> None:
        """Drop an unfinished rebuild: its shadow file, its change log and its checkpoint."""
        await self._close_shadow()
        raw = await self._base.meta_get(CHECKPOINT_KEY)
        await graph_shadow.drop_change_log_of(self._base, _LOG, checkpoint_key=CHECKPOINT_KEY)
        known = _checkpoint_shadow(raw) or shadow_path(self._base.path)
        if known is not None:
            _remove_files(known)

    # -- the shadow ----------------------------------------------------------------

    async def _begin(self) -> tuple[Path, bool]:
        """Open the shadow to resume, or start a new one; returns its path and whether resumed."""
        raw = await self._base.meta_get(CHECKPOINT_KEY)
        path = _checkpoint_shadow(raw)
        if raw is not None and path is not None and await self._resumable(raw, path):
            logger.info("%s: resuming the graph rebuild", self._base.agent)
            return path, True
        if raw is not None:
            logger.info("%s: restarting a graph rebuild that cannot resume", self._base.agent)
            await self._close_shadow()
            if path is not None:
                _remove_files(path)
        path = shadow_path(self._base.path)
        if path is None:
            handle, name = tempfile.mkstemp(prefix="spade-memory-graph-", suffix=_SUFFIX)
            os.close(handle)
            path = Path(name)
        _remove_files(path)
        token = uuid.uuid4().hex
        tables = await self._table_sql()
        last = await graph_shadow.max_memory_id(self._base)
        await self._shadow.open(path)
        state = {"token": token, "cursor": 0, "done": 0, "last": last}
        state["version"] = GRAPH_VERSION
        state["schema"] = json.dumps(tables)
        await self._shadow.create(tables, {key: str(value) for key, value in state.items()})
        checkpoint = {"shadow": str(path), "token": token, "started_at": self._engine.now()}
        await graph_shadow.start_change_log(
            self._base,
            _LOG,
            _WATCHED,
            checkpoint_key=CHECKPOINT_KEY,
            checkpoint=json.dumps(checkpoint),
        )
        return path, False

    async def _resumable(self, raw: str, path: Path) -> bool:
        if not path.exists():
            return False
        if not await graph_shadow.change_log_exists(self._base, _LOG):
            return False
        try:
            await self._shadow.open(path)
            state = await self._shadow.state()
            checkpoint = json.loads(raw)
        except ShadowLocked as exc:
            await self._close_shadow()
            raise StorageError(
                f"the graph of {self._base.agent} is being rebuilt by another process "
                "that opened the same memory; wait for it to finish"
            ) from exc
        except (ValueError, KeyError, StorageError):
            return False
        return bool(
            state.get("token") == checkpoint.get("token")
            and state.get("version") == str(GRAPH_VERSION)
            and state.get("schema") == json.dumps(await self._table_sql())
        )

    async def _table_sql(self) -> list[list[str]]:
        """``[name, sql]`` of the live graph tables, then of their indexes."""
        return await graph_shadow.graph_table_sql(self._base)

    async def _close_shadow(self) -> None:
        await self._shadow.close()

    async def _state(self) -> dict[str, str]:
        return await self._shadow.state()

    async def _graphs(self, ids: list[int]) -> tuple[list[Memory], list[MemoryGraph]]:
        found = await self._base.get_many(ids)
        memories = [found[i] for i in sorted(found)]
        given = await self._base.given(ids)  # named when stored: extracted the same
        extract = self._engine.graph_for
        graphs = await asyncio.to_thread(lambda: [extract(m, given.get(m.id)) for m in memories])
        return memories, graphs

    async def _write(
        self, ids: list[int], *, cursor: int | None = None, done: int = 0, replace: bool = False
    ) -> int:
        """Write the graphs of these memories into the shadow (with the checkpoint, if any).

        ``replace`` first removes what the shadow holds for them (replayed writes).
        """
        memories, graphs = await self._graphs(ids)
        await self._shadow.write(
            list(zip(memories, graphs, strict=True)),
            replace=ids if replace else (),
            checkpoint=None if cursor is None else (cursor, done),
        )
        return len(memories)

    async def _replay(self) -> int:
        """Apply the memories logged since the rebuild began (outside the write lock)."""
        replayed = 0
        for _ in range(_MAX_REPLAY_ROUNDS):
            upto, ids = await graph_shadow.logged(self._base, _LOG, self._batch)
            if not ids:
                break
            await self._write(ids, replace=True)
            await graph_shadow.forget_logged(self._base, _LOG, upto, ids)
            replayed += len(ids)
        return replayed

    # -- the switch ----------------------------------------------------------------

    async def _switch(self, path: Path) -> tuple[int, int]:
        """Apply the last logged writes, verify the shadow and make it the live graph."""
        async with graph_shadow.switching(self._base, _LOG) as switch:
            # Behind the write lock no memory changes: the log is final.
            ids = await switch.logged_ids()
            if ids:
                await self._write(ids, replace=True)
            await self._close_shadow()
            generation = await switch.swap_from(
                path,
                checkpoint_key=CHECKPOINT_KEY,
                version_key="graph_version",
                version=str(GRAPH_VERSION),
            )
        self._engine.notify_changed()  # cached searches dropped; new entries embedded
        logger.info("%s: graph rebuilt (generation %d)", self._base.agent, generation)
        return generation, len(ids)


def _checkpoint_shadow(raw: str | None) -> Path | None:
    """The shadow file a checkpoint names (``None`` if it names none)."""
    if raw is None:
        return None
    try:
        value: Any = json.loads(raw)
    except ValueError:
        return None
    shadow = value.get("shadow") if isinstance(value, dict) else None
    return Path(shadow) if isinstance(shadow, str) and shadow else None
