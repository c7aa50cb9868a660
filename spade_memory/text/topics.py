"""Topics: the common nouns a memory is about, as graph keys beside its names.

Names link the memories that name the same person; topics link the memories
about the same thing: "Alice joined the payments team" and "Bob leads the
payments team" share the topic ``topic:payments team``, so the graph route goes
from Alice to the team to Bob.

- English: a noun phrase opened by a determiner or a possessive ("the payments
  team", "my pottery class", "a support group"): at most two words after it,
  without modifiers that say nothing of the thing ("new", "same", "other", ...)
  and stopping at a function word, a verb-like ending or punctuation.
- Chinese: the common nouns jieba's part-of-speech dictionary tags ``n`` (two
  characters or more, kinship words and a few empty nouns aside), the words
  ending with a place or group character (诊所, which the dictionary tags as a
  verb), verbal nouns used as nouns, and the head noun of a compound (学生宿舍
  also gives 宿舍).

Each topic's key is ``topic:`` and the canonical form of its words
(:func:`~spade_memory.text.names.canonical_key`), so "The Payments team" and
"the payments team" are one node. A topic named by too many memories to say
anything is a hub, which the graph route does not expand (see
:mod:`spade_memory.retrieval.graph`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from .graph import Entity
from .names import canonical_key
from .scripts import HAN as _CJK
from .tokenizer import STOPWORDS

__all__ = [
    "MAX_TOPICS",
    "TOPIC_PREFIX",
    "TOPIC_TYPE",
    "ZH_PLACE_ENDINGS",
    "chinese_topics",
    "english_topics",
    "topic_entity",
    "topic_keys",
]

TOPIC_TYPE = "topic"
TOPIC_PREFIX = "topic:"
MAX_TOPICS = 8
"""At most this many topics per memory (the first ones found)."""

_DETERMINERS_WORDS = """
    the a an my our your his her their its this that these those some another
"""
_DETERMINERS = frozenset(_DETERMINERS_WORDS.split())
_OPENER = re.compile(r"\b(?:" + "|".join(sorted(_DETERMINERS)) + r")\s+", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z][A-Za-z\-]*")
_EMPTY_WORDS = """
    new old good great big small little nice same other whole first last next few lot lots bit
    couple kind sort really very such own best favorite favourite only main whole entire real
    huge tiny amazing awesome beautiful wonderful fun lovely special different certain
    particular recent latest local usual bunch ton one two three four five half
    thing things something stuff way time times day days week weeks month months year years
    moment while end part morning afternoon evening night weekend weekends every each
"""
_EMPTY = frozenset(_EMPTY_WORDS.split())
_VERB_ENDINGS = ("ed", "ly")
_VERBS_WORDS = """
    meets leads runs works plays goes gets makes takes says wants needs likes loves helps
    starts opens closes lives moves comes looks seems keeps stays sells buys pays shows
    met led ran went came got made took said told gave felt saw began became left kept sent
    meet lead run work play go get make take say want need like love help start open close
    live move come look seem keep stay sell buy pay show
"""
_VERBS = frozenset(_VERBS_WORDS.split())
_ZH_EMPTY_WORDS = """
    时候 时间 事情 东西 地方 问题 情况 方面 样子 感觉 今天 明天 昨天 现在 以后 以前 时期
    哥哥 姐姐 弟弟 妹妹 爸爸 妈妈 父亲 母亲 爷爷 奶奶 外公 外婆 儿子 女儿 孩子 丈夫 妻子
    老公 老婆 叔叔 阿姨 舅舅 姑姑 同事 朋友 老师 老板 经理 大家 人们 别人
