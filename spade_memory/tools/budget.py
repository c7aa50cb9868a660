"""Per-request tool budgets: how many calls, seconds and characters the tools may spend.

One :class:`RequestBudget` covers one LLM request (a conversation turn). Time is the
wall time during which at least one memory tool call was running, so the LLM's own
thinking between calls does not count, and calls that run side by side count once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..config import ToolBudget
from ..errors import BudgetExceeded

__all__ = ["TRUNCATION_NOTE", "BudgetSpent", "RequestBudget"]

logger = logging.getLogger(__name__)

TRUNCATION_NOTE = "\n[output truncated: the memory tool output limit of this request was reached]"


@dataclass(frozen=True, slots=True)
class BudgetSpent:
    """What a request has spent so far.

    Attributes:
        calls: tool calls charged (including refused ones: see ``refused``).
        seconds: wall time spent inside tool calls.
        output_chars: characters of tool output handed to the LLM (without notes).
        truncated: outputs that were cut to fit.
        refused: calls refused because the budget was spent.
        by_tool: calls charged per tool name.
    """

    calls: int
    seconds: float
    output_chars: int
    truncated: int
    refused: int
    by_tool: dict[str, int]


class RequestBudget:
    """The memory-tool budget of one LLM request.

    Args:
        limits: the limits (``MemoryConfig.tools``).
        clock: a monotonic time source in seconds.
    """

    def __init__(self, limits: ToolBudget, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(limits, ToolBudget):
            raise TypeError(f"limits must be a ToolBudget, got {type(limits).__name__}")
        self._limits = limits
        self._clock = clock
        self._calls = 0
        self._by_tool: dict[str, int] = {}
        self._output = 0
        self._truncated = 0
        self._refused = 0
        self._seconds = 0.0
        self._active = 0
        self._busy_since = 0.0

    @property
    def limits(self) -> ToolBudget:
        return self._limits

    @property
    def remaining_calls(self) -> int:
        return max(0, self._limits.max_calls - self._calls)

    @property
    def elapsed(self) -> float:
        """Seconds spent inside tool calls so far, including calls still running."""
        running = self._clock() - self._busy_since if self._active else 0.0
        return self._seconds + running

    @property
    def remaining_seconds(self) -> float:
        return max(0.0, self._limits.max_seconds - self.elapsed)

    @property
    def remaining_output(self) -> int:
        """Characters of tool output still allowed."""
        return max(0, self._limits.max_output_chars - self._output)

    @property
    def spent(self) -> BudgetSpent:
        return BudgetSpent(
            calls=self._calls,
            seconds=self.elapsed,
            output_chars=self._output,
            truncated=self._truncated,
            refused=self._refused,
            by_tool=dict(self._by_tool),
        )

    def charge_call(self, tool_name: str) -> None:
        """Count one call of ``tool_name``.

        Raises:
            BudgetExceeded: the request has used all its calls or all its time; the
                call was not counted and must not run.
        """
        if self.remaining_calls <= 0:
            self._refused += 1
            raise BudgetExceeded(
                f"{tool_name} was not run: this request already made "
                f"{self._limits.max_calls} memory tool calls, the most allowed. "
                "Answer with what you have"
            )
        if self.remaining_seconds <= 0:
            self._refused += 1
            raise BudgetExceeded(
                f"{tool_name} was not run: memory tools already took "
                f"{self._limits.max_seconds:g} s in this request, the most allowed. "
                "Answer with what you have"
            )
        self._calls += 1
        self._by_tool[tool_name] = self._by_tool.get(tool_name, 0) + 1

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Count the wall time of the enclosed tool call (overlapping calls count once)."""
        if self._active == 0:
            self._busy_since = self._clock()
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            if self._active == 0:
                self._seconds += max(0.0, self._clock() - self._busy_since)

    def charge_output(self, text: str) -> None:
        """Charge ``text`` to the output budget whole (a write's confirmation, which is
        never cut): what is left for later reads shrinks, down to nothing."""
        self._output = min(self._output + len(text), self._limits.max_output_chars)

    def take_output(self, text: str) -> str:
        """Charge ``text`` to the output budget, cut to what is left.

        Returns:
            ``text`` itself if it fits, else its longest prefix that fits (cut at a
            line break when one is near) followed by a note saying it was truncated.
            The note is not charged.
        """
        left = self.remaining_output
        if len(text) <= left:
            self._output += len(text)
            return text
        cut = text[:left]
        newline = cut.rfind("\n")
        if newline >= left // 2:
            cut = cut[:newline]
        self._output = self._limits.max_output_chars
        self._truncated += 1
        logger.debug("tool output cut from %d to %d characters", len(text), len(cut))
        return cut + TRUNCATION_NOTE if cut else TRUNCATION_NOTE.lstrip("\n")
