"""Where a text mentions an entity: names, places, organisations, terms, handles, dates.

- Chinese: people, places, organisations and other proper nouns. Each Chinese run
  is cut into words by jieba and tagged from jieba's part-of-speech dictionary
  (``nr``, ``ns``, ``nt``, ``nz``, ...); a word the dictionary does not know that
  starts with a surname is a person's name. Organisation suffixes (公司, 大学,
  科技, 项目, ...) join the name before them.
- English (and other Latin-script text): capitalised spans ("Bank of America"),
  without words capitalised only because they open a sentence ("Yesterday",
  "Thanks"): a lone opening word counts when a verb, a colon or a comma follows it,
  when it is possessive, or when the text capitalises it elsewhere.
- Quoted terms ("Charlotte's Web", 《三体》), @-mentions, JIDs, dates and times
  (:mod:`spade_memory.retrieval.dates`).
- A he/she/they (他/她) opening a sentence or clause stands for the last name.

Every entity gets a canonical key (:func:`canonical_key`: NFKC width folding, case
folding, punctuation dropped), so one entity is one node however it is written.
"""

from __future__ import annotations

import bisect
import logging
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ..storage.graph import Entity
from .dates import find_dates
from .tokenizer import ENGLISH_STOPWORDS, STOPWORDS, cut_cjk, get_tokenizer

__all__ = ["Mention", "MentionFinder", "canonical_key", "make_entity", "split_sentences"]

logger = logging.getLogger(__name__)