"""
_ZH_EMPTY = frozenset(_ZH_EMPTY_WORDS.split())
# the last character of a place or group: a word ending with one is a noun (诊所 is tagged v)
ZH_PLACE_ENDINGS = frozenset("所馆站院队社团店厂园室场部局组楼校厅")
"""Characters that end the name of a place or a group (诊所, 游泳馆, 养老院, 登山社)."""
_ZH_NOUN_BEFORE = frozenset({"在", "去", "到", "的", "从"})


def topic_entity(phrase: str) -> Entity | None:
    """The topic node of ``phrase`` (``"payments team"`` -> ``topic:payments team``)."""
    key = canonical_key(phrase)
    if not key or key in STOPWORDS or len(key) > 80:
        return None
    return Entity(key=TOPIC_PREFIX + key, type=TOPIC_TYPE, value=" ".join(phrase.split()))


def topic_keys(keys: Iterable[str]) -> list[str]:
    """The topic keys a query may name: one per key of one or two words it may name."""
    return [TOPIC_PREFIX + key for key in keys if key and ":" not in key and key.count(" ") < 2]


def english_topics(text: str) -> Iterable[tuple[int, int, Entity]]:
    """The noun phrases of ``text`` opened by a determiner: ``(start, end, entity)``."""
    for opener in _OPENER.finditer(text):
        position = opener.end()
        words: list[tuple[int, int, str]] = []
        while len(words) < 3:
            match = _WORD.match(text, position)
            if match is None:
                break
            word = match.group().lower()
            if word in STOPWORDS or word in _VERBS or word.endswith(_VERB_ENDINGS) or len(word) < 2:
                break
            if (word in _DETERMINERS or word in _EMPTY) and any(w not in _EMPTY for *_, w in words):
                break  # "the animal shelter every weekend", "a cat last spring"
            words.append((match.start(), match.end(), word))
            position = match.end()
            if text[position : position + 1] != " ":
                break
            position += 1
        while words and words[0][2] in _EMPTY:
            words.pop(0)
        words = words[-2:]  # the head noun ends an English noun phrase
        if not words or words[-1][2] in _EMPTY:
            continue
        entity = topic_entity(" ".join(word for _, _, word in words))
        if entity is not None:
            yield words[0][0], words[-1][1], entity


def chinese_topics(
    spans: Sequence[tuple[int, int, str, str]],
    known: Callable[[str], bool],
    tag_of: Callable[[str], str | None] = lambda word: None,
) -> Iterable[tuple[int, int, Entity]]:
    """The common nouns among ``spans`` (start, end, word, tag), as topics.

    A noun is a word tagged ``n``; a word ending with a place or group character
    (诊所, 游泳馆, 登山社), whatever its tag; or a verbal noun (``vn``) used as a
    noun, after 在/去/到/的 or before 的. A compound noun of four characters or
    more whose last two make a noun the dictionary knows (``tag_of``) also gives
    that head noun ("学生宿舍" -> 学生宿舍 and 宿舍), as Chinese compounds name
    what they are last (not of three: 图书馆 is 图书 + 馆, not 图 + 书馆).
    ``known`` says whether a word is a name already (it is then no topic).
    """
    for index, (start, end, word, flag) in enumerate(spans):
        if len(word) < 2 or not _CJK.search(word):
            continue
        if not (flag == "n" or _nominal(word, flag, spans, index)):
            continue
        if word in _ZH_EMPTY or word in STOPWORDS or known(word):
            continue
        entity = topic_entity(word)
        if entity is None:
            continue
        yield start, end, entity
        head = word[-2:]
        if len(word) >= 4 and tag_of(head) == "n" and head not in _ZH_EMPTY:
            head_entity = topic_entity(head)
            if head_entity is not None:
                yield end - 2, end, head_entity


def _nominal(word: str, flag: str, spans: Sequence[tuple[int, int, str, str]], index: int) -> bool:
    """Whether a word not tagged ``n`` is a noun where it stands."""
    if flag.startswith(("nr", "ns", "nt", "m", "t", "r")):
        return False
    if word[-1] in ZH_PLACE_ENDINGS:
        return True
    if flag != "vn":
        return False
    before = spans[index - 1][2] if index else ""
    after = spans[index + 1][2] if index + 1 < len(spans) else ""
    return before in _ZH_NOUN_BEFORE or after == "的"
