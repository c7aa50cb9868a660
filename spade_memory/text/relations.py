"""Typed relations between the entities of a sentence, from simple patterns.

Each sentence is masked (every entity mention replaced by a placeholder) and
matched against English and Chinese patterns: "works at", "lives in", "likes",
"is a friend of", "works with", "married to", ... and 在…工作, 住在, 喜欢, 是…的朋友,
和…一起工作, 嫁给 .... The subject is an entity; the object is an entity, or the
noun phrase the pattern points at ("Alice likes hiking" gives the node "hiking").

``FUNCTIONAL`` relations hold one object per subject at a time (one lives in one
place), so a newer claim supersedes an older one.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .graph import Entity
from .mentions import Mention
from .scripts import HAN as _CJK_TEXT
from .tokenizer import ENGLISH_STOPWORDS

__all__ = ["FUNCTIONAL", "SYMMETRIC", "Found", "find_relations"]

FUNCTIONAL: frozenset[str] = frozenset(
    {"works_at", "lives_in", "from", "born_in", "married_to", "reports_to", "studies_at"}
)
"""Relations with one object per subject: a newer claim replaces an older one."""

SYMMETRIC: frozenset[str] = frozenset(
    {"friend_of", "works_with", "married_to", "sibling_of", "knows", "related_to"}
)
"""Relations that hold both ways."""


_S = r"\ue000(?P<s>\d+)\ue001"
_O_MID = r"(?:\ue000(?P<o>\d+)\ue001|(?P<np>[^\ue000\ue001，。；！？、,.;!?\s]{1,12}?))"
_O_END = r"(?:\ue000(?P<o>\d+)\ue001|(?P<np>[^\ue000\ue001，。；！？、,.;!?]{1,40}))"
_PLACE = r"(?:\ue000\d+\ue001的)?"  # 在北京的阿里巴巴工作: the place before the object
_DET = r"(?:the\s+|a\s+|an\s+|my\s+|his\s+|her\s+|their\s+|our\s+)?"

_EN: tuple[tuple[str, str], ...] = (
    (
        "works_at",
        r"\s+(?:now\s+|currently\s+|still\s+)?(?:works?|worked|is\s+working|has\s+worked|"
        r"was\s+working|is\s+employed|was\s+employed)\s+(?:at|for|by)\s+",
    ),
    (
        "lives_in",
        r"\s+(?:now\s+|currently\s+|still\s+)?(?:lives?|lived|is\s+living|has\s+lived|"
        r"resides?|resided)\s+in\s+",
    ),
    ("lives_in", r"\s+(?:has\s+|just\s+|recently\s+)?(?:moved|relocated)\s+to\s+"),
    ("from", r"\s+(?:is|was|comes?|came)\s+(?:originally\s+)?from\s+"),
    ("born_in", r"\s+was\s+born\s+in\s+"),
    (
        "likes",
        r"\s+(?:really\s+|also\s+|just\s+)?(?:likes?|liked|loves?|loved|enjoys?|enjoyed|"
        r"adores?|prefers?|is\s+fond\s+of|is\s+into)\s+",
    ),
    ("dislikes", r"\s+(?:hates?|hated|dislikes?|disliked|can't\s+stand)\s+"),
    (
        "friend_of",
        r"\s+(?:is|was|has\s+been|are|were)\s+(?:a\s+|an\s+)?(?:good\s+|close\s+|best\s+|"
        r"old\s+|childhood\s+)?friends?\s+(?:of|with)\s+",
    ),
    (
        "works_with",
        r"\s+(?:works?|worked|is\s+working|collaborates?|collaborated)\s+(?:closely\s+)?"
        r"(?:with|alongside)\s+",
    ),
    ("works_with", r"\s+(?:is|was)\s+(?:a\s+)?(?:colleague|coworker|co-worker|teammate)\s+of\s+"),
    ("married_to", r"\s+(?:is|was|got)\s+married\s+to\s+"),
    ("married_to", r"\s+(?:married|wed)\s+"),
    ("married_to", r"\s+(?:is|was)\s+(?:the\s+)?(?:wife|husband|spouse)\s+of\s+"),
    ("manages", r"\s+(?:manages|managed|leads|led|supervises|supervised|heads|headed)\s+"),
    (
        "manages",
        r"\s+(?:is|was)\s+(?:the\s+)?(?:manager|boss|head|leader|supervisor)\s+of\s+",
    ),
    ("reports_to", r"\s+reports?\s+to\s+"),
    ("studies_at", r"\s+(?:studies|studied|is\s+studying)\s+at\s+"),
    ("member_of", r"\s+(?:is|was)\s+(?:a\s+)?(?:member|part)\s+of\s+"),
    ("member_of", r"\s+(?:has\s+)?joined\s+"),
    ("member_of", r"\s+(?:is|was)\s+(?:on|in)\s+(?=(?:the\s+)?[^\ue000,.;:!?]{0,30}\bteam\b)"),
    ("knows", r"\s+(?:knows|knew|has\s+met|met)\s+"),
    ("sibling_of", r"\s+(?:is|was)\s+(?:the\s+|a\s+)?(?:brother|sister|sibling)\s+of\s+"),
    ("parent_of", r"\s+(?:is|was)\s+(?:the\s+|a\s+)?(?:mother|father|parent|mom|dad)\s+of\s+"),
    ("child_of", r"\s+(?:is|was)\s+(?:the\s+|a\s+)?(?:son|daughter|child)\s+of\s+"),
)
_ZH: tuple[tuple[str, str], ...] = (
    ("works_at", r"\s*(?:现在|目前|一直)?在{P}{O}(?:工作|上班|任职|就职|实习)"),
    ("studies_at", r"\s*(?:现在|目前)?在{P}{O}(?:读书|上学|学习|念书|读研|读博|留学)"),
    ("lives_in", r"\s*(?:现在|目前|一直)?(?:住在|居住在|生活在|定居在|定居于){E}"),
    ("lives_in", r"\s*(?:搬到了?|搬去了?|移居到?){E}"),
    ("from", r"\s*来自{E}"),
    ("born_in", r"\s*出生(?:在|于){E}"),
    ("likes", r"\s*(?:很|非常|特别|也)?(?:喜欢|热爱|喜爱|爱好){E}"),
    ("dislikes", r"\s*(?:很|非常|特别)?(?:讨厌|不喜欢|厌恶){E}"),
    ("friend_of", r"\s*是{O}的(?:好|老|最好的)?(?:朋友|好友|闺蜜)"),
    ("works_with", r"\s*是{O}的(?:同事|搭档|队友)"),
    ("married_to", r"\s*是{O}的(?:妻子|丈夫|老婆|老公|太太|先生|爱人)"),
    ("manages", r"\s*是{O}的(?:经理|老板|上司|领导|主管)"),
    ("sibling_of", r"\s*是{O}的(?:哥哥|姐姐|弟弟|妹妹|兄弟|姐妹)"),
    ("parent_of", r"\s*是{O}的(?:父亲|母亲|爸爸|妈妈)"),
    ("child_of", r"\s*是{O}的(?:儿子|女儿|孩子)"),
    ("member_of", r"\s*是{O}的(?:成员|一员)"),
    ("friend_of", r"\s*(?:和|与|跟|同){O}(?:是|成了|成为)(?:好|老)?(?:朋友|好友)"),
    (
        "works_with",
        r"\s*(?:和|与|跟|同){O}(?:在[^，。；！？]{0,12}?)?(?:是同事|一起工作|一起上班|共事|"
        r"合作|在同一个?(?:团队|部门|公司|小组))",
    ),
    ("married_to", r"\s*(?:和|与|跟|同){O}(?:结婚|是夫妻|成婚)"),
    ("sibling_of", r"\s*(?:和|与|跟|同){O}是(?:兄弟|姐妹|兄妹|姐弟)"),
    ("married_to", r"\s*(?:嫁给了?|娶了?){E}"),
    ("manages", r"\s*(?:管理|领导|负责){E}"),
    ("member_of", r"\s*加入了?{E}"),
    ("knows", r"\s*(?:认识|见过|遇到了?){E}"),
    ("located_in", r"\s*的?(?:总部)?(?:位于|设在){E}"),
)
_Patterns = tuple[tuple[str, re.Pattern[str]], ...]


@functools.cache
def _patterns() -> tuple[_Patterns, _Patterns, re.Pattern[str], re.Pattern[str]]:
    """The English and Chinese patterns, and for each language one pattern of them
    all that tells whether any matches a sentence at all, in one scan (most
    sentences hold none); only then is each pattern run for its matches.

    Compiled on the first sentence, not on import: a program that opens a memory
    only to read it (``spade-memory show``) does not pay for them.
    """
    english = tuple(
        (name, re.compile(_S + body + _DET + _O_END, re.IGNORECASE)) for name, body in _EN
    )
    chinese = tuple(
        (
            name,
            re.compile(
                _S + body.replace("{P}", _PLACE).replace("{O}", _O_MID).replace("{E}", _O_END)
            ),
        )
        for name, body in _ZH
    )
    english_any = re.compile("|".join(_unnamed(p.pattern) for _, p in english), re.IGNORECASE)
    chinese_any = re.compile("|".join(_unnamed(p.pattern) for _, p in chinese))
    return english, chinese, english_any, chinese_any


def _unnamed(pattern: str) -> str:
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


_LATIN_TEXT = re.compile(r"[A-Za-z]{2}")
_ROLES = {
    "friend": "friend_of",
    "colleague": "works_with",
    "coworker": "works_with",
    "teammate": "works_with",
    "wife": "married_to",
    "husband": "married_to",
    "partner": "married_to",
    "manager": "manages",
    "boss": "manages",
    "brother": "sibling_of",
    "sister": "sibling_of",
    "mother": "parent_of",
    "father": "parent_of",
    "mom": "parent_of",
    "dad": "parent_of",
    "son": "child_of",
    "daughter": "child_of",
}
_ROLE = r"(?:good\s+|best\s+|close\s+|old\s+)?(?P<role>" + "|".join(_ROLES) + r")"
_POSSESSIVE_ROLE = re.compile(
    _S + r"\s+(?:is|was)\s+\ue000(?P<o>\d+)\ue001(?:'s|’s)\s+" + _ROLE, re.IGNORECASE
)
_GROUP_HEAD = r"\ue000(?P<s>\d+)\ue001(?P<more>(?:\s*,\s*\ue000\d+\ue001)*)\s*,?\s+(?:and|&)\s+"
_GROUP_HEAD += r"\ue000(?P<o>\d+)\ue001\s+"
_GROUP_STATE = re.compile(
    _GROUP_HEAD + r"(?:are|were|have\s+been)\s+(?:both\s+|all\s+)?(?:good\s+|close\s+|best\s+|"
    r"old\s+)?(?P<what>friends|colleagues|coworkers|co-workers|teammates|married|siblings|"
    r"brothers|sisters|partners)\b",
    re.IGNORECASE,
)
_GROUP_WORK = re.compile(_GROUP_HEAD + r"(?:work|worked|are\s+working)\s+together", re.IGNORECASE)
_GROUP_TEAM = re.compile(
    _GROUP_HEAD + r"(?:are|were)\s+(?:both\s+|all\s+)?(?:on|in)\s+(?:the\s+)?(?:same\s+)?"
    r"(?P<np>[^\ue000,.;:!?]{0,30}?\bteam)\b",
    re.IGNORECASE,
)
_GROUP_WHAT = {
    "friends": "friend_of",
    "married": "married_to",
    "siblings": "sibling_of",
    "brothers": "sibling_of",
    "sisters": "sibling_of",
    "partners": "married_to",
}
_INDEX = re.compile(r"\ue000(\d+)\ue001")
_NP_DETERMINER_WORDS = "the a an my his her their our its some this that these those your"
_NP_DETERMINERS = frozenset(_NP_DETERMINER_WORDS.split())
_NP_STOP = ENGLISH_STOPWORDS | {"and", "but", "because", "when", "while", "since", "so"}
_ZH_NP_STOP = re.compile(r"[的了和与跟并而也都，。；！？、]")
_SUBJECT_TYPES = frozenset({"person", "name", "organization", "place", "mention", "jid", "term"})


def _noun_phrase(text: str) -> str | None:
    text = text.strip()
    if not text:
        return None
    if _CJK_TEXT.search(text[:1]):
        phrase = _ZH_NP_STOP.split(text, maxsplit=1)[0].strip()
        return phrase[:8] if len(phrase) >= 2 else None
    words = re.findall(r"[\w'’\-]+", text)
    while words and words[0].lower() in _NP_DETERMINERS:
        words.pop(0)
    kept: list[str] = []
    for word in words:
        if word.lower() in _NP_STOP or len(kept) >= 4:
            break
        kept.append(word)
    return " ".join(kept) if kept else None


def _mask(sentence: str, offset: int, mentions: Sequence[tuple[int, Mention]]) -> str:
    parts: list[str] = []
    cursor = 0
    for index, mention in mentions:
        start, end = mention.start - offset, mention.end - offset
        parts.append(sentence[cursor:start])
        parts.append(f"\ue000{index}\ue001")
        cursor = end
    parts.append(sentence[cursor:])
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class Found:
    """A typed relation from ``source`` to an entity or to a noun phrase."""

    source: Entity
    relation: str
    target: Entity | str
    sentence: int


def find_relations(
    sentences: Sequence[tuple[int, str]], mentions: Sequence[Mention]
) -> list[Found]:
    """Typed relations found by patterns, sentence by sentence.

    Args:
        sentences: ``(offset, sentence)`` pairs of the text.
        mentions: the entity mentions of the text, in order, not overlapping.

    Returns:
        The relations; a target that is a string is a noun phrase the pattern
        pointed at ("hiking" in "Alice likes hiking"), not a mention.
    """
    found: list[Found] = []
    for number, (offset, sentence) in enumerate(sentences):
        inside = [
            (i, m)
            for i, m in enumerate(mentions)
            if m.start >= offset and m.end <= offset + len(sentence)
        ]
        if not inside:
            continue
        masked = _mask(sentence, offset, inside)
        for source, name, target in _matches(masked, mentions):
            found.append(Found(source, name, target, number))
    return found


def _matches(
    masked: str, mentions: Sequence[Mention]
) -> Iterable[tuple[Entity, str, Entity | str]]:
    def entity(index: str | None) -> Entity | None:
        if index is None or not index.isdigit() or int(index) >= len(mentions):
            return None
        return mentions[int(index)].entity

    english, chinese, english_any, chinese_any = _patterns()
    patterns: list[tuple[str, re.Pattern[str]]] = []
    if _LATIN_TEXT.search(masked) and english_any.search(masked):
        patterns.extend(english)
    if _CJK_TEXT.search(masked) and chinese_any.search(masked):
        patterns.extend(chinese)
    for name, pattern in patterns:
        for match in pattern.finditer(masked):
            subject = entity(match.group("s"))
            if subject is None or subject.type not in _SUBJECT_TYPES:
                continue
            target = entity(match.group("o"))
            if target is not None:
                yield subject, name, target
                continue
            phrase = _noun_phrase(match.group("np") or "")
            if phrase:
                yield subject, name, phrase
    if masked.count("\ue000") < 2:
        return
    for match in _POSSESSIVE_ROLE.finditer(masked):
        subject, target = entity(match.group("s")), entity(match.group("o"))
        if subject is not None and target is not None:
            yield subject, _ROLES[match.group("role").lower()], target
    for pattern in (_GROUP_STATE, _GROUP_WORK, _GROUP_TEAM):
        for match in pattern.finditer(masked):
            indexes = [match.group("s"), *_INDEX.findall(match.group("more")), match.group("o")]
            group = [e for e in (entity(i) for i in indexes) if e is not None]
            what = match.groupdict().get("what")
            name = _GROUP_WHAT.get((what or "").lower(), "works_with")
            for position, first in enumerate(group):
                for second in group[position + 1 :]:
                    yield first, name, second
            team = match.groupdict().get("np")
            phrase = _noun_phrase(team) if team else None
            if phrase and phrase.lower() != "team":
                for member in group:
                    yield member, "member_of", phrase
