"""Progress of long work on stderr: how many, how fast, how long still (ETA).

On a terminal one line is rewritten in place a few times a second; into a file
or a pipe a line is written every few seconds, so a log shows the work moving.
A finished job leaves one line: how many, in how long, how fast.

This package is an application: it prints. The library never does.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from ..text.plurals import plural

__all__ = ["ProgressLine", "duration"]


def duration(seconds: float) -> str:
    """``"0.4 s"``, ``"42 s"``, ``"2 min 38 s"``, ``"1 h 05 min"``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class ProgressLine:
    """Reports ``(done, total)`` of one job as ``label: done/total (pct) · rate · ETA``.

    Args:
        label: what is being done (``"importing"``, ``"embedding"``).
        noun: what is counted, singular and plural (``("memory", "memories")``).
        enabled: ``False`` prints nothing (``--json``).
        stream: where to write (default: stderr).
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        label: str,
        *,
        noun: tuple[str, str] = ("memory", "memories"),
        enabled: bool = True,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._label = label
        self._noun = noun
        self._enabled = enabled
        self._stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self._started = clock()
        self._last_shown = -1.0
        self._terminal = self._isatty()
        self._every = 0.25 if self._terminal else 5.0
        self._width = 0
        self._done = 0
        self._total = 0

    def _isatty(self) -> bool:
        isatty = getattr(self._stream, "isatty", None)
        return bool(isatty()) if callable(isatty) else False

    def __call__(self, done: int, total: int) -> None:
        """Record progress; shown when enough time has passed since the last line."""
        self._done, self._total = max(0, done), max(0, total)
        now = self._clock()
        if self._enabled and now - self._last_shown >= self._every and 0 < done < total:
            self._last_shown = now
            self._show(self.text(now))

    def text(self, now: float | None = None) -> str:
        """The progress line as it stands."""
        elapsed = max((self._clock() if now is None else now) - self._started, 1e-9)
        done, total = self._done, self._total
        rate = done / elapsed
        parts = [f"{self._label}: {done:,}/{plural(total, *self._noun)}"]
        if total:
            parts[0] += f" ({100 * done / total:.0f}%)"
        if done:
            parts.append(f"{rate:,.0f}/s" if rate >= 10 else f"{rate:.1f}/s")
            if total > done:
                parts.append(f"ETA {duration((total - done) / rate)}")
        return " · ".join(parts)

    def _show(self, text: str) -> None:
        if self._terminal:
            pad = " " * max(0, self._width - len(text))
            self._stream.write(f"\r{text}{pad}")
            self._width = len(text)
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def finish(self, note: str = "") -> None:
        """Leave one line: how many, in how long, how fast (nothing when nothing was done)."""
        if not self._enabled:
            return
        elapsed = self._clock() - self._started
        if self._terminal and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
        if self._done or self._total:
            rate = self._done / elapsed if elapsed > 0 else 0.0
            line = f"{self._label}: {plural(self._done, *self._noun)} in {duration(elapsed)}"
            if self._done and elapsed >= 0.5:
                line += f" ({rate:,.0f}/s)" if rate >= 10 else f" ({rate:.1f}/s)"
            self._stream.write(line + (f"; {note}" if note else "") + "\n")
        self._stream.flush()
