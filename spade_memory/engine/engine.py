"""The engine of one agent's memory: its wired parts and the changes they share.

An :class:`Engine` holds what every service of a memory takes: the SQLite base
store, the conversation store, the interaction notes, the background vector
indexer, the graph and atom views, the retriever, the extraction of what a text
yields, the clock and the change notification that drops cached searches and
wakes the indexer. The
:class:`~spade_memory.manager.MemoryManager` facade, maintenance, the tools'
backends, the CLI and the integrations all work through one; none of them wires
parts of its own. Open one with :func:`~spade_memory.engine.opening.open_engine`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from ..config import MemoryConfig
from ..embedding.chance import chance_by_script
from ..errors import ConfigError, MemoryNotFound, StoreClosedError
from ..identity import AgentIdentity
from ..limits import LIMITS
from ..models import Memory, MemoryRecovery
from ..retrieval.graph import GraphRetriever
from ..retrieval.retriever import Retriever
from ..storage.atoms import AtomBook
from ..storage.base import BaseMemoryStore
from ..storage.conversations import ConversationStore
from ..storage.given_graph import Given
from ..storage.graph_store import GraphStore
from ..storage.interaction import InteractionStore
from ..text.extraction import EntityExtractor, get_extractor
from ..text.graph import MemoryGraph
from ..text.tokenizer import Tokenizer, get_tokenizer
from ..validation import check_id
from .access_counts import AccessRecorder
from .derivation import Deriver, live_parts
from .indexer import VectorIndexer
from .memory_input import MemoryInput

__all__ = [
    "Engine",
    "checked_clock",
]

logger = logging.getLogger(__name__)

_SEARCH_CLAIMS = 32  # pending memories whose claims a search extracts at most
_CHANCE_KEY = "chance_similarity"  # meta key prefix; the embedder's fingerprint follows


def checked_clock(clock: Callable[[], float]) -> Callable[[], float]:
    """``clock``, refusing a time no memory can carry, so that nothing is written
    with it: every part of the memory (stores, notes, access counts, the registry)
    reads the time through it.

    Raises (when called):
        ConfigError: the clock gave no time a memory can carry (not a number,
            before 1970 or after :data:`~spade_memory.limits.LIMITS` ``.latest_time``).
    """

    def now() -> float:
        value = clock()
        if isinstance(value, bool) or not (
            isinstance(value, (int, float)) and 0 <= value <= LIMITS.latest_time
        ):
            raise ConfigError(
                f"the memory's clock gave {value!r}: a time must be Unix seconds from 0 "
                f"to {LIMITS.latest_time:.0f} (the year 9999)"
            )
        return float(value)

    return now


class Engine:
    """The wired parts of one agent's memory.

    Args:
        identity: the agent.
        config: how the memory is kept.
        base: its SQLite base memory.
        interactions: its interaction notes.
        indexer: its background vector indexer (``None``: keyword search only).
        root: the memory root folder (``None`` in in-memory mode).
        clock: the time source (Unix seconds).
        recoveries: what opening did about a lost database or notes file.
        on_close: called once its stores are closed (lets go of what opening held).
    """

    def __init__(
        self,
        identity: AgentIdentity,
        config: MemoryConfig,
        *,
        base: BaseMemoryStore,
        interactions: InteractionStore,
        indexer: VectorIndexer | None,
        root: Path | None,
        clock: Callable[[], float],
        recoveries: tuple[MemoryRecovery, ...] = (),
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.identity = identity
        self._on_close = on_close
        self.recoveries = recoveries
        self.config = config
        self.base = base
        self.interactions = interactions
        self.indexer = indexer
        self.root = root
        self._clock = clock
        self.tokenizer: Tokenizer = get_tokenizer()
        self.extractor: EntityExtractor = get_extractor()
        self.graph = GraphStore(base)
        self.atoms = AtomBook(base, config.atoms)
        self.conversations = ConversationStore(base)
        self.input = MemoryInput(config, self.extractor)
        embedder = indexer.embedder if indexer is not None else None
        self.retriever = Retriever(
            base,
            self.tokenizer,
            config=config.retrieval,
            vectors=indexer,
            fingerprint=embedder.fingerprint if embedder is not None else None,
            dim=embedder.dim if embedder is not None else 0,
            clock=clock,
            graph=GraphRetriever(
                self.graph, self.extractor, config=config.retrieval, vectors=indexer
            ),
            hidden=self._hidden if config.atoms.hide_expired else None,
            chance=self.chance_level if indexer is not None else None,
        )
        self.deriver = Deriver(
            base,
            self.input,
            batch_size=config.storage.derive_batch_size,
            on_derived=self._derived,
        )
        # Marks an earlier run left are derived on open, whatever this run's setting,
        # unless nothing is to be done on open (MaintenanceConfig.embed_on_open: a
        # command-line look changes nothing); then on the next change or flush.
        resume = not base.created and config.maintenance.embed_on_open
        self._marks_left = not base.created and not resume
        self.deriver.start(resume=resume)
        self._closed = False
        self.access = AccessRecorder(base, jid=identity.jid, clock=clock, closed=self._is_closed)

    async def _hidden(self, memory_ids: Iterable[int], now: float) -> set[int]:
        """The memories among ``memory_ids`` with atoms but none live now, counting
        the claims of memories still to be derived (a few: a search never waits
        for the pipeline; recall, which does, checks them all)."""
        ids = list(memory_ids)
        hidden = await self.atoms.hidden(ids, now)
        if not self.deriver.maybe_pending:
            return hidden
        rest = [memory_id for memory_id in ids if memory_id not in hidden]
        claims = await self.deriver.pending_claims(rest, at_most=_SEARCH_CLAIMS, wait=False)
        if not claims:
            return hidden
        memories = await self.base.get_many(rest)
        found = await self.atoms.atoms(rest, now)
        held = [(memories[i], atoms) for i, atoms in found.items() if i in memories]
        for memory_id, memory in memories.items():
            parts = live_parts(memory, found.get(memory_id), claims, now=now, held=held)
            if parts is not None and not any(live for _, live in parts):
                hidden.add(memory_id)
        return hidden

    def _is_closed(self) -> bool:
        return self._closed

    # -- state -------------------------------------------------------------------

    @property
    def jid(self) -> str:
        """The agent's normalised bare JID."""
        return self.identity.jid

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        """Raise :class:`StoreClosedError` once the memory is closed, or the
        :class:`~spade_memory.errors.StorageCorrupted` of a database found damaged
        while in use (it was moved aside; the memory refuses further use)."""
        damage = self.base.damage
        if damage is not None:
            raise damage
        if self._closed:
            raise StoreClosedError(
                f"the memory of {self.identity.jid} is closed; open a new MemoryManager"
            )

    async def chance_level(self, script: str) -> float:
        """The embedder's similarity of unrelated texts written in ``script`` (the
        search's relevance floor is drawn from it): read from ``meta``, where it is
        kept with the script and the embedder's fingerprint, else measured once and
        kept there."""
        assert self.indexer is not None
        embedder = self.indexer.embedder
        key = f"{_CHANCE_KEY}:{script}:{embedder.fingerprint}"
        stored = await self.base.meta_get(key)
        if stored is not None:
            try:
                return float(stored)
            except ValueError:
                logger.warning("the stored chance level %r is no number; measuring again", stored)
        value = await chance_by_script(embedder, script)
        try:
            await self.base.meta_set(key, repr(value))
        except Exception:
            logger.warning("the chance level could not be kept; it is measured again next time")
        return value

    def now(self) -> float:
        """The memory's clock (Unix seconds; see :func:`checked_clock`)."""
        return self._clock()

    # -- changes -----------------------------------------------------------------

    def notify_changed(self, *, marked: bool = False) -> None:
        """The memory changed: drop cached searches and let the indexer embed anew.

        ``marked``: the change inserted memories through
        :meth:`MemoryInput.graphs_for <.memory_input.MemoryInput.graphs_for>`, which
        (with background derivation) marked them: the pipeline is woken to derive
        them. Marks an earlier run left and opening did not derive are derived on
        the first change.
        """
        self.retriever.invalidate()
        if (marked and self.config.storage.derive_in_background) or self._marks_left:
            self._marks_left = False
            self.deriver.notify()
        if self.indexer is not None:
            self.indexer.notify()

    def _derived(self, memory_ids: list[int]) -> None:
        """Graphs were derived: searches see them, their entries wait for vectors."""
        self.retriever.invalidate()
        if self.indexer is not None:
            self.indexer.notify()

    def graph_for(self, memory: Memory, given: Given | None = None) -> MemoryGraph:
        """The graph and atoms a memory's text yields, with the entities and relations
        named for it when it was stored (``given``: :meth:`BaseMemoryStore.given
        <spade_memory.storage.base.BaseMemoryStore.given>`), for rebuilds."""
        entities, relations = given if given is not None else ((), ())
        return self.input.graph_of(memory, list(entities) or None, list(relations) or None)

    async def forget(self, memory_id: int) -> None:
        """Delete a memory, its index entries and its vector. Raises MemoryNotFound."""
        self.check_open()
        memory_id = check_id(memory_id)
        if not await self.base.delete(memory_id):
            raise MemoryNotFound(f"{self.jid} has no memory with id {memory_id}")
        if self.indexer is not None:
            self.indexer.remove([memory_id])
        self.notify_changed()

    async def refresh_atoms(self) -> dict[str, int]:
        """Record atoms whose lifetime lapsed as dormant or expired; returns the counts."""
        self.check_open()
        changed = await self.atoms.refresh(self.now())
        if any(changed.values()):
            self.retriever.invalidate()
        return changed

    async def derived(self) -> None:
        """Wait until the memories stored so far have their graph rows and atoms (the
        views of the graph read them; a memory whose extraction failed is not
        waited for; marks an earlier run left are derived now)."""
        self.check_open()
        if self._marks_left:
            self._marks_left = False
            self.deriver.notify()
        if self.deriver.maybe_pending:
            await self.deriver.flush()

    async def flush(self) -> None:
        """Wait until background work (derivation, embedding, access statistics) has
        caught up."""
        self.check_open()
        await self.deriver.flush()
        if self.indexer is not None:
            await self.indexer.flush()
        await self.access.write()

    async def aclose(self, *, finish: bool = True) -> None:
        """Finish pending work (unless ``finish`` is false) and close every store;
        idempotent.

        Maintenance, which works through this engine, is closed by its owner first.
        A close cancelled (the end of the event loop cancels a close under way) or
        failing while it finishes stops the background workers at once and still
        closes every store: what was left is done on the next open, and no
        connection is left open, nor work queued on one.
        """
        if self._closed:
            return
        self._closed = True
        finished = False
        try:
            if finish:
                await self.deriver.aclose()
                await self.access.aclose()
                if self.indexer is not None:
                    await self.indexer.aclose()
                finished = True
        finally:
            try:
                if not finished:
                    await self.deriver.stop()
                    if self.indexer is not None:
                        await self.indexer.stop()
                await self.interactions.aclose()
            finally:
                await self.base.aclose()
                if self._on_close is not None:
                    self._on_close()  # what it held for its open life (jieba's cache folder)
        logger.debug("closed memory of %s", self.identity.jid)
