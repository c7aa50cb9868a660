"""The upkeep of a memory: archive and restore, check, back up, rebuild, flush, count.

:class:`UpkeepMixin` holds the :class:`~spade_memory.manager.MemoryManager`
methods that look after a memory rather than read or write it. Most hand the
work to the memory's :class:`~spade_memory.maintenance.service.Maintenance`
(which serialises maintenance jobs); :meth:`~UpkeepMixin.flush` waits for the
background embedding and access statistics, :meth:`~UpkeepMixin.stats` counts.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from .config import MemoryConfig
from .indexing import VectorIndexer
from .maintenance.consistency import ConsistencyReport
from .maintenance.service import Maintenance
from .models import Memory, MemoryStats
from .storage.base import BaseMemoryStore
from .storage.interaction import InteractionStore

__all__ = ["UpkeepMixin"]

logger = logging.getLogger(__name__)


class UpkeepMixin:
    """The upkeep methods of :class:`~spade_memory.manager.MemoryManager`."""

    if TYPE_CHECKING:  # provided by MemoryManager
        _base: BaseMemoryStore
        _interactions: InteractionStore
        _indexer: VectorIndexer | None
        _config: MemoryConfig
        _maintenance: Maintenance

        @property
        def jid(self) -> str: ...

        def _check_open(self) -> None: ...

        async def _write_touches(self) -> None: ...

        async def get(self, memory_id: int) -> Memory: ...

    # -- lifecycle of memories ---------------------------------------------------

    async def archive(self, memory_id: int) -> Memory:
        """Archive a memory: kept and restorable, no longer searched or listed.

        Raises:
            MemoryNotFound: no memory with that id.
        """
        memory = await self.get(memory_id)
        await self._maintenance.archive([memory.id])
        return await self.get(memory.id)

    async def restore_archived(self, memory_id: int) -> Memory:
        """Make an archived memory active again. Raises MemoryNotFound."""
        memory = await self.get(memory_id)
        await self._maintenance.restore_archived([memory.id])
        return await self.get(memory.id)

    async def check(self, *, repair: bool = False, deep: bool = False) -> ConsistencyReport:
        """Check this memory's indexes against its memories; ``repair`` mends what is off."""
        self._check_open()
        return await self._maintenance.check(repair=repair, deep=deep)

    async def backup(self) -> Path:
        """Back up this memory into ``backup/`` under the root; returns the file.

        Raises:
            ConfigError: the memory is in-memory.
        """
        self._check_open()
        return await self._maintenance.backup()

    # -- graph, background work and counts ------------------------------------------

    async def rebuild_graph(self, *, batch: int = 200) -> int:
        """Extract the graph and atoms of every memory again; returns how many.

        Runs on open when the stored graph was made by another extraction version
        (or before graphs existed). Builds into a shadow that replaces the live
        graph once complete (see :mod:`spade_memory.maintenance.graph_rebuild`):
        forgotten atoms stay forgotten, unchanged graph vectors are kept, and an
        interrupted rebuild resumes.
        """
        self._check_open()
        (result,) = await self._maintenance.rebuild("graph", batch=batch)
        if result.processed:
            logger.info("rebuilt the graph of %d memories of %s", result.processed, self.jid)
        return result.processed

    async def flush(self) -> None:
        """Wait until background work (embedding, access statistics) has caught up."""
        self._check_open()
        if self._indexer is not None:
            await self._indexer.flush()
        await self._write_touches()

    async def stats(self) -> MemoryStats:
        """Counts of this agent's memories, notes and vectors."""
        self._check_open()
        by_category = await self._base.counts_by("category")
        by_status = await self._base.counts_by("status")
        embedded = pending = 0
        if self._indexer is not None:
            fingerprint = self._indexer.embedder.fingerprint
            embedded = len(await self._base.embedding_ids(fingerprint))
            pending = await self._base.count_pending_embeddings(fingerprint)
        conversations, notes = await self._interactions.counts()
        return MemoryStats(
            agent=self.jid,
            total=sum(by_status.values()),
            by_category=by_category,
            by_status=by_status,
            embedded=embedded,
            pending_embeddings=pending,
            conversations=conversations,
            notes=notes,
            in_memory=self._config.in_memory,
        )
