"""Forming a window by rules: episodes of the turns worth keeping, the partner's
statements in their categories, dated contexts, sources, and one memory per content."""

from __future__ import annotations

from datetime import datetime

import pytest

from spade_memory.config import DEFAULT_CATEGORIES
from spade_memory.formation.dates import said_at, said_between
from spade_memory.formation.formed import FormedMemory
from spade_memory.formation.offline import (
    allowed_category,
    episode_content,
    form_offline,
    only_asks,
    worth_keeping,
)
from spade_memory.limits import LIMITS
from spade_memory.text.dates import find_dates
from tests.formation.conftest import NOON, message


def test_the_date_style_and_that_find_dates_reads_it() -> None:
    assert said_at(NOON) == "1:56 pm on 8 May, 2023"
    assert said_at(datetime(2024, 1, 3, 0, 5).timestamp()) == "12:05 am on 3 January, 2024"
    assert said_at(datetime(2024, 1, 3, 12, 0).timestamp()) == "12:00 pm on 3 January, 2024"
    keys = [key for *_, key in find_dates("1:56 pm on 8 May, 2023")]
    assert keys == ["time:13:56", "date:2023-05-08"]
    assert said_at(float("nan")) is None and said_at(1e300) is None


def test_a_span_of_messages() -> None:
    assert said_between(NOON, NOON + 34 * 60) == "1:56 pm to 2:30 pm on 8 May, 2023"
    assert said_between(NOON, NOON + 20) == "1:56 pm on 8 May, 2023"
    late = datetime(2023, 5, 8, 23, 50).timestamp()
    assert said_between(late, late + 1200) == "11:50 pm on 8 May, 2023 to 12:10 am on 9 May, 2023"
    keys = [key for *_, key in find_dates(said_between(late, late + 1200) or "")]
    assert "date:2023-05-08" in keys and "date:2023-05-09" in keys


@pytest.mark.parametrize(
    "text",
    ["", "   ", "hi", "Hi!", "ok", "OK.", "thanks!", "Thank you", "好的", "谢谢", "嗯", "👍",
     "🙂🙂", "...", "you're welcome"],
)  # fmt: skip
def test_small_talk_is_not_worth_keeping(text: str) -> None:
    assert not worth_keeping(message(1, "user", text))


@pytest.mark.parametrize(
    "text",
    [
        "Sorry, I could not handle that message (timeout). Please try again later.",
        "Too many messages: please wait 30 s before writing again.",
        "This agent does not take messages from bob@example.org.",
    ],
)
def test_canned_answers_are_not_worth_keeping(text: str) -> None:
    assert not worth_keeping(message(1, "assistant", text))
    assert worth_keeping(message(1, "user", text))  # a partner quoting one is kept


def test_a_window_becomes_episodes_and_statements() -> None:
    window = [
        message(1, "user", "Hi!"),
        message(2, "assistant", "Hello! How can I help?"),
        message(3, "user", "I prefer green tea. I live in Berlin."),
        message(4, "assistant", "I like green tea too."),
        message(5, "user", "thanks"),
    ]
    formed = form_offline(window, categories=DEFAULT_CATEGORIES, episodes="all")
    assert [(m.kind, m.content, m.category, m.sources) for m in formed] == [
        ("episode", "Helper: Hello! How can I help?", "fact", (2,)),
        ("episode", "Alice: I prefer green tea. I live in Berlin.", "fact", (3,)),
        ("preference", "Alice prefers green tea", "preference", (3,)),
        ("identity", "Alice lives in Berlin", "fact", (3,)),
        ("episode", "Helper: I like green tea too.", "fact", (4,)),
    ]
    by_content = {m.content: m for m in formed}
    assert by_content["Alice prefers green tea"].context == said_at(window[2].at)
    # kept with their turn's episode, statements take its importance, not their kind's
    episode = by_content["Alice: I prefer green tea. I live in Berlin."]
    assert by_content["Alice prefers green tea"].importance == episode.importance
    assert by_content["Alice lives in Berlin"].importance == episode.importance
    assert by_content["Alice prefers green tea"].confidence == 0.8
    assert by_content["Helper: Hello! How can I help?"].confidence == 1.0
    assert by_content["Helper: Hello! How can I help?"].context == "1:58 pm on 8 May, 2023"
    assert all(0.4 <= m.importance <= 0.55 for m in formed if m.kind == "episode")


def test_without_episodes_only_statements() -> None:
    window = [message(1, "user", "I usually go to the gym after work."), message(2, "assistant")]
    formed = form_offline(window, categories=DEFAULT_CATEGORIES, episodes="none")
    assert [(m.kind, m.category) for m in formed] == [("habit", "pattern")]


def test_statements_come_from_the_partner_only() -> None:
    window = [message(1, "assistant", "I can speak French and I live in the cloud.")]
    formed = form_offline(window, categories=DEFAULT_CATEGORIES, episodes="all")
    assert [m.kind for m in formed] == ["episode"]


