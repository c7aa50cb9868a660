"""Statements worth keeping in one message, rewritten in the third person (English and
Chinese), and what the graph's relation patterns read in them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.text.extraction import get_extractor
from spade_memory.text.statements import KINDS, MAX_STATEMENT_CHARS, Statement, statements


def said(text: str, speaker: str = "Alice") -> list[tuple[str, str]]:
    return [(s.kind, s.content) for s in statements(text, speaker)]


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("My name is Bob Smith.", "Alice is called Bob Smith"),
        ("Hi, I'm Bob.", "Alice is called Bob"),
        ("Call me Jo", "Alice is called Jo"),
        ("I'm Italian.", "Alice is Italian"),
        ("I'm a nurse at the city hospital.", "Alice is a nurse at the city hospital"),
        ("I work as a software engineer.", "Alice works as a software engineer"),
        ("I work at Google.", "Alice works at Google"),
        ("I live in Berlin.", "Alice lives in Berlin"),
        ("I just moved to Paris.", "Alice just moved to Paris"),
        ("I'm from Paris, France.", "Alice is from Paris, France"),
        ("I was born in Rome.", "Alice was born in Rome"),
        ("I grew up in Lyon.", "Alice grew up in Lyon"),
        ("I'm 34 years old.", "Alice is 34 years old"),
        ("I've lived in Berlin for five years.", "Alice has lived in Berlin for five years"),
    ],
)
def test_identity(text: str, content: str) -> None:
    assert said(text) == [("identity", content)]


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("I prefer green tea.", "Alice prefers green tea"),
        ("I really love hiking in the mountains.", "Alice really loves hiking in the mountains"),
        ("I hate cilantro!", "Alice hates cilantro"),
        ("I don't like horror movies.", "Alice does not like horror movies"),
        ("My favourite food is sushi.", "Alice's favourite food is sushi"),
        ("I'm a big fan of jazz.", "Alice is a big fan of jazz"),
        ("i like pizza", "Alice likes pizza"),
        ("I can't stand loud music.", "Alice cannot stand loud music"),
        ("I enjoy watching birds.", "Alice enjoys watching birds"),
    ],
)
def test_preference(text: str, content: str) -> None:
    assert said(text) == [("preference", content)]


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("I'm going to Japan next week.", "Alice is going to Japan next week"),
        ("I plan to learn Spanish.", "Alice plans to learn Spanish"),
        ("I will visit my parents tomorrow.", "Alice will visit Alice's parents tomorrow"),
        ("Next week I fly to Rome.", "Next week, Alice flies to Rome"),
        ("Tomorrow I have a dentist appointment.", "Tomorrow, Alice has a dentist appointment"),
        ("I'm gonna buy a car.", "Alice is going to buy a car"),
        ("I'll be in London on Monday.", "Alice will be in London on Monday"),
    ],
)
def test_plan(text: str, content: str) -> None:
    assert said(text) == [("plan", content)]


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("My sister is Carol.", "Carol is Alice's sister"),
        ("My sister Carol lives in Rome.", "Alice's sister Carol lives in Rome"),
        ("My wife works at a bank.", "Alice's wife works at a bank"),
        ("My best friend is Dana.", "Dana is Alice's best friend"),
        ("My brother's name is Tom.", "Alice's brother's name is Tom"),
    ],
)
def test_relation(text: str, content: str) -> None:
    assert said(text) == [("relation", content)]


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("I usually go to the gym after work.", "Alice usually goes to the gym after work"),
        ("I always drink coffee in the morning.", "Alice always drinks coffee in the morning"),
        ("Every day I walk my dog.", "Every day, Alice walks Alice's dog"),
        ("I never eat after 8 pm.", "Alice never eats after 8 pm"),
        ("I swim twice a week.", "Alice swims twice a week"),
        ("I often study late.", "Alice often studies late"),
    ],
)
def test_habit(text: str, content: str) -> None:
    assert said(text) == [("habit", content)]


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("I can speak French.", "Alice can speak French"),
        ("I'm able to code in Rust.", "Alice is able to code in Rust"),
        ("I know how to play the piano.", "Alice knows how to play the piano"),
        ("I speak three languages.", "Alice speaks three languages"),
        ("I can't swim.", "Alice cannot swim"),
        ("I'm good at chess.", "Alice is good at chess"),
    ],
)
def test_ability(text: str, content: str) -> None:
    assert said(text) == [("ability", content)]


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("I have a dog named Rex.", "Alice has a dog named Rex"),
        ("I've got two cats.", "Alice has two cats"),
        ("I don't eat meat.", "Alice does not eat meat"),
        ("I'm vegetarian.", "Alice is vegetarian"),
        ("I'm allergic to peanuts.", "Alice is allergic to peanuts"),
        ("I'm learning Japanese.", "Alice is learning Japanese"),
        ("I've been to Japan twice.", "Alice has been to Japan twice"),
        ("My birthday is on May 3.", "Alice's birthday is on May 3"),
        ("I teach maths to my kids.", "Alice teaches maths to Alice's kids"),
    ],
)
def test_other_facts(text: str, content: str) -> None:
    assert said(text) == [("fact", content)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我喜欢喝绿茶。", ("preference", "小王喜欢喝绿茶")),
        ("我不喜欢香菜。", ("preference", "小王不喜欢香菜")),
        ("我最喜欢的电影是《阿甘正传》。", ("preference", "小王最喜欢的电影是《阿甘正传》")),
        ("我叫小明。", ("identity", "小王叫小明")),
        ("我在阿里巴巴工作。", ("identity", "小王在阿里巴巴工作")),
        ("我住在北京。", ("identity", "小王住在北京")),
        ("我是上海人。", ("identity", "小王是上海人")),
        ("我是一名医生。", ("identity", "小王是一名医生")),
        ("我今年三十岁。", ("identity", "小王今年三十岁")),
        ("我打算明年去日本。", ("plan", "小王打算明年去日本")),
        ("我计划学西班牙语。", ("plan", "小王计划学西班牙语")),
        ("明天我要去上海。", ("plan", "明天小王要去上海")),
        ("我的妹妹是小红。", ("relation", "小王的妹妹是小红")),
        ("我妈妈是老师。", ("relation", "小王的妈妈是老师")),
        ("我经常去健身房。", ("habit", "小王经常去健身房")),
        ("我每天早上跑步。", ("habit", "小王每天早上跑步")),
        ("我会说法语。", ("ability", "小王会说法语")),
        ("我能游泳。", ("ability", "小王能游泳")),
        ("我有一只狗。", ("fact", "小王有一只狗")),
    ],
)
def test_chinese(text: str, expected: tuple[str, str]) -> None:
    assert said(text, "小王") == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "Do you like tea?",
        "I like tea, do you?",
        "What do you think?",
        "I don't know.",
        "I'm not sure.",
        "Hello!",
        "hi",
        "Thanks, that helps.",
        "Ok thanks.",
        "I think I like tea.",
        "If I lived in Paris I would be happy.",
        "Maybe I will move to Rome.",
        "She said she likes tea.",
        "He told me he lives in Oslo.",
        "I like it.",
        "I love you.",
        "I like your idea.",
        "I went to the store yesterday.",
        "I need help with my code.",
        "I want a pizza.",
        "I'm tired.",
        "I'm looking for a restaurant.",
        "I see.",
        "I agree with that.",
        "I hope it works.",
        "I'd like a coffee.",
        "Alice lives in Berlin.",
        "",
        "   ",
        "你喜欢喝茶吗？",
        "我喜欢什么？",
        "好的",
        "谢谢",
        "嗯",
        "我不知道。",
        "我觉得他喜欢茶。",
        "我想去北京。",
        "如果我住在上海就好了。",
        "听说他住在北京。",
        "我爱你。",
        "我们住在北京。",
    ],
)
def test_nothing_to_keep(text: str) -> None:
    assert said(text) == [] and said(text, "小王") == []


def test_several_statements_in_one_message_in_order_once_each() -> None:
    text = "Hi! My name is Bob. I live in Berlin and I work at Siemens. I live in Berlin."
    assert said(text) == [
        ("identity", "Alice is called Bob"),
        ("identity", "Alice lives in Berlin"),
        ("identity", "Alice works at Siemens"),
    ]
    assert said("我叫小明，我在北京工作。", "小王") == [
        ("identity", "小王叫小明"),
        ("identity", "小王在北京工作"),
    ]


def test_kind_gives_category_and_importance() -> None:
    (found,) = statements("I prefer green tea", "Alice")
    assert found == Statement("preference", "preference", "Alice prefers green tea", 0.7)
    assert {kind: KINDS[kind][0] for kind in KINDS} == {
        "identity": "fact",
        "relation": "fact",
        "preference": "preference",
        "plan": "fact",
        "habit": "pattern",
        "ability": "capability",
        "fact": "fact",
    }
    assert [s.importance for s in statements("My name is Bob. My sister is Carol.", "A")] == [
        0.8,
        0.7,
    ]


def test_a_name_already_the_speakers_says_nothing_new() -> None:
    assert said("I'm Alice.") == []
    assert said("I'm Alice Smith.") == [("identity", "Alice is called Alice Smith")]


@pytest.mark.parametrize(
    ("first", "second", "relation"),
    [
        ("I live in Berlin.", "I live in Paris.", "lives_in"),
        ("I work at Google.", "I work at Siemens.", "works_at"),
        ("I'm from Lyon.", "I'm from Oslo.", "from"),
        ("我住在北京。", "我住在上海。", "lives_in"),
    ],
)
def test_rewritten_claims_are_read_by_the_relation_patterns(
    first: str, second: str, relation: str
) -> None:
    speaker = "小王" if "我" in first else "Alice"
    extractor = get_extractor()
    objects = []
    for text in (first, second):
        (statement,) = statements(text, speaker)
        found = [
            r for r in extractor.extract(statement.content).relations if r.relation == relation
        ]
        assert len(found) == 1, statement.content
        objects.append(found[0].target)
    assert objects[0] != objects[1]  # one subject, one predicate, two objects: supersedes


def test_a_relation_is_read_as_one() -> None:
    (statement,) = statements("My sister is Carol.", "Alice")
    relations = {r.relation for r in get_extractor().extract(statement.content).relations}
    assert "sibling_of" in relations
    (statement,) = statements("I prefer green tea.", "Alice")
    relations = {r.relation for r in get_extractor().extract(statement.content).relations}
    assert "likes" in relations


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.text(max_size=80))
def test_never_raises_and_every_content_stands(text: str, speaker: str) -> None:
    found = statements(text, speaker)
    assert len(found) <= 8
    for statement in found:
        assert statement.content.strip() == statement.content and statement.content
        assert len(statement.content) <= MAX_STATEMENT_CHARS * 2 + 64
        assert statement.kind in KINDS
        assert (statement.category, statement.importance) == KINDS[statement.kind]


_FIRST_PERSON = st.sampled_from(
    ["I ", "I'm ", "I've ", "My ", "my ", "I don't ", "I can ", "Next week I ", "我", "我的"]
)


@settings(max_examples=300, deadline=None)
@given(_FIRST_PERSON, st.text(max_size=120))
def test_first_person_text_never_raises(start: str, rest: str) -> None:
    for statement in statements(start + rest, "Bob"):
        assert statement.content and len(statement.content) <= MAX_STATEMENT_CHARS * 2 + 64
