"""Where a text mentions an entity: names, places, organisations, terms, handles, dates.

- Chinese: people, places, organisations and other proper nouns. Each Chinese run
  is cut into words by jieba and tagged from jieba's part-of-speech dictionary
  (``nr``, ``ns``, ``nt``, ``nz``, ...); a word the dictionary does not know that
  starts with a surname is a person's name. Organisation suffixes (公司, 大学,
  科技, 项目, ...) join the name before them (北斗 + 项目, though the dictionary
  calls 北斗 a name). A dictionary "name" ending with a place or group character
  (养老院, 幼儿园) is a common noun, hence a topic.
- English (and other Latin-script text): capitalised spans ("Bank of America"),
  without words capitalised only because they open a sentence ("Yesterday",
  "Thanks"): a lone opening word counts when a verb, a colon or a comma follows it,
  when it is possessive, or when the text capitalises it elsewhere
  (:func:`spade_memory.text.names.english_names`).
- Quoted terms ("Charlotte's Web", 《三体》), @-mentions, JIDs, dates and times
  (:mod:`spade_memory.text.dates`).
- A he/she/they (他/她) opening a sentence or clause stands for the last name.

Every entity gets a canonical key (:func:`~spade_memory.text.names.canonical_key`:
NFKC width folding, case folding, punctuation dropped), so one entity is one node
however it is written.
"""

from __future__ import annotations

import bisect
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .dates import find_dates
from .graph import Entity
from .names import canonical_key, english_names, make_entity
from .scripts import HAN as _CJK
from .scripts import HAN_RUN as _CJK_RUN
from .tokenizer import cut_cjk, get_tokenizer
from .topics import MAX_TOPICS, ZH_PLACE_ENDINGS, chinese_topics, english_topics

__all__ = ["Mention", "MentionFinder", "canonical_key", "make_entity", "split_sentences"]

logger = logging.getLogger(__name__)

_BOUNDARY = re.compile(r"[.!?]+(?=\s|$)|[。！？；;]+|\n")
_BOUNDARY_CUE = re.compile(r"[.!?。！？；;\n]")  # what a boundary starts with
_ABBREVIATION = re.compile(r"\b(?:Mr|Mrs|Ms|Dr|St|vs)$")
_ABBREVIATION_CHARS = 4  # its longest word and a newline
_ABBREVIATION_ENDS = frozenset("rst")  # the last letters of the abbreviations
_QUOTED = re.compile(
    r'"([^"\n]{2,60})"|“([^”\n]{2,60})”|「([^」\n]{1,60})」|『([^』\n]{1,60})』|《([^》\n]{1,60})》'
)
_QUOTE_CUE = re.compile(r'["“「『《]')  # what a quoted term cannot be without
_MENTION = re.compile(r"(?<![\w@.])@([A-Za-z0-9_][A-Za-z0-9_.\-]{0,63})(?![\w@])")
_JID = re.compile(
    r"(?<![\w.@])([A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*)(?:/[^\s,;]+)?"
)

