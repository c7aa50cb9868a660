"""Dates, weekdays and times in English and Chinese text, as normalised graph keys.

``"May 1, 2024"``, ``"1 May 2024"``, ``"2024-05-01"`` and ``"2024年5月1日"`` all give
the key ``"date:2024-05-01"``; a date without a year gives ``"date:05-01"``;
``"Monday"``, ``"星期一"`` and ``"周一"`` give ``"weekday:monday"``; ``"3:30 pm"`` and
``"下午三点半"`` give ``"time:15:30"``. Impossible dates (month 13) are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["WEEKDAYS", "ZH_WEEKDAYS", "chinese_number", "find_dates"]

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
ZH_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5}
_ZH_DIGITS.update({"六": 6, "七": 7, "八": 8, "九": 9})

_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})"
_ZH_NUM = r"[0-9０-９零〇一二两三四五六七八九十]{1,4}"

_PATTERN_TEXTS: tuple[tuple[str, str], ...] = (
    (rf"\b{_YEAR}-(?P<m>\d{{1,2}})-(?P<day>\d{{1,2}})\b", "iso"),
    (rf"\b(?P<m>\d{{1,2}})/(?P<day>\d{{1,2}})/{_YEAR}\b", "us"),
    (rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?(?:\s+{_YEAR})?\b", "dmy"),
    (rf"\b{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?\b", "mdy"),
    (rf"\b{_MONTH},?\s+{_YEAR}\b", "my"),
)
_WEEKDAY_TEXT = r"\b(" + "|".join(WEEKDAYS) + r")s?\b"
_TIME_TEXT = (
    r"\b(?P<h>\d{1,2})(?::(?P<min>\d{2}))?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)(?![a-z])"
    r"|\b(?P<h24>\d{1,2}):(?P<min24>\d{2})\b"
)
_ZH_DATE = re.compile(rf"(?:(?P<year>{_ZH_NUM})年)?(?P<m>{_ZH_NUM})月(?:(?P<day>{_ZH_NUM})[日号])?")


@dataclass(frozen=True)
class _Patterns:
    """The Latin-script patterns, compiled for one way of reading a text."""

    dates: tuple[tuple[re.Pattern[str], str], ...]
    weekday: re.Pattern[str]
    time: re.Pattern[str]

    @classmethod
    def compiled(cls, flags: int) -> _Patterns:
        dates = tuple((re.compile(text, flags), kind) for text, kind in _PATTERN_TEXTS)
        return cls(
            (*dates, (_ZH_DATE, "zh")),
            re.compile(_WEEKDAY_TEXT, flags),
            re.compile(_TIME_TEXT, flags),
        )


# Any text, as typed: the patterns ignore case (as Unicode has it: "ſunday").
_AS_TYPED = _Patterns.compiled(re.IGNORECASE)
# An ASCII text, lower-cased: the same matches at the same places, found about three
# times faster (a pattern that ignores case compares each letter both ways).
_LOWERED = _Patterns.compiled(0)
_WEEKDAY = _AS_TYPED.weekday
_ZH_WEEKDAY = re.compile(r"(?:星期|礼拜|周)([一二三四五六日天])")
_ZH_TIME = re.compile(
    rf"(?P<part>上午|下午|晚上|早上|中午|凌晨|傍晚)?(?P<h>{_ZH_NUM})点(?:(?P<half>半)|(?P<min>{_ZH_NUM})分)?"
)
_PM_PARTS = ("下午", "晚上", "傍晚")
_DIGIT = re.compile(r"[0-9０-９]")
_ZH_WEEK_CUE = re.compile(r"星期|礼拜|周")
# What each pattern cannot match without (checked once, so most texts skip most patterns).
_MONTH_CUE = re.compile(r"jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec", re.IGNORECASE)
_AMPM_CUE = re.compile(r"\d\s*[ap]\.?m", re.IGNORECASE)
_NEEDS = {"iso": "-", "us": "/"}
_FULL_WIDTH_DIGITS = {0xFF10 + i: ord("0") + i for i in range(10)}


def chinese_number(text: str) -> int | None:
    """``"十二"`` -> 12, ``"二零二四"`` -> 2024, ``"１２"`` -> 12; ``None`` if not a number."""
    text = text.translate(_FULL_WIDTH_DIGITS)
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        high = 1 if not tens else _ZH_DIGITS.get(tens)
        low = 0 if not ones else _ZH_DIGITS.get(ones)
        if high is None or low is None or len(tens) > 1 or len(ones) > 1:
            return None
        return high * 10 + low
    digits = [_ZH_DIGITS.get(ch) for ch in text]
    if not digits or any(d is None for d in digits):
        return None
    value = 0
    for digit in digits:
        assert digit is not None
        value = value * 10 + digit
    return value


def _date_key(year: int | None, month: int | None, day: int | None) -> str | None:
    if month is None or not 1 <= month <= 12:
        return None
    if day is not None and not 1 <= day <= 31:
        return None
    if year is not None and not 1000 <= year <= 9999:
        return None
    if day is None:
        return f"date:{year:04d}-{month:02d}" if year is not None else None
    if year is None:
        return f"date:{month:02d}-{day:02d}"
    return f"date:{year:04d}-{month:02d}-{day:02d}"


def _number(value: str | None) -> int | None:
    return None if value is None else chinese_number(value)


def _may_name_weekday(text: str, lower: str) -> bool:
    """False when ``_WEEKDAY`` cannot match ``text`` (``lower`` is ``text.lower()``).

    An ASCII text names a weekday only if its lower case holds the name; any other
    text is searched whenever it holds "day" (IGNORECASE also matches a name spelt
    with letters such as ſ, which lower case keeps apart).
    """
    if "day" not in lower:
        return False
    return not text.isascii() or any(name in lower for name in WEEKDAYS)


def find_dates(text: str) -> list[tuple[int, int, str, str]]:
    """Dates, weekdays and times in ``text``: ``(start, end, text, key)``, overlaps removed."""
    lower = text.lower()
    if text.isascii():  # lower() keeps every letter in its place
        return _find(text, lower, lower, _LOWERED)
    return _find(text, lower, text, _AS_TYPED)


def _find(
    text: str, lower: str, subject: str, patterns: _Patterns
) -> list[tuple[int, int, str, str]]:
    """:func:`find_dates`, the patterns searching ``subject`` (``text`` itself, or its
    lower case where that keeps every letter in its place)."""
    found: list[tuple[int, int, str, str]] = []
    digits = bool(_DIGIT.search(text))
    months = digits and _MONTH_CUE.search(text) is not None
    # Each pattern runs only on a text that holds what it cannot match without.
    for pattern, kind in patterns.dates:
        if kind == "zh":
            if "月" not in text:
                continue
        elif not digits or (_NEEDS[kind] not in text if kind in _NEEDS else not months):
            continue
        for match in pattern.finditer(subject):
            groups = match.groupdict()
            if kind in ("dmy", "mdy", "my"):
                month: int | None = _MONTHS[groups["month"].lower()]
            else:
                month = _number(groups.get("m"))
            key = _date_key(_number(groups.get("year")), month, _number(groups.get("day")))
            if key is not None:
                start, end = match.span()
                found.append((start, end, text[start:end], key))
    for match in patterns.weekday.finditer(subject) if _may_name_weekday(text, lower) else ():
        day = match.group(1).lower()
        start, end = match.span()
        found.append((start, end, text[start:end], f"weekday:{day}"))
    chinese_week = not text.isascii() and _ZH_WEEK_CUE.search(text) is not None
    for match in _ZH_WEEKDAY.finditer(text) if chinese_week else ():
        day = WEEKDAYS[ZH_WEEKDAYS[match.group(1)]]
        found.append((match.start(), match.end(), match.group(), f"weekday:{day}"))
    clock = digits and (":" in text or _AMPM_CUE.search(text) is not None)
    for match in patterns.time.finditer(subject) if clock else ():
        if match.group("h24") is not None:
            hour, minute = int(match.group("h24")), int(match.group("min24"))
        else:
            hour, minute = int(match.group("h")), int(match.group("min") or 0)
            pm = match.group("ampm").lower().startswith("p")
            if not 1 <= hour <= 12:
                continue
            hour = hour % 12 + (12 if pm else 0)
        if hour <= 23 and minute <= 59:
            start, end = match.span()
            found.append((start, end, text[start:end], f"time:{hour:02d}:{minute:02d}"))
    for match in _ZH_TIME.finditer(text) if "点" in text else ():
        hour_value = _number(match.group("h"))
        minute_value = 30 if match.group("half") else _number(match.group("min")) or 0
        if hour_value is None or hour_value > 24 or minute_value > 59:
            continue
        if match.group("part") in _PM_PARTS and hour_value < 12:
            hour_value += 12
        key = f"time:{hour_value % 24:02d}:{minute_value:02d}"
        found.append((match.start(), match.end(), match.group(), key))
    found.sort(key=lambda item: (item[0], -(item[1] - item[0])))
    kept: list[tuple[int, int, str, str]] = []
    for item in found:
        if kept and item[0] < kept[-1][1]:
            continue
        kept.append(item)
    return kept
