"""The maintenance behaviour: the memory's upkeep on the agent's schedule.

A SPADE ``PeriodicBehaviour`` that wakes every ``period`` seconds and calls
:meth:`~spade_memory.maintenance.Maintenance.run_due`: it flushes background
work (embeddings, access statistics), then runs whatever is due — atom expiry,
importance decay and cleanup, consolidation, scheduled backups — each at its
own interval (:class:`~spade_memory.config.MaintenanceConfig`). ``MemoryMixin``
adds one to every agent whose config asks for it and stops it with the agent.

```python
agent.add_behaviour(MaintenanceBehaviour(lambda: agent.memory, period=60, llm=my_llm))
...
await behaviour.stop()       # cancels a run in progress and waits for it
```

A failing run is logged and retried at the next tick; a closed memory ends the
behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from spade.behaviour import PeriodicBehaviour

from ..errors import StoreClosedError

if TYPE_CHECKING:
    from ..llm import LLMClient
    from ..manager import MemoryManager

__all__ = ["MaintenanceBehaviour"]

logger = logging.getLogger(__name__)


class MaintenanceBehaviour(PeriodicBehaviour):  # type: ignore[misc]
    """Runs the due maintenance of an agent's memory every ``period`` seconds.

    Args:
        memory: the memory, or a function returning it (e.g. ``lambda: agent.memory``,
            so a memory reopened after a restart is picked up).
        period: seconds between runs.
        llm: merge near-duplicates through this model (validated, with the
            rule-based merge as fallback); ``None``: the rule alone.
        start_at: the first run (default: one period after the behaviour starts).

    Attributes:
        last_result: what the last run did (see ``run_due``), or ``None``.
        failures: runs that failed so far.
    """

    def match(self, message: Any) -> bool:
        """Never: it reads no messages, so none piles up in its mailbox."""
        return False

    def __init__(
        self,
        memory: MemoryManager | Callable[[], MemoryManager],
        *,
        period: float = 60.0,
        llm: LLMClient | None = None,
        start_at: datetime | None = None,
    ) -> None:
        if period <= 0:
            raise ValueError(f"period must be > 0 seconds, got {period!r}")
        super().__init__(
            period=period, start_at=start_at or datetime.now() + timedelta(seconds=period)
        )
        self._memory: Callable[[], MemoryManager] = memory if callable(memory) else lambda: memory
        self._llm = llm
        self._task: asyncio.Task[Any] | None = None
        self.last_result: dict[str, Any] | None = None
        self.failures = 0

    def start(self) -> None:
        """Start in the agent's loop, keeping the task so :meth:`stop` can await it."""
        self._task = self.agent.submit(self._start())
        self.is_running = True

    async def run(self) -> None:
        """One maintenance pass."""
        try:
            manager = self._memory()
            self.last_result = await manager.maintenance.run_due(llm=self._llm)
        except StoreClosedError:
            logger.debug("memory closed; maintenance behaviour ends")
            self.kill()
        except Exception:
            self.failures += 1
            logger.exception("memory maintenance failed; it runs again in %s", self.period)

    async def stop(self) -> None:
        """Kill the behaviour, cancel a run in progress and wait until it has ended."""
        self.kill()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