_POS_TYPES = {
    "nr": "person",
    "nrfg": "person",
    "nrt": "name",
    "ns": "place",
    "nt": "organization",
    "nz": "name",
}
_ZH_ORG_SUFFIXES_WORDS = """
    科技 项目 工作室 基金会 委员会 出版社 实验室
    公司 集团 大学 学院 学校 中学 小学 银行 医院 研究所 研究院 中心 团队 小组 部门 协会 俱乐部
"""
_ZH_ORG_SUFFIXES = frozenset(_ZH_ORG_SUFFIXES_WORDS.split())
_ZH_LEADING = ("和", "与", "跟", "同")
_ZH_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程"
    "苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛"
    "郝龚邵万钱严覃武戴莫孔向汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦"
    "俞左柳甘祝包宁尚符舒阮柯纪梅童凌毕单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房"
    "滕屈饶解牟艾尤阳时穆农司卓古吉缪简车项连芦麦褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应"
    "臧闵苟邬边卞姬师和仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩明佘池查麻苑迟邝"
)
_ZH_COMPOUND_SURNAMES_WORDS = """
    欧阳 司马 诸葛 上官 东方 皇甫 令狐 慕容 尉迟 长孙 夏侯
"""
_ZH_COMPOUND_SURNAMES = frozenset(_ZH_COMPOUND_SURNAMES_WORDS.split())
_ZH_PREFIXES = ("小", "老", "阿")
# one-character verbs jieba's HMM glues to an unknown name ("王小红住", "周杰养")
_ZH_GLUE = frozenset(
    "住是在和说去有也就要会与跟同被把给对从向都还又养买卖吃喝看做写读教开用送带坐打玩听穿"
)
# surnames that are far more often a preposition or conjunction when they stand alone
_ZH_FUNCTION_SURNAMES = frozenset("和于向时应全连查从对把被给在是明解过")
_ZH_PARTICLES = frozenset("着了过的地得们吗呢吧啊")
# dictionary tags of words that are also given names (方圆 n, 常乐 a, 童心 n)
_ZH_NAME_LIKE_TAGS = frozenset({"n", "a", "an", "nz", "ns", "b", "nrt"})
_ZH_RARE_WORD = 1_000  # a dictionary word rarer than this may be a name where a person stands
# what follows a person opening a clause ("方圆在...", "常乐打算...", "童心每天..."),
# or named with another ("和文静一起...")
_ZH_SUBJECT_CUES_WORDS = """
    正在 每天 每周 经常 常常 已经 一直 加入 打算 喜欢 认识 住在 负责 参加 一起
"""
_ZH_SUBJECT_CUES = frozenset(_ZH_SUBJECT_CUES_WORDS.split())
_ZH_KIN_WORDS = """
    哥哥 姐姐 弟弟 妹妹 爸爸 妈妈 父亲 母亲 爷爷 奶奶 外公 外婆 儿子 女儿 孩子 丈夫 妻子
    老公 老婆 叔叔 阿姨 舅舅 姑姑 同事 朋友 老师 老板 经理
"""
_ZH_KIN = frozenset(_ZH_KIN_WORDS.split())
# A pronoun, looked for where it starts a word; _clause_pronouns keeps those opening a clause.
_PRONOUN = re.compile(r"(?<!\w)(?:he|she|they)\b|他|她", re.IGNORECASE)
_ASCII_PRONOUN = re.compile(r"\b(?:he|she|they)\b")  # ... on lower-cased ASCII text
_CLAUSE_BREAKS = frozenset("，,。！？；")
_SENTENCE_ENDS = frozenset(".!?")
_ANTECEDENT_TYPES = frozenset({"person", "name", "mention", "jid"})


def split_sentences(text: str) -> list[tuple[int, str]]:
    """The sentences of ``text`` (split at . ! ? ; and Chinese 。！？；) with their offsets."""
    return list(_sentences(text))


@lru_cache(maxsize=64)
def _sentences(text: str) -> tuple[tuple[int, str], ...]:
    # extraction and atoms split the same text several times; split it once
    found: list[tuple[int, str]] = []
    start = 0
    for match in _boundaries(text):
        # "Mr. Smith": not a sentence end. The abbreviation ends at the dot (or a
        # newline before it): the last four characters hold it (\b sees the one before).
        at = match.start()
        if match.group()[0] in ".!?" and _may_abbreviate(text, at):
            since = max(start, at - _ABBREVIATION_CHARS)
            if _ABBREVIATION.search(text, since, at):
                continue
        end = match.start() if match.group() == "\n" else match.end()
        if text[start:end].strip():
            found.append((start, text[start:end]))
        start = match.end()
    if text[start:].strip():
        found.append((start, text[start:]))
    return tuple(found)


def _may_abbreviate(text: str, at: int) -> bool:
    """False when no abbreviation (Mr, Dr, St, vs, ...) can end right before ``at``.

    Each ends with r, s or t, before ``at`` or before a newline there.
    """
    last = text[at - 1 : at] if at else ""
    if last == "\n":
        last = text[at - 2 : at - 1] if at > 1 else ""
    return last in _ABBREVIATION_ENDS


def _boundaries(text: str) -> Iterator[re.Match[str]]:
    """``_BOUNDARY.finditer(text)``, tried only where a boundary's first character is.

    The regex's search tries every position in turn (it has no first character to
    skip to), the characters a boundary starts with are found by a plain scan.
    """
    after = 0
    for cue in _BOUNDARY_CUE.finditer(text):
        if cue.start() >= after:
            match = _BOUNDARY.match(text, cue.start())
            if match is not None:
                after = match.end()
                yield match


@dataclass(frozen=True, slots=True)
class Mention:
    """An entity mentioned at ``text[start:end]``, in sentence number ``sentence``."""

    start: int
    end: int
    entity: Entity
    sentence: int = 0