def test_by_default_the_agents_own_replies_are_no_episodes() -> None:
    window = [
        message(1, "user", "I moved to Porto last spring."),
        message(2, "assistant", "Here is what I remember about Porto: you moved there."),
    ]
    formed = form_offline(window, categories=DEFAULT_CATEGORIES)
    assert [m.sources for m in formed if m.kind == "episode"] == [(1,)]


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("remember that the Lisbon office opens on 3 March", "the Lisbon office opens on 3 March"),
        ("Please remember: my sister lives in Lisbon.", "Alice's sister lives in Lisbon"),
        ("请记住，我喜欢喝绿茶", "Alice喜欢喝绿茶"),
    ],
)
def test_a_request_to_remember_keeps_what_it_asks_and_no_episode(text: str, kept: str) -> None:
    formed = form_offline([message(1, "user", text)], categories=DEFAULT_CATEGORIES)
    assert [m.content for m in formed] == [kept]


@pytest.mark.parametrize("text", ["remember when we met in Rome?", "remember when we met"])
def test_recalling_together_is_no_request(text: str) -> None:
    formed = form_offline([message(1, "user", text)], categories=DEFAULT_CATEGORIES, episodes="all")
    assert [m.kind for m in formed] == ["episode"]


def test_a_category_the_memory_lacks_goes_to_fact_or_the_first() -> None:
    assert allowed_category("pattern", ("fact", "note")) == "fact"
    assert allowed_category("pattern", ("note", "todo")) == "note"
    assert allowed_category("pattern", ()) == "fact"
    window = [message(1, "user", "I can swim.")]
    formed = form_offline(window, categories=("fact",), episodes="none")
    assert [(m.kind, m.category) for m in formed] == [("ability", "fact")]


def test_the_same_content_once_naming_every_message() -> None:
    window = [
        message(1, "user", "I live in Berlin."),
        message(2, "user", "I live in Berlin!"),
        message(3, "user", "I LIVE IN BERLIN"),
    ]
    formed = form_offline(window, categories=DEFAULT_CATEGORIES)
    statement = [m for m in formed if m.kind == "identity"]
    assert len(statement) == 1 and statement[0].sources == (1, 2, 3)
    episodes = [m for m in formed if m.kind == "episode"]
    assert len(episodes) == 1 and episodes[0].sources == (1, 2, 3)


def test_the_order_is_fixed() -> None:
    window = [message(i, "user", f"I like tea number {i}. I live in Town{i}.") for i in range(6)]
    first = form_offline(window, categories=DEFAULT_CATEGORIES)
    assert first == form_offline(list(window), categories=DEFAULT_CATEGORIES)
    assert [m.sources[0] for m in first] == sorted(m.sources[0] for m in first)


def test_a_long_turn_is_cut_to_the_content_limit() -> None:
    long = message(1, "user", "word " * 5000)
    content = episode_content(long)
    assert len(content) == LIMITS.content_chars and content.endswith("…")
    (formed,) = form_offline([long], categories=DEFAULT_CATEGORIES)
    assert formed.importance == 0.5


def test_chinese_window() -> None:
    window = [message(1, "user", "我喜欢喝绿茶。", sender="xiaowang@example.org")]
    formed = form_offline(window, categories=DEFAULT_CATEGORIES)
    assert [(m.kind, m.content) for m in formed] == [
        ("episode", "Xiaowang: 我喜欢喝绿茶。"),
        ("preference", "Xiaowang喜欢喝绿茶"),
    ]


def test_a_formed_memory_names_its_sources_sorted() -> None:
    with pytest.raises(ValueError, match="at least one"):
        FormedMemory("x", "fact", None, 0.5, 1.0, (), "episode")
    with pytest.raises(ValueError, match="sorted"):
        FormedMemory("x", "fact", None, 0.5, 1.0, (2, 1), "episode")


@pytest.mark.parametrize("text", ["Noted.", "Understood!", "I have nothing to add."])
def test_an_acknowledgement_or_an_empty_answer_is_no_episode(text: str) -> None:
    assert not worth_keeping(message(1, "assistant", text))


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("What do you know about Ana?", True),
        ("Did Mr. Smith call? Who is he?", True),  # "Mr." ends no sentence
        ("Really?!", True),
        ("你知道她住在哪儿吗？", True),
        ("I moved to Lyon. Where is it?", False),
        ("我搬家了。你知道吗？", False),
        ("Hi. What is new?", False),
        ("Ok", False),
    ],
)
def test_only_asks_when_every_sentence_is_a_question(text: str, asks: bool) -> None:
    assert only_asks(text) is asks


def test_a_question_asked_of_the_agent_is_no_episode_between_people_it_is() -> None:
    window = [message(1, "user", "What do you know about Ana?"), message(2, "assistant", "Hm?")]
    assert form_offline(window, categories=DEFAULT_CATEGORIES) == []
    asked = form_offline(window[:1], categories=DEFAULT_CATEGORIES, episodes="all")
    assert [m.kind for m in asked] == ["episode"]
