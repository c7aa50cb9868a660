"""When a message was written, in the words a formed memory's context carries.

The style is ``"1:56 pm on 8 May, 2023"`` (local time; 12-hour clock without a
leading zero, lower-case am/pm, day without a leading zero, the English month
name), which :func:`spade_memory.text.dates.find_dates` reads as a time and a date.
A span of messages is ``"1:56 pm to 2:30 pm on 8 May, 2023"`` within one day and
``"11:50 pm on 8 May, 2023 to 12:10 am on 9 May, 2023"`` across days.
"""

from __future__ import annotations

import math
from datetime import datetime

__all__ = ["said_at", "said_between"]

_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def _local(at: float) -> datetime | None:
    if not math.isfinite(at):
        return None
    try:
        return datetime.fromtimestamp(at)
    except (OverflowError, OSError, ValueError):
        return None


def _clock(moment: datetime) -> str:
    hour = moment.hour % 12 or 12
    return f"{hour}:{moment.minute:02d} {'am' if moment.hour < 12 else 'pm'}"


def _day(moment: datetime) -> str:
    return f"{moment.day} {_MONTHS[moment.month - 1]}, {moment.year}"


def said_at(at: float) -> str | None:
    """``at`` (seconds since the epoch) as ``"1:56 pm on 8 May, 2023"`` in local time;
    ``None`` for a time no calendar shows."""
    moment = _local(at)
    return None if moment is None else f"{_clock(moment)} on {_day(moment)}"


def said_between(first: float, last: float) -> str | None:
    """The span from ``first`` to ``last``: one time when they are the same minute,
    ``"1:56 pm to 2:30 pm on 8 May, 2023"`` within a day, both in full across days."""
    start, end = _local(min(first, last)), _local(max(first, last))
    if start is None or end is None:
        return said_at(first) if end is None else said_at(last)
    if start.date() != end.date():
        return f"{_clock(start)} on {_day(start)} to {_clock(end)} on {_day(end)}"
    if _clock(start) == _clock(end):
        return f"{_clock(start)} on {_day(start)}"
    return f"{_clock(start)} to {_clock(end)} on {_day(start)}"