class MentionFinder:
    """Finds entity mentions in text. Thread-safe; one per process is enough."""

    def __init__(self) -> None:
        self._pos_lock = threading.Lock()
        self._pos_cut: (
            tuple[Callable[[str], Sequence[str]], Mapping[str, str], Mapping[str, int]] | None
        ) = None

    def find(self, text: str) -> list[Mention]:
        """Every entity mention in ``text`` with its span, in order, overlaps removed."""
        return self._find(text)[0]

    def find_with_topics(self, text: str) -> tuple[list[Mention], list[Mention]]:
        """:meth:`find`'s mentions and the topics outside them (:meth:`topics`).

        The text is cut into Chinese words once for both.
        """
        mentions, spans = self._find(text)
        return mentions, self.topics(text, mentions, spans)

    def _find(self, text: str) -> tuple[list[Mention], list[tuple[int, int, str, str]] | None]:
        if not text:
            return [], None
        spans = None
        found: list[Mention] = []
        if "@" in text:  # what a JID or an @-mention cannot be without
            found.extend(self._jids_and_mentions(text))
        if _QUOTE_CUE.search(text):
            found.extend(self._quoted(text))
        for start, end, value, key in find_dates(text):
            found.append(Mention(start, end, Entity(key=key, type=key.split(":")[0], value=value)))
        found.extend(self._latin(text))
        if _CJK.search(text):
            spans = self._spans(text)
            if spans is not None:
                found.extend(self._chinese(spans))
        found.sort(key=lambda m: (m.start, -(m.end - m.start)))
        kept: list[Mention] = []
        for mention in found:
            if kept and mention.start < kept[-1].end:
                continue
            kept.append(mention)
        kept = _resolve_pronouns(text, kept)
        starts = [offset for offset, _ in split_sentences(text)]
        return [
            Mention(m.start, m.end, m.entity, max(0, bisect.bisect_right(starts, m.start) - 1))
            for m in kept
        ], spans

    @staticmethod
    def _jids_and_mentions(text: str) -> Iterable[Mention]:
        for match in _JID.finditer(text):
            bare = match.group(1)
            yield Mention(
                match.start(), match.end(), Entity(key=canonical_key(bare), type="jid", value=bare)
            )
        for match in _MENTION.finditer(text):
            mention = make_entity(match.group(1), "mention")
            if mention is not None:
                yield Mention(match.start(), match.end(), mention)

    @staticmethod
    def _quoted(text: str) -> Iterable[Mention]:
        for match in _QUOTED.finditer(text):
            index = next(i for i in range(1, 6) if match.group(i) is not None)
            entity = make_entity(match.group(index), "work" if index == 5 else "term")
            if entity is not None and len(entity.key) >= 2:
                yield Mention(match.start(index), match.end(index), entity)

    @staticmethod
    def _latin(text: str) -> list[Mention]:
        return [Mention(start, end, entity) for start, end, entity in english_names(text)]

    def topics(
        self,
        text: str,
        mentions: Sequence[Mention],
        spans: Sequence[tuple[int, int, str, str]] | None = None,
    ) -> list[Mention]:
        """The topics of ``text`` (:mod:`spade_memory.text.topics`) outside its ``mentions``.

        At most :data:`~spade_memory.text.topics.MAX_TOPICS`, each once, in order.
        ``spans`` are the text's tagged Chinese words, if cut already.
        """
        found: list[tuple[int, int, Entity]] = list(english_topics(text))
        if _CJK.search(text):
            if spans is None:
                spans = self._spans(text)
            if spans is not None:
                named = {m.entity.value for m in mentions}
                tags = self._segmenter()[1]
                found.extend(chinese_topics(spans, named.__contains__, tags.get))
        found.sort(key=lambda item: item[0])
        taken = sorted((m.start, m.end) for m in mentions)
        starts = [offset for offset, _ in split_sentences(text)]
        kept: list[Mention] = []
        keys: set[str] = set()
        for start, end, entity in found:
            at = bisect.bisect_right(taken, (end, end))
            if (at and taken[at - 1][1] > start) or entity.key in keys:
                continue  # inside a name ("the Falcon project"), or said already
            keys.add(entity.key)
            sentence = max(0, bisect.bisect_right(starts, start) - 1)
            kept.append(Mention(start, end, entity, sentence))
            if len(kept) >= MAX_TOPICS:
                break
        return kept

    def _spans(self, text: str) -> list[tuple[int, int, str, str]] | None:
        """``(start, end, word, tag)`` over ``text`` (``None``: the offsets went astray)."""
        spans: list[tuple[int, int, str, str]] = []
        offset = 0
        for word, flag in self._pos(text):
            spans.append((offset, offset + len(word), word, flag))
            offset += len(word)
        if offset != len(text):
            logger.debug("part-of-speech offsets do not match the text; Chinese words skipped")
            return None
        return spans

    @staticmethod
    def _chinese(spans: Sequence[tuple[int, int, str, str]]) -> Iterable[Mention]:
        index = 0
        while index < len(spans):
            start, end, word, flag = spans[index]
            kind = _POS_TYPES.get(flag)
            if (
                kind is None
                and flag in ("n", "x")
                and len(word) >= 2
                and index + 1 < len(spans)
                and spans[index + 1][2] in _ZH_ORG_SUFFIXES
            ):
                kind = "organization"  # 星辰 + 科技, 星火 + 项目
            if kind is None or not _CJK.search(word):
                index += 1
                continue
            if kind == "person" and len(word) >= 3 and word.startswith(_ZH_LEADING):
                start, word = start + 1, word[1:]
            if kind == "person" and len(word) >= 3 and word.endswith(_ZH_LEADING):
                end, word = end - 1, word[:-1]
            if word in _ZH_KIN:
                index += 1
                continue
            if (
                kind == "person"
                and len(word) == 1
                and index > 0
                and spans[index - 1][2] in _ZH_PREFIXES
            ):
                start, word = spans[index - 1][0], spans[index - 1][2] + word
            elif (
                word in _ZH_COMPOUND_SURNAMES
                and index + 1 < len(spans)
                and spans[index + 1][3] in ("nr", "nrt")
            ):
                end, word, kind = spans[index + 1][1], word + spans[index + 1][2], "person"
                index += 1
            elif (
                kind == "person"
                and not (
                    word[0] in _ZH_SURNAMES
                    or word[:2] in _ZH_COMPOUND_SURNAMES
                    or word.startswith(_ZH_PREFIXES)
                )
                and not (index + 1 < len(spans) and spans[index + 1][2] in _ZH_ORG_SUFFIXES)
            ):
                index += 1
                continue
            if index + 1 < len(spans) and spans[index + 1][2] in _ZH_ORG_SUFFIXES:
                end, word, kind = spans[index + 1][1], word + spans[index + 1][2], "organization"
                index += 1
            index += 1
            if len(word) < 2:
                continue
            entity = make_entity(word, kind)
            if entity is not None:
                yield Mention(start, end, entity)

    def _pos(self, text: str) -> Iterable[tuple[str, str]]:
        """``(word, tag)`` covering ``text``: jieba's words of each Chinese run, tagged.

        Tags come from jieba's part-of-speech dictionary, and names from
        :func:`_tag_run` (names the dictionary does not know, or knows as words).
        jieba's own tagger (``jieba.posseg``) runs a second HMM over every
        unknown stretch and is ten times slower; it is asked only about an
        unknown word that may hold a name and more.
        """
        cut, tags, freq = self._segmenter()
        position = 0
        for match in _CJK_RUN.finditer(text):
            if match.start() > position:
                yield text[position : match.start()], "x"
            yield from _tag_run(cut(match.group()), tags, freq)
            position = match.end()
        if position < len(text):
            yield text[position:], "x"

    def _segmenter(
        self,
    ) -> tuple[Callable[[str], Sequence[str]], Mapping[str, str], Mapping[str, int]]:
        found = self._pos_cut
        if found is None:
            with self._pos_lock:
                if self._pos_cut is None:
                    get_tokenizer().warm_up()  # jieba's dictionary, loaded once, quietly
                    import jieba
                    import jieba.posseg

                    tags: Mapping[str, str] = jieba.posseg.dt.word_tag_tab
                    freq: Mapping[str, int] = jieba.dt.FREQ
                    # the tokenizer's cut, cached: a memory's text is cut once for both
                    self._pos_cut = (cut_cjk, tags, freq)
                found = self._pos_cut
        assert found is not None
        return found


