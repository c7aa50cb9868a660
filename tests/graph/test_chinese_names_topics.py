"""Chinese people's names and topic nouns where jieba's dictionary says otherwise."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from factories import fill

from spade_memory.config import MemoryConfig, RetrievalConfig
from spade_memory.manager import MemoryManager
from spade_memory.text.extraction import EntityExtractor
from spade_memory.text.mentions import MentionFinder
from spade_memory.text.topics import english_topics

Opener = Callable[..., Awaitable[MemoryManager]]  # the open_memory fixture (conftest.py)
FINDER = MentionFinder()
X = EntityExtractor()


def people(text: str) -> list[str]:
    return [m.entity.value for m in FINDER.find(text) if m.entity.type == "person"]


def topics(text: str) -> list[str]:
    return [m.entity.key for m in FINDER.find_with_topics(text)[1]]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        # a surname the cut left alone, its given name glued to a verb: 曹 + 实在
        ("曹实在车间加班。", ["曹实"]),
        ("韦实在工厂上班。", ["韦实"]),
        # an unknown name with an adverb glued to its end: 邵凡常来 -> 邵凡 + 常来
        ("邵凡常来图书馆。", ["邵凡"]),
        # a one-character verb glued to it, as before
        ("王小红住在上海。", ["王小红"]),
        # a name of three characters stays whole
        ("李志刚去北京出差。", ["李志刚"]),
        # a rare dictionary word where a person stands: opening a clause before a
        # verb or a preposition, or named with another (和 ... 一起)
        ("文静在银行上班。", ["文静"]),
        ("白雪和文静一起跑步。", ["白雪", "文静"]),
        ("谢实和朋友去爬山。", ["谢实"]),
    ],
)
def test_chinese_names_jieba_does_not_tell_from_words(text: str, names: list[str]) -> None:
    assert people(text) == names


@pytest.mark.parametrize(
    "text",
    [
        "安全是第一位的。",  # a common word opening a clause: no name
        "高兴是最重要的。",
        "方便在哪里？",
        "马上就到。",
        "谁管着这个仓库？",  # a surname-like verb and its particle (管 + 着)
        "和平是大家的愿望。",  # 和 opens far more clauses as a word than as a surname
    ],
)
def test_common_words_and_verbs_are_no_names(text: str) -> None:
    assert people(text) == []


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        # jieba's dictionary tags 诊所 a verb; a word ending with 所/馆/站/队 ... is a noun
        ("他在诊所打针。", ["topic:诊所"]),
        ("诊所的医生是鲁平。", ["topic:诊所", "topic:医生"]),
        ("我每周去游泳馆。", ["topic:游泳馆"]),
        # a compound of four characters also gives its head noun
        ("她住在学生宿舍。", ["topic:学生宿舍", "topic:宿舍"]),
        ("宿舍的电视坏了。", ["topic:宿舍", "topic:电视"]),
        # ... not one of three (图书馆 is 图书 + 馆)
        ("她常去图书馆。", ["topic:图书馆"]),
        # a verbal noun used as a noun (after 的), not as a verb
        ("公司的培训很有用。", ["topic:公司", "topic:培训"]),
        ("他们在学习。", []),
    ],
)
def test_chinese_topic_nouns_from_tags_and_context(text: str, keys: list[str]) -> None:
    assert topics(text) == keys


def test_a_name_is_no_topic_and_a_topic_links_to_the_name() -> None:
    found = X.extract("曹实在车间加班。")
    assert found.keys == {"曹实", "topic:车间"}
    assert [(r.source, r.target) for r in found.relations] == [("曹实", "topic:车间")]


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("Nora joined the robotics club.", ["topic:robotics club"]),
        ("The brass band plays on Sundays.", ["topic:brass band"]),
        ("Leon shares a flat with Bruno.", ["topic:flat"]),
    ],
)
def test_english_topics_unchanged(text: str, keys: list[str]) -> None:
    assert [entity.key for _, _, entity in english_topics(text)] == keys


WORKSHOP = [
    "邵峰在诊所当前台。",
    "诊所的医生是鲁平。",
    "高明和同学一起工作。",
    "田亮跟表哥一起工作。",
    "邵华的医生下周休假。",
    "医院的停车费很贵。",
    "鲁迅的小说很有名。",
    "周五记得交报告。",
]


async def test_a_chinese_relation_question_over_a_shared_topic(open_memory: Opener) -> None:
    """邵峰 and 鲁平 share only the clinic (诊所, which jieba tags as a verb); the
    distractors share the question's words."""
    config = MemoryConfig(
        in_memory=True, embedder="hashing", retrieval=RetrievalConfig(cache_ttl_seconds=0)
    )
    memory = await open_memory("clinic@localhost", config)
    await fill(memory, WORKSHOP)
    await memory.flush()
    for query in ("邵峰和谁一起工作？", "邵峰的同事是谁？"):
        found = [r.memory.content for r in await memory.search(query, limit=3)]
        assert WORKSHOP[1] in found, (query, found)