_BOUNDARY = re.compile(r"[.!?]+(?=\s|$)|[。！？；;]+|\n")
_ABBREVIATION = re.compile(r"\b(?:Mr|Mrs|Ms|Dr|St|vs)$")
_ABBREVIATION_CHARS = 4  # its longest word and a newline
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f][A-Za-z0-9\u00c0-\u024f'’\-]*")
_CAPITALISED_RUN = re.compile(
    r"(?<![A-Za-z0-9\u00c0-\u024f'’\-])[A-Z\u00c0-\u00d6\u00d8-\u00de][A-Za-z0-9\u00c0-\u024f'’\-]*"
    r"(?: (?:(?:of|de|del|da|van|von|der|den|la|le|&) )?"
    r"[A-Z\u00c0-\u00d6\u00d8-\u00de][A-Za-z0-9\u00c0-\u024f'’\-]*)*"
)
_CONNECTORS = frozenset({"of", "de", "del", "da", "van", "von", "der", "den", "la", "le", "&"})
_POSSESSIVE = re.compile(r"(?:'s|’s|'|’)$")
_QUOTED = re.compile(
    r'"([^"\n]{2,60})"|“([^”\n]{2,60})”|「([^」\n]{1,60})」|『([^』\n]{1,60})』|《([^》\n]{1,60})》'
)
_QUOTE_CUE = re.compile(r'["“「『《]')  # what a quoted term cannot be without
_MENTION = re.compile(r"(?<![\w@.])@([A-Za-z0-9_][A-Za-z0-9_.\-]{0,63})(?![\w@])")
_JID = re.compile(
    r"(?<![\w.@])([A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*)(?:/[^\s,;]+)?"
)
_INITIAL_BREAK = re.compile(r"[.!?:;\n\"“(\[]\s*$")
_PUNCT = re.compile(r"[^\w@.+#]+|(?<!\w)[.]|[.](?!\w)")
# ... on ASCII text: a dot not between word characters, then any byte but those kept.
_LONE_DOT = re.compile(r"\.(?:(?<!\w\.)|(?!\w))")
_ASCII_SEPARATORS = bytes(
    b if (chr(b).isascii() and chr(b).isalnum()) or chr(b) in "_@.+#" else 32 for b in range(256)
)

# Sentence-initial words that are capitalised only because they start a sentence.
_COMMON_STARTERS_WORDS = """
    yesterday today tomorrow tonight later last next since also please thanks thank hey hi hello
    yes yeah yep no nope ok okay oh wow well sure great nice cool awesome glad sorry maybe
    perhaps still even actually really just anyway besides however remember note let lets let's
    thats that's it's im i'm i've i'd i'll ive dont don't can't cant didn't won't good bad new
    old first second finally recently currently sometimes always never usually every everyone
    someone something nothing anything hope love congrats congratulations awesome amazing haha
    lol ah um hmm exactly true right absolutely definitely totally honestly anyway speaking
    talking feel feeling
"""
_COMMON_STARTERS = frozenset(_COMMON_STARTERS_WORDS.split())
_NOT_NAMES_WORDS = """
    i monday tuesday wednesday thursday friday saturday sunday january february march april june
    july august september october november december mr mrs ms dr
"""
_NOT_NAMES = frozenset(_NOT_NAMES_WORDS.split())
_ORG_SUFFIXES_WORDS = """
    inc corp corporation ltd llc gmbh company co university college school bank group team
    foundation institute hospital agency labs lab club association department ministry committee
    council church academy society
"""
_ORG_SUFFIXES = frozenset(_ORG_SUFFIXES_WORDS.split())
_PLACE_SUFFIXES_WORDS = """
    city street st park lake river mountain mountains beach island county avenue road bay valley
    square
"""
_PLACE_SUFFIXES = frozenset(_PLACE_SUFFIXES_WORDS.split())
_VERB_AFTER = re.compile(
    r"(?:'s|’s)?\s+(?:is|was|has|had|will|would|can|could|should|may|might|must|did|does|"
    r"and|or|met|went|saw|got|made|took|gave|came|ran|wrote|sent|found|left|bought|"
    r"brought|knew|thought|felt|kept|told|said|[a-z]+(?:s|ed))\b"
)
_POSSESSIVE_NAME = re.compile(r"\w(?:'s|’s)$")
_COLON_OR_COMMA = re.compile(r"\s*[:,]")
_PLACE_CUES = re.compile(r"\b(?:in|from|to|near|visited|visit|at)\s+(?:the\s+)?$", re.IGNORECASE)

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
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
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_ZH_KIN_WORDS = """
    哥哥 姐姐 弟弟 妹妹 爸爸 妈妈 父亲 母亲 爷爷 奶奶 外公 外婆 儿子 女儿 孩子 丈夫 妻子
    老公 老婆 叔叔 阿姨 舅舅 姑姑 同事 朋友 老师 老板 经理
"""
_ZH_KIN = frozenset(_ZH_KIN_WORDS.split())
_PRONOUNS = re.compile(
    r"(?:(?<=^)|(?<=[.!?]\s)|(?<=[，,。！？；]))\s*((?:he|she|they)\b|他|她)", re.IGNORECASE
)
_ANTECEDENT_TYPES = frozenset({"person", "name", "mention", "jid"})


def canonical_key(text: str) -> str:
    """The key of an entity: width folded (NFKC), case folded, punctuation dropped.

    ``"Alice"``, ``"ALICE"``, ``"Ａｌｉｃｅ"`` and ``"Alice's"`` share the key ``"alice"``.
    """
    folded = unicodedata.normalize("NFKC", text).casefold().strip()
    folded = _POSSESSIVE.sub("", folded)
    if folded.isascii():
        # _PUNCT's work on ASCII text (most keys, every English atom's) without its
        # regex scan of every character: the dots it drops, then a byte table.
        if "." in folded:
            folded = _LONE_DOT.sub(" ", folded)
        words = folded.encode("ascii").translate(_ASCII_SEPARATORS).split()
        return b" ".join(words).decode("ascii")[:200]
    folded = _PUNCT.sub(" ", folded)
    return " ".join(folded.split())[:200]


def split_sentences(text: str) -> list[tuple[int, str]]:
    """The sentences of ``text`` (split at . ! ? ; and Chinese 。！？；) with their offsets."""
    return list(_sentences(text))


@lru_cache(maxsize=64)
def _sentences(text: str) -> tuple[tuple[int, str], ...]:
    # extraction and atoms split the same text several times; split it once
    found: list[tuple[int, str]] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        # "Mr. Smith": not a sentence end. The abbreviation ends at the dot (or a
        # newline before it): the last four characters hold it (\b sees the one before).
        since = max(start, match.start() - _ABBREVIATION_CHARS)
        if match.group()[0] in ".!?" and _ABBREVIATION.search(text, since, match.start()):
            continue
        end = match.start() if match.group() == "\n" else match.end()
        if text[start:end].strip():
            found.append((start, text[start:end]))
        start = match.end()
    if text[start:].strip():
        found.append((start, text[start:]))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Mention:
    """An entity mentioned at ``text[start:end]``, in sentence number ``sentence``."""

    start: int
    end: int
    entity: Entity
    sentence: int = 0


def make_entity(value: str, kind: str) -> Entity | None:
    """An entity named ``value`` of type ``kind``, or ``None`` if it has no usable key."""
    value = " ".join(value.split()).strip(" ,.;:!?\"'“”‘’")
    key = canonical_key(value)
    if not key or key in STOPWORDS or len(key) > 120:
        return None
    return Entity(key=key, type=kind, value=value[:200])


class MentionFinder:
    """Finds entity mentions in text. Thread-safe; one per process is enough."""

    def __init__(self) -> None:
        self._pos_lock = threading.Lock()
        self._pos_cut: tuple[Callable[[str], Iterable[str]], Mapping[str, str]] | None = None

    def find(self, text: str) -> list[Mention]:
        """Every entity mention in ``text`` with its span, in order, overlaps removed."""
        if not text:
            return []
        found: list[Mention] = []
        if "@" in text:  # what a JID or an @-mention cannot be without
            found.extend(self._jids_and_mentions(text))
        if _QUOTE_CUE.search(text):
            found.extend(self._quoted(text))
        for start, end, value, key in find_dates(text):
            found.append(Mention(start, end, Entity(key=key, type=key.split(":")[0], value=value)))
        found.extend(self._latin(text))
        if _CJK.search(text):
            found.extend(self._chinese(text))
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
        ]

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
    def _latin(text: str) -> Iterable[Mention]:
        # only the words of capitalised runs (found in one regex pass) are looked at
        words = [
            word
            for run in _CAPITALISED_RUN.finditer(text)
            for word in _LATIN_WORD.finditer(text, run.start(), run.end())
        ]
        index = 0
        while index < len(words):
            first = words[index]
            if not _capitalised(first.group()):
                index += 1
                continue
            span = [first]
            cursor = index + 1
            while cursor < len(words):
                gap = text[span[-1].end() : words[cursor].start()]
                word = words[cursor].group()
                if gap != " " or _POSSESSIVE.search(span[-1].group()):
                    break
                if _capitalised(word) or (
                    word.lower() in _CONNECTORS
                    and cursor + 1 < len(words)
                    and _capitalised(words[cursor + 1].group())
                    and text[words[cursor].end() : words[cursor + 1].start()] == " "
                ):
                    span.append(words[cursor])
                else:
                    break
                cursor += 1
            index = cursor
            if len(span) > 6:
                continue
            opening = span[0].start()
            initial = opening == 0 or bool(
                _INITIAL_BREAK.search(text, max(0, opening - 8), opening)
            )
            while span and _droppable(span[0].group(), initial=initial):
                span.pop(0)
                initial = False
            while span and span[-1].group().lower() in _CONNECTORS:
                span.pop()
            if not span:
                continue
            if initial and len(span) == 1 and not _initial_name(text, span[0]):
                continue
            value = text[span[0].start() : span[-1].end()]
            value = _POSSESSIVE.sub("", value)
            words_lower = [w.group().lower() for w in span]
            if all(w in _NOT_NAMES or w in _COMMON_STARTERS for w in words_lower):
                continue
            kind = _latin_type([w.group() for w in span], text[: span[0].start()])
            entity = make_entity(value, kind)
            if entity is not None:
                yield Mention(span[0].start(), span[0].start() + len(value), entity)

    def _chinese(self, text: str) -> Iterable[Mention]:
        words = list(self._pos(text))
        offset = 0
        spans: list[tuple[int, int, str, str]] = []  # start, end, word, flag
        for word, flag in words:
            spans.append((offset, offset + len(word), word, flag))
            offset += len(word)
        if offset != len(text):
            logger.debug("part-of-speech offsets do not match the text; Chinese names skipped")
            return
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
            elif kind == "person" and not (
                word[0] in _ZH_SURNAMES
                or word[:2] in _ZH_COMPOUND_SURNAMES
                or word.startswith(_ZH_PREFIXES)
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

        Tags come from jieba's part-of-speech dictionary; a word it does not know
        (found by jieba's HMM) that starts with a surname is taken for a person's
        name (``nr``), a verb glued to its end cut off ("王小红住" -> "王小红").
        jieba's own tagger (``jieba.posseg``) does this with a second HMM over
        every unknown stretch and is ten times slower.
        """
        cut, tags = self._segmenter()
        position = 0
        for match in _CJK_RUN.finditer(text):
            if match.start() > position:
                yield text[position : match.start()], "x"
            for word in cut(match.group()):
                tag = tags.get(word)
                if tag is not None:
                    yield word, tag
                elif not _looks_like_name(word):
                    yield word, "x"
                elif len(word) >= 3 and word[-1] in _ZH_GLUE:
                    yield word[:-1], "nr"
                    yield word[-1], "x"
                else:
                    yield word, "nr"
            position = match.end()
        if position < len(text):
            yield text[position:], "x"

    def _segmenter(self) -> tuple[Callable[[str], Iterable[str]], Mapping[str, str]]:
        found = self._pos_cut
        if found is None:
            with self._pos_lock:
                if self._pos_cut is None:
                    get_tokenizer().warm_up()  # jieba's dictionary, loaded once, quietly
                    import jieba.posseg

                    tags: Mapping[str, str] = jieba.posseg.dt.word_tag_tab
                    # the tokenizer's cut, cached: a memory's text is cut once for both
                    self._pos_cut = (cut_cjk, tags)
                found = self._pos_cut
        assert found is not None
        return found


def _looks_like_name(word: str) -> bool:
    """A word jieba does not know that reads as a Chinese name: a surname and one or two more."""
    if not 2 <= len(word) <= 4 or not _CJK_RUN.fullmatch(word):
        return False
    if word[:2] in _ZH_COMPOUND_SURNAMES:
        return len(word) >= 3
    return word[0] in _ZH_SURNAMES or (word[0] in _ZH_PREFIXES and len(word) == 2)


def _resolve_pronouns(text: str, mentions: list[Mention]) -> list[Mention]:
    """A he/she/they (他/她) opening a sentence or clause stands for the last name before it."""
    if "he" not in text.lower() and "他" not in text and "她" not in text:
        return mentions  # no he, she, they, 他 or 她 (most texts)
    added: list[Mention] = []
    for match in _PRONOUNS.finditer(text):
        before = [
            m for m in mentions if m.end <= match.start(1) and m.entity.type in _ANTECEDENT_TYPES
        ]
        if before and match.start(1) - before[-1].end < 300:
            added.append(Mention(match.start(1), match.end(1), before[-1].entity))
    if not added:
        return mentions
    return sorted([*mentions, *added], key=lambda m: m.start)


def _capitalised(word: str) -> bool:
    return word[0].isupper() and (len(word) > 1 or word in ("&",))


def _initial_name(text: str, word: re.Match[str]) -> bool:
    """Whether a lone capitalised word opening a sentence is a name, not just capitalised.

    It is when it is possessive ("Bob's team"), a colon or comma follows it
    ("Caroline: ...", "Mel, ..."), a verb follows it ("Alice lives ...", "Bob and
    ..."), or the text capitalises it elsewhere.
    """
    if _POSSESSIVE_NAME.search(word.group()):
        return True  # "Bob's team ..."
    after = text[word.end() : word.end() + 40]
    if _VERB_AFTER.match(after):
        return True
    if _COLON_OR_COMMA.match(after):  # "Caroline: ...", "Mel, ..." but not "Honestly, ..."
        return not word.group().lower().endswith(("ly", "ing"))
    value = word.group()
    at = text.find(value)
    while at != -1:
        if at != word.start() and at > 0 and not text[at - 1].isalnum():
            end = at + len(value)
            if (end == len(text) or not text[end].isalnum()) and not _INITIAL_BREAK.search(
                text, max(0, at - 8), at
            ):
                return True
        at = text.find(value, at + 1)
    return False


def _droppable(word: str, *, initial: bool) -> bool:
    lower = word.lower().replace("’", "'")
    if lower in ENGLISH_STOPWORDS or (lower in _NOT_NAMES and lower == "i"):
        return True
    if not initial:
        return False
    return lower in _COMMON_STARTERS


def _latin_type(words: Sequence[str], before: str) -> str:
    last = _POSSESSIVE.sub("", words[-1])
    if last.lower() in _ORG_SUFFIXES or (len(last) >= 2 and last.isupper()):
        return "organization"
    if last.lower() in _PLACE_SUFFIXES or _PLACE_CUES.search(before[-24:]):
        return "place"
    return "name"