def _looks_like_name(word: str) -> bool:
    """A word jieba does not know that reads as a Chinese name: a surname and one or two more.

    Not when it ends with a particle ("管着", "高了"): a verb and its particle.
    """
    if not 2 <= len(word) <= 4 or not _CJK_RUN.fullmatch(word) or word[-1] in _ZH_PARTICLES:
        return False
    if word[:2] in _ZH_COMPOUND_SURNAMES:
        return len(word) >= 3
    return word[0] in _ZH_SURNAMES or (word[0] in _ZH_PREFIXES and len(word) == 2)


def _tag_run(
    words: Sequence[str], tags: Mapping[str, str], freq: Mapping[str, int]
) -> Iterator[tuple[str, str]]:
    """``(word, tag)`` for jieba's ``words`` of one Chinese run, people's names tagged ``nr``.

    Besides the names jieba's dictionary tags:

    - a word the dictionary does not know that reads as a name
      (:func:`_looks_like_name`); a one-character verb or adverb the cut glued
      to it is cut off ("王小红住" -> 王小红 + 住, "孟凡常" -> 孟凡 + 常);
    - a surname the cut left alone, followed by a word made of a given name and
      a verb or preposition ("邱" + "实在仓库" -> 邱实 + 在);
    - a rare dictionary word read as a name where a person stands: opening a
      clause (or after 和/跟/与/同) before a verb or a preposition ("方圆在乐队",
      "常乐打算"), and starting with a surname.

    And a word the dictionary tags as a name that ends with a place or group
    character (养老院, 碧桂园) is tagged a common noun (``n``).
    """
    count = len(words)
    index = 0
    while index < count:
        word = words[index]
        following = words[index + 1] if index + 1 < count else ""
        subject = index == 0 or words[index - 1] in _ZH_LEADING
        tag = tags.get(word)
        if tag is None:
            if not _looks_like_name(word):
                yield word, "x"
            elif len(word) >= 3 and word[-1] in _ZH_GLUE:
                yield word[:-1], "nr"
                yield word[-1], "x"
            elif len(word) >= 3:
                yield from _split_name(word)
            else:
                yield word, "nr"
        elif (
            len(word) == 1
            and subject
            and word in _ZH_SURNAMES
            and word not in _ZH_FUNCTION_SURNAMES
            and len(following) == 2
            and following[1] in _ZH_GLUE
            and following[0] not in _ZH_GLUE
        ):
            yield word + following[0], "nr"
            yield following[1], "x"
            index += 1
        elif (
            subject
            and not tag.startswith("nr")
            and tag in _ZH_NAME_LIKE_TAGS
            and 2 <= len(word) <= 3
            and (word[0] in _ZH_SURNAMES or word[:2] in _ZH_COMPOUND_SURNAMES)
            and word[0] not in _ZH_FUNCTION_SURNAMES
            and freq.get(word, 0) < _ZH_RARE_WORD
            and (following in _ZH_SUBJECT_CUES or following[:1] in _ZH_GLUE)
        ):
            yield word, "nr"
        elif tag.startswith("nr") and word[-1] in ZH_PLACE_ENDINGS:
            # the dictionary's "names" ending with a place or group character are
            # places and institutions (养老院, 幼儿园, 碧桂园, 雷达站), not people
            yield word, "n"
        else:
            yield word, tag
        index += 1


