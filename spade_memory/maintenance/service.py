"""The maintenance of one open memory: its jobs, their schedule and their status.

Every :class:`~spade_memory.manager.MemoryManager` has one :class:`Maintenance`
(``manager.maintenance``), which works through the memory's
:class:`~spade_memory.engine.Engine`. On open it resumes interrupted rebuilds and
checks the memory in the background (the memory is usable at once); the maintenance
behaviour calls :meth:`Maintenance.run_due` on the agent's schedule. One job runs
at a time; :attr:`Maintenance.status` says which, and how far it got.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..config import MaintenanceConfig
from ..errors import EmbeddingUnavailable, StoreClosedError
from ..storage import memory_reads
from ..storage.schema import LAST_RUN_KEY
from .backup import backup_memory
from .consistency import ConsistencyChecker, ConsistencyReport
from .consolidation import ConsolidationResult, consolidate
from .decay import (
    CleanupResult,
    DecayResult,
    cleanup,
    decay_importance,
    set_status,
)
from .rebuild import (
    REBUILD_KINDS,
    Progress,
    Rebuilder,
    RebuildKind,
    RebuildResult,
)

if TYPE_CHECKING:
    from ..engine import Engine
    from ..llm.messages import LLMClient

__all__ = ["Maintenance", "MaintenanceState", "MaintenanceStatus"]

logger = logging.getLogger(__name__)

MaintenanceState = Literal[
    "idle", "checking", "repairing", "rebuilding", "working", "done", "failed"
]

_HOUR = 3600.0
_CONSOLIDATED_SEQ = "maintenance:consolidated_seq"


@dataclass(frozen=True, slots=True)
class MaintenanceStatus:
    """What the memory's maintenance is doing, or did last.

    Attributes:
        state: ``idle`` (nothing ran yet), ``checking``, ``repairing``,
            ``rebuilding``, ``working`` (decay, cleanup, consolidation, backup),
            ``done`` or ``failed``.
        job: the job running or last run (``"check"``, ``"rebuild fts"``, ...).
        done, total: its progress (steps or memories).
        report: the last consistency report.
        error: why the last job failed.
    """

    state: MaintenanceState = "idle"
    job: str | None = None
    done: int = 0
    total: int = 0
    report: ConsistencyReport | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "job": self.job,
            "done": self.done,
            "total": self.total,
            "report": None if self.report is None else self.report.to_dict(),
            "error": self.error,
        }


class Maintenance:
    """Maintenance jobs of one open memory.

    Args:
        engine: the memory maintained.
        config: intervals, rates and thresholds.
    """

    def __init__(self, engine: Engine, config: MaintenanceConfig) -> None:
        self._engine = engine
        self._config = config
        self._status = MaintenanceStatus()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def config(self) -> MaintenanceConfig:
        return self._config

    @property
    def status(self) -> MaintenanceStatus:
        """The state of the running or last job."""
        return self._status

    # -- lifecycle ----------------------------------------------------------------

    def start_background(self, *, check: bool = True) -> None:
        """Resume interrupted rebuilds, switch to a changed embedder's vectors, then
        (with ``check``) check and repair, in a background task."""
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(
                self._on_open(check), name=f"maintenance:{self._engine.jid}"
            )

    async def wait(self) -> MaintenanceStatus:
        """Wait for the background job started on open (if any) and return the status."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._task)
        return self._status

    async def aclose(self) -> None:
        """Stop the background job; idempotent."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _on_open(self, check: bool = True) -> None:
        try:
            await self.resume_rebuilds()
            await self._switch_embedder()
            if check:
                await self.check(repair=True)
        except StoreClosedError:
            return
        except Exception:  # reported through the status; the memory stays usable
            logger.exception("%s: maintenance on open failed", self._engine.jid)

    async def _switch_embedder(self) -> None:
        """Build the changed embedder's generation of vectors and switch it in; while its
        endpoint does not answer, try again after 2 s, doubling up to a minute."""
        delay = 2.0
        indexer = self._engine.indexer
        while indexer is not None and indexer.target is not None and not self._closed:
            try:
                await self.rebuild("vectors")
            except EmbeddingUnavailable as exc:
                logger.warning(
                    "%s: re-embedding for the new embedder waits (%s); retry in %.0f s",
                    self._engine.jid,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2.0, 60.0)

    # -- status helpers -----------------------------------------------------------

    def _set(self, **changes: Any) -> None:
        self._status = replace(self._status, **changes)

    def _progress(self, outer: Progress | None) -> Progress:
        def update(done: int, total: int) -> object:
            self._set(done=done, total=total)
            return None if outer is None else outer(done, total)

        return update

    @contextlib.asynccontextmanager
    async def _job(self, name: str, state: MaintenanceState) -> Any:
        if self._engine.closed:
            raise StoreClosedError(f"the memory of {self._engine.jid} is closed")
        async with self._lock:
            self._set(state=state, job=name, done=0, total=0, error=None)
            try:
                yield
            except BaseException as exc:
                reason = "cancelled" if isinstance(exc, asyncio.CancelledError) else str(exc)
                self._set(state="failed", error=reason or type(exc).__name__)
                raise
            self._set(state="done")

    # -- jobs ------------------------------------------------------------------------

    async def check(
        self,
        *,
        repair: bool = False,
        deep: bool = False,
        structure: bool | None = None,
        progress: Progress | None = None,
    ) -> ConsistencyReport:
        """Check the memory's indexes against its memories (see ``consistency``);
        ``structure`` (default: ``deep``) runs SQLite's own checks too."""
        async with self._job("check", "checking"):
            checker = ConsistencyChecker(
                self._engine,
                progress=self._progress(progress),
                on_phase=lambda phase: self._set(state=phase),
            )
            report = await checker.run(repair=repair, deep=deep, structure=structure)
            self._set(report=report)
        return report

    async def refresh_keyword_rows(self) -> int:
        """Write again the keyword rows made by an older index-text version (run on
        open after an upgrade); returns how many rows are right now."""
        async with self._job("check", "checking"):
            return await ConsistencyChecker(self._engine).refresh_keyword_rows()

    async def rebuild(
        self,
        what: RebuildKind | Literal["all"] = "all",
        *,
        batch: int = 200,
        progress: Progress | None = None,
    ) -> list[RebuildResult]:
        """Rebuild the keyword index, the vectors and/or the graph (resuming if interrupted)."""
        kinds: tuple[RebuildKind, ...] = REBUILD_KINDS if what == "all" else (what,)
        if what == "all" and self._engine.indexer is None:
            kinds = tuple(kind for kind in kinds if kind != "vectors")
        results: list[RebuildResult] = []
        rebuilder = Rebuilder(self._engine, batch=batch)
        for kind in kinds:
            async with self._job(f"rebuild {kind}", "rebuilding"):
                results.append(await rebuilder.rebuild(kind, progress=self._progress(progress)))
        return results

    async def resume_rebuilds(self, *, progress: Progress | None = None) -> list[RebuildResult]:
        """Finish the rebuilds an interruption left half done."""
        results: list[RebuildResult] = []
        for kind in await Rebuilder(self._engine).interrupted():
            if kind == "vectors" and self._engine.indexer is None:
                continue
            results.extend(await self.rebuild(kind, progress=progress))
        return results

    async def backup(self) -> Path:
        """Back up the memory now (SQLite backup API); returns the file."""
        async with self._job("backup", "working"):
            return await backup_memory(self._engine)

    async def decay(self) -> DecayResult:
        """Decay importance since the last run (the first run only starts the clock)."""
        async with self._job("decay", "working"):
            now = self._engine.now()
            base = self._engine.base
            key = LAST_RUN_KEY.format("decay")
            recorded = await base.meta_get(key)
            # The run is recorded first, and only if no other open of this memory
            # recorded one since it was read: two opens decay it once, and a run cut
            # short is not run again from the same start (its batches would decay twice).
            if not await base.meta_swap(key, recorded, json.dumps(now)):
                return DecayResult(decayed=0, protected=0, days=0.0)
            since = memory_reads.run_time(recorded)
            if since is None:
                return DecayResult(decayed=0, protected=0, days=0.0)
            rate = self._config.decay_rate_per_day
            return await decay_importance(self._engine, now=now, since=since, rate_per_day=rate)

    async def expire(self) -> dict[str, int]:
        """Record atoms whose lifetime lapsed (dormant, then expired)."""
        async with self._job("expiry", "working"):
            return await self._engine.refresh_atoms()

    async def cleanup(self) -> CleanupResult:
        """Archive or delete old, unimportant, unused memories (``cleanup_policy``)."""
        async with self._job("cleanup", "working"):
            return await cleanup(self._engine, now=self._engine.now(), config=self._config)

    async def archive(self, memory_ids: list[int]) -> list[int]:
        """Archive memories (kept, not searched); returns those archived."""
        return await set_status(self._engine, memory_ids, "archived", now=self._engine.now())

    async def restore_archived(self, memory_ids: list[int]) -> list[int]:
        """Make archived memories active again; returns those restored."""
        return await set_status(self._engine, memory_ids, "active", now=self._engine.now())

    async def consolidate(self, *, llm: LLMClient | None = None) -> ConsolidationResult:
        """Merge near-duplicate memories (optionally through ``llm``)."""
        async with self._job("consolidation", "working"):
            raw = await self._engine.base.meta_get(_CONSOLIDATED_SEQ)
            result = await consolidate(
                self._engine,
                threshold=self._config.consolidation_threshold,
                now=self._engine.now(),
                llm=llm,
                after_seq=int(raw or 0),
            )
            await self._engine.base.meta_set(_CONSOLIDATED_SEQ, str(result.last_seq))
            return result

    async def run_due(self, *, llm: LLMClient | None = None) -> dict[str, Any]:
        """Flush, then run each job whose interval has passed; returns what ran."""
        await self._engine.flush()
        now = self._engine.now()
        ran: dict[str, Any] = {}
        plan: list[tuple[str, float, Callable[[], Any]]] = [
            ("expiry", self._config.expiry_interval_hours, self.expire),
            ("decay", self._config.decay_interval_hours, self._decay_and_cleanup),
            (
                "consolidation",
                self._config.consolidation_interval_hours,
                lambda: self.consolidate(llm=llm),
            ),
        ]
        if self._engine.root is not None:
            plan.append(("backup", self._config.backup_interval_hours, self._scheduled_backup))
        for name, hours, job in plan:
            if hours <= 0:
                continue
            last = await self._last(name)
            # a last run more than an interval ahead of the clock (one run under a
            # clock set far ahead) is due now: waiting for the clock to reach it would
            # stop the job for years; one a little ahead (the clock set back a little)
            # is not: every job would run again at each step back
            if last is not None and -hours * _HOUR <= now - last < hours * _HOUR:
                continue
            result = await job()
            if name != "decay":  # decay records its own run: it measures time from it
                await self._ran(name, now)
            ran[name] = result.to_dict() if hasattr(result, "to_dict") else result
        return ran

    async def _decay_and_cleanup(self) -> dict[str, Any]:
        decayed = await self.decay()
        cleaned = await self.cleanup()
        return {"decay": decayed.to_dict(), "cleanup": cleaned.to_dict()}

    async def _scheduled_backup(self) -> dict[str, Any]:
        path = await self.backup()
        return {"path": str(path)}

    # -- schedule -------------------------------------------------------------------

    async def _last(self, name: str) -> float | None:
        return await memory_reads.last_run(self._engine.base.fetchall, name)

    async def _ran(self, name: str, when: float) -> None:
        await self._engine.base.meta_set(LAST_RUN_KEY.format(name), json.dumps(when))

    async def last_runs(self) -> dict[str, float | None]:
        """When each scheduled job last ran (Unix seconds, memory clock)."""
        return await memory_reads.last_runs(self._engine.base.fetchall)
