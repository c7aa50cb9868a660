"""Relative dates ("yesterday", "last Friday", "两天前") resolved to calendar dates,
and the index terms a memory or a query gets for the dates it is about.

A memory says "I ran a charity race yesterday" on the day its context names
("1:56 pm on 8 May, 2023"); a question asks "What did Melanie do on 7 May 2023?"
or, a week later, "what did I do last Sunday?". Neither shares a word with the
other, so both get the same made-up index terms for the day they mean:

- ``d20230507``: the day; ``wk2023w18``: its ISO week; ``mo202305``: its month.

A memory's reference day is the first full date its context names (the style
formed memories and imported dialogues carry); its terms are those of that day,
of each full date its text names, and of each relative expression in its text
resolved against the reference day (a date without a year takes the year that
puts it nearest the reference). Without a date in its context a memory gets
terms only for the full dates its text names: its index text depends on its
content and context alone, so every writer and checker computes the same.

A query's terms are those of the dates it names, and of its relative
expressions resolved against the time of the search: a day gives its day term
only, "last week" its week term, "in May 2023" its month term, so a question
about a day matches memories of that day, and one about a week or a month
matches every memory of it.

Expressions read, in English (any case): today, tonight, this morning /
afternoon / evening, yesterday, last night, the day before yesterday, tomorrow,
the day after tomorrow; N days / weeks / months ago, in N days / weeks /
months (N a number, a word up to twelve, "a", "an", "a couple of"); last /
this / next / coming + a weekday; last / this / next week, weekend, month. In
Chinese: 今天 昨天 前天 大前天 明天 后天 大后天 (and 今晚 昨晚, 今日 昨日);
N天前 / N天后, N周前 / N个星期前, N个月前 (以前, 之前, 以后, 之后 too);
上周五 / 这周五 / 下周五 (星期, 礼拜 too); 上周, 本周, 下周; 上个月, 这个月, 下个月.
"Last Friday" is the latest Friday before the reference day, "next Friday"
the first after it, "this Friday" the one in the same Monday-to-Sunday week;
上周五 is the Friday of the week before. Dates are calendar days: no clock
time takes part, so daylight-saving changes cannot move them.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

from .dates import WEEKDAYS, ZH_WEEKDAYS, chinese_number, find_dates

__all__ = [
    "day_terms",
    "memory_date_terms",
    "query_date_terms",
    "reference_day",
    "resolve_relative",
]

_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "a couple of": 2,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_COUNT = r"(?P<n>\d{1,3}|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + ")"
_UNIT = r"(?P<unit>day|week|month)s?"
_WEEKDAY = "(?P<weekday>" + "|".join(WEEKDAYS) + ")"
_EN_DAYS = {
    "the day before yesterday": -2,
    "day before yesterday": -2,
    "the day after tomorrow": 2,
    "day after tomorrow": 2,
    "yesterday": -1,
    "last night": -1,
    "today": 0,
    "tonight": 0,
    "this morning": 0,
    "this afternoon": 0,
    "this evening": 0,
    "tomorrow": 1,
}
_ZH_DAYS = {
    "大前天": -3,
    "前天": -2,
    "昨天": -1,
    "昨日": -1,
    "昨晚": -1,
    "今天": 0,
    "今日": 0,
    "今晚": 0,
    "明天": 1,
    "明日": 1,
    "明晚": 1,
    "后天": 2,
    "大后天": 3,
}
_ZH_NUM = r"(?P<n>[0-9０-９零〇一二两三四五六七八九十]{1,3})"
_ZH_WEEK = r"(?:星期|礼拜|周)"
_ZH_SHIFT = {"上": -1, "这": 0, "本": 0, "下": 1}

_EN_ALTERNATIVES = "|".join(
    (
        r"(?P<day>" + "|".join(sorted(_EN_DAYS, key=len, reverse=True)) + r")",
        rf"(?P<count>(?P<ahead>in\s+)?{_COUNT}\s+{_UNIT}(?P<ago>\s+ago)?)",
        rf"(?P<named>(?P<which>last|this|next|coming)\s+{_WEEKDAY})",
        r"(?P<span>(?P<side>last|this|next)\s+(?P<period>weekend|week|month))",
    )
)
_EN = re.compile(rf"\b(?:{_EN_ALTERNATIVES})\b", re.IGNORECASE)
# 后天 and 前天 inside 以后天气, 之前天气, 然后天...: the 后 or 前 ends the word before
_ZH_WORD_BEFORE = "以之然最此其随事饭睡课午日提先向往从目眼面空"
# a count right after a month or another numeral is a calendar date (5月3日前: before
# 3 May), not days ago
_ZH_DATE_BEFORE = "年月0-9０-９零〇一二两三四五六七八九十"
_ZH = re.compile(
    "|".join(
        (
            rf"(?<![{_ZH_WORD_BEFORE}])(?P<day>"
            + "|".join(sorted(_ZH_DAYS, key=len, reverse=True))
            + r")",
            rf"(?<![{_ZH_DATE_BEFORE}])"
            rf"(?P<count>{_ZH_NUM}(?P<unit>天|日|个?{_ZH_WEEK}|个月)(?P<dir>以前|之前|前|以后|之后|后))",
            rf"(?P<named>(?P<which>[上这本下])个?{_ZH_WEEK}(?P<weekday>[一二三四五六日天]))",
            rf"(?P<span>(?P<side>[上这本下])个?(?P<period>{_ZH_WEEK}|月))",
        )
    )
)
_EN_CUE = re.compile(
    r"yesterday|today|tonight|tomorrow|this|ago|last|next|coming|\bin\s", re.IGNORECASE
)
_ZH_CUE = re.compile(r"[天日晚前后周月拜期]")

Resolved = tuple[int, int, str, str]
"""``(start, end, text, key)``: key ``date:YYYY-MM-DD``, ``week:YYYY-Www`` or ``date:YYYY-MM``."""


def _day_key(day: date) -> str:
    return f"date:{day.isoformat()}"


def _week_key(day: date) -> str:
    year, week, _ = day.isocalendar()
    return f"week:{year:04d}-W{week:02d}"


def _month_key(year: int, month: int) -> str:
    if not 1 <= year <= 9999:
        raise OverflowError("year out of range")
    return f"date:{year:04d}-{month:02d}"


def _add_months(day: date, months: int) -> tuple[int, int]:
    index = day.year * 12 + day.month - 1 + months
    return index // 12, index % 12 + 1


def _count(text: str) -> int | None:
    value = _NUMBER_WORDS.get(" ".join(text.lower().split()))
    if value is None:
        value = chinese_number(text)
    return value


def _shift(reference: date, unit: str, count: int) -> str:
    """The key ``count`` days, weeks (a day key) or months (a month key) away.

    Raises:
        OverflowError: that day is before year 1 or after 9999.
    """
    if unit == "month":
        return _month_key(*_add_months(reference, count))
    return _day_key(reference + timedelta(days=count * (7 if unit == "week" else 1)))


def _named_weekday(reference: date, which: str, weekday: int) -> date:
    if which == "last":
        return reference - timedelta(days=(reference.weekday() - weekday - 1) % 7 + 1)
    if which in ("next", "coming"):
        return reference + timedelta(days=(weekday - reference.weekday() - 1) % 7 + 1)
    weeks = {"上": -1, "下": 1}.get(which, 0)  # this, 这, 本: the same week
    return reference + timedelta(days=weekday - reference.weekday() + 7 * weeks)


def _period(reference: date, side: int, period: str) -> list[str]:
    if period == "month":
        return [_month_key(*_add_months(reference, side))]
    monday = reference - timedelta(days=reference.weekday()) + timedelta(weeks=side)
    if period == "weekend":
        return [_day_key(monday + timedelta(days=5)), _day_key(monday + timedelta(days=6))]
    return [_week_key(monday)]


def _english(text: str, reference: date) -> list[Resolved]:
    found: list[Resolved] = []
    for match in _EN.finditer(text):
        try:
            keys = _english_keys(match, reference)
        except (OverflowError, ValueError):  # a day before year 1 or after 9999
            continue
        found.extend((match.start(), match.end(), match.group(), key) for key in keys)
    return found


def _english_keys(match: re.Match[str], reference: date) -> list[str]:
    if match.group("day"):
        offset = _EN_DAYS[" ".join(match.group("day").lower().split())]
        return [_shift(reference, "day", offset)]
    if match.group("count"):
        count = _count(match.group("n"))
        if count is None or bool(match.group("ago")) == bool(match.group("ahead")):
            return []  # "two weeks": a length of time, no date
        sign = -1 if match.group("ago") else 1
        return [_shift(reference, match.group("unit").lower(), sign * count)]
    if match.group("named"):
        weekday = WEEKDAYS.index(match.group("weekday").lower())
        return [_day_key(_named_weekday(reference, match.group("which").lower(), weekday))]
    side = {"last": -1, "this": 0, "next": 1}[match.group("side").lower()]
    return _period(reference, side, match.group("period").lower())


def _chinese(text: str, reference: date) -> list[Resolved]:
    found: list[Resolved] = []
    for match in _ZH.finditer(text):
        try:
            keys = _chinese_keys(match, reference)
        except (OverflowError, ValueError):  # a day before year 1 or after 9999
            continue
        found.extend((match.start(), match.end(), match.group(), key) for key in keys)
    return found


def _chinese_keys(match: re.Match[str], reference: date) -> list[str]:
    if match.group("day"):
        return [_shift(reference, "day", _ZH_DAYS[match.group("day")])]
    if match.group("count"):
        count = chinese_number(match.group("n"))
        if count is None:
            return []
        unit_text = match.group("unit")
        unit = "day" if unit_text in ("天", "日") else "month" if "月" in unit_text else "week"
        sign = -1 if "前" in match.group("dir") else 1
        return [_shift(reference, unit, sign * count)]
    if match.group("named"):
        weekday = ZH_WEEKDAYS[match.group("weekday")]
        return [_day_key(_named_weekday(reference, match.group("which"), weekday))]
    period = "month" if match.group("period") == "月" else "week"
    return _period(reference, _ZH_SHIFT[match.group("side")], period)


def resolve_relative(text: str, reference: date) -> list[Resolved]:
    """The relative date expressions of ``text`` resolved against ``reference``:
    ``(start, end, text, key)`` in order (a weekend gives two day keys)."""
    found: list[Resolved] = []
    if _EN_CUE.search(text):
        found.extend(_english(text, reference))
    if not text.isascii() and _ZH_CUE.search(text):
        found.extend(_chinese(text, reference))
    found.sort(key=lambda item: item[0])
    return found


def reference_day(context: str | None) -> date | None:
    """The first full date ``context`` names (``"1:56 pm on 8 May, 2023"``), if any."""
    if not context:
        return None
    for _, _, _, key in find_dates(context):
        day = _parse_day(key)
        if day is not None:
            return day
    return None


def _parse_day(key: str) -> date | None:
    if not key.startswith("date:") or len(key) != 15:
        return None
    try:
        return date.fromisoformat(key[5:])
    except ValueError:
        return None


def day_terms(day: date) -> list[str]:
    """The index terms of a day: itself, its ISO week and its month."""
    year, week, _ = day.isocalendar()
    return [f"d{day:%Y%m%d}", f"wk{year:04d}w{week:02d}", f"mo{day:%Y%m}"]


def _key_terms(key: str, *, whole_day: bool) -> list[str]:
    """The index terms of a key; a day key gives its week's and month's too when
    ``whole_day`` (a memory's), only its own otherwise (a query's)."""
    kind, _, value = key.partition(":")
    if kind == "week":
        return [f"wk{value[:4]}w{value[-2:]}"]
    day = _parse_day(key)
    if day is not None:
        return day_terms(day) if whole_day else day_terms(day)[:1]
    if kind == "date" and len(value) == 7 and value[4] == "-":
        return [f"mo{value[:4]}{value[5:]}"]
    return []


def _near_year(month_day: str, reference: date) -> str | None:
    """``"MM-DD"`` as a day key in the year that puts it nearest ``reference``."""
    best: date | None = None
    for year in (reference.year - 1, reference.year, reference.year + 1):
        try:
            day = date(year, int(month_day[:2]), int(month_day[3:]))
        except ValueError:
            continue
        if best is None or abs(day - reference) < abs(best - reference):
            best = day
    return None if best is None else _day_key(best)


def _named_keys(text: str, reference: date | None) -> list[str]:
    keys = []
    for _, _, _, key in find_dates(text):
        value = key.partition(":")[2]
        if key.startswith("date:") and len(value) == 5 and reference is not None:
            near = _near_year(value, reference)
            if near is not None:
                keys.append(near)
        elif key.startswith("date:"):
            keys.append(key)
    return keys


def memory_date_terms(content: str, context: str | None) -> list[str]:
    """The date index terms of a memory (see the module docstring), distinct, in order."""
    reference = reference_day(context)
    keys = _named_keys(content, reference)
    if reference is not None:
        keys = [_day_key(reference), *keys]
        keys.extend(key for _, _, _, key in resolve_relative(content, reference))
    return list(dict.fromkeys(term for key in keys for term in _key_terms(key, whole_day=True)))


def query_date_terms(query: str, now: float) -> list[str]:
    """The date index terms of a query asked at ``now`` (Unix seconds, local time):
    the dates it names with their year, and its relative expressions resolved."""
    try:
        today = datetime.fromtimestamp(now).date()
    except (OverflowError, OSError, ValueError):
        return []
    keys = [key for key in _named_keys(query, None) if len(key) > 10]
    keys.extend(key for _, _, _, key in resolve_relative(query, today))
    return list(dict.fromkeys(term for key in keys for term in _key_terms(key, whole_day=False)))