@lru_cache(maxsize=1024)
def _split_name(word: str) -> tuple[tuple[str, str], ...]:
    """An unknown word of three or four characters: a name, or a name and what follows it.

    jieba's tagger reads it with its own HMM ("孟凡常" -> 孟凡 + 常, "李志刚" stays).
    """
    import jieba.posseg

    pieces = [(piece.word, piece.flag) for piece in jieba.posseg.cut(word)]
    if len(pieces) > 1 and pieces[0][1].startswith("nr") and len(pieces[0][0]) >= 2:
        return (pieces[0][0], "nr"), (word[len(pieces[0][0]) :], "x")
    return ((word, "nr"),)


def _resolve_pronouns(text: str, mentions: list[Mention]) -> list[Mention]:
    """A he/she/they (他/她) opening a sentence or clause stands for the last name before it."""
    lowered = text.lower()
    if "he" not in lowered and "他" not in text and "她" not in text:
        return mentions  # no he, she, they, 他 or 她 (most texts)
    added: list[Mention] = []
    for start, end in _clause_pronouns(text, lowered):
        before = [m for m in mentions if m.end <= start and m.entity.type in _ANTECEDENT_TYPES]
        if before and start - before[-1].end < 300:
            added.append(Mention(start, end, before[-1].entity))
    if not added:
        return mentions
    return sorted([*mentions, *added], key=lambda m: m.start)


def _clause_pronouns(text: str, lowered: str) -> Iterator[tuple[int, int]]:
    """Spans of he/she/they (他/她) opening the text, a sentence or a clause.

    What ``(?:(?<=^)|(?<=[.!?]\\s)|(?<=[，,。！？；]))\\s*((?:he|she|they)\\b|他|她)``
    (ignoring case) finds, pronoun first: before one, past any whitespace, is the
    start of the text, a clause break, or a sentence end and whitespace. An ASCII
    text is searched in lower case (``lowered``), where no case is ignored.
    """
    found = _ASCII_PRONOUN.finditer(lowered) if text.isascii() else _PRONOUN.finditer(text)
    for match in found:
        start = opening = match.start()
        while opening > 0 and text[opening - 1].isspace():
            opening -= 1
        if (
            opening == 0
            or text[opening - 1] in _CLAUSE_BREAKS
            or (opening < start and text[opening - 1] in _SENTENCE_ENDS)
        ):
            yield match.span()
