"""Names: entity keys, and the names an English (Latin-script) text mentions.

- :func:`canonical_key` folds width (NFKC) and case, drops a trailing possessive
  and punctuation: ``"Alice"``, ``"ALICE"``, ``"Ａｌｉｃｅ"`` and ``"Alice's"`` share
  the key ``"alice"``, so one entity is one graph node. :func:`make_entity` names
  an entity from a mention's text, or refuses one with no usable key.
- :func:`english_names`: capitalised spans ("Bank of America"), without words
  capitalised only because they open a sentence ("Yesterday", "Thanks"): a lone
  opening word counts when a verb, a colon or a comma follows it, when it is
  possessive, or when the text capitalises it elsewhere. The text is scanned once
  for capitalised runs; only their words are looked at.

A chat names the same people over and over, so the entities made for recent
names are kept (:func:`cached_entity`; entities are immutable).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence
from functools import lru_cache

from .graph import Entity
from .tokenizer import ENGLISH_STOPWORDS, STOPWORDS

__all__ = [
    "cached_entity",
    "canonical_key",
    "english_names",
    "make_entity",
    "strip_possessive",
]

_PUNCT = re.compile(r"[^\w@.+#]+|(?<!\w)[.]|[.](?!\w)")
# ... on ASCII text: a dot not between word characters, then any byte but those kept.
_LONE_DOT = re.compile(r"\.(?:(?<!\w\.)|(?!\w))")
_ASCII_SEPARATORS = bytes(
    b if (chr(b).isascii() and chr(b).isalnum()) or chr(b) in "_@.+#" else 32 for b in range(256)
)
_CAPITALISED_RUN = re.compile(
    r"(?<![A-Za-z0-9\u00c0-\u024f'’\-])[A-Z\u00c0-\u00d6\u00d8-\u00de][A-Za-z0-9\u00c0-\u024f'’\-]*"
    r"(?: (?:(?:of|de|del|da|van|von|der|den|la|le|&) )?"
    r"[A-Z\u00c0-\u00d6\u00d8-\u00de][A-Za-z0-9\u00c0-\u024f'’\-]*)*"
)
_CONNECTORS = frozenset({"of", "de", "del", "da", "van", "von", "der", "den", "la", "le", "&"})
# A break before a word makes it open a sentence (see _opens_sentence).
_BREAKS = frozenset('.!?:;\n"“([')
_POSSESSIVE_ENDINGS = ("'s", "’s", "'", "’")  # a possessive word ends with one
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
_NOT_NAME_WORDS = _NOT_NAMES | _COMMON_STARTERS  # a span of only these is no name
_DROPPED = ENGLISH_STOPWORDS | {"i"}  # dropped from the start of a span
_DROPPED_INITIAL = _DROPPED | _COMMON_STARTERS  # ... of a span opening a sentence
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
_IRREGULAR_PASTS_WORDS = """
    broke fell began became built caught chose drove ate drank flew forgot grew heard lost meant
    paid rode sang sat slept spent spoke stood swam taught threw won wore drew fought hid sold
    struck woke bit blew dug fed held hung shook shot stole stuck swore tore wept understood
"""
_IRREGULAR_PASTS = "|".join(sorted(_IRREGULAR_PASTS_WORDS.split()))
_VERB_AFTER = re.compile(
    r"(?:'s|’s)?\s+(?:is|was|has|had|will|would|can|could|should|may|might|must|did|does|"
    r"and|or|met|went|saw|got|made|took|gave|came|ran|wrote|sent|found|left|bought|"
    r"brought|knew|thought|felt|kept|told|said|" + _IRREGULAR_PASTS + r"|[a-z]+(?:s|ed))\b"
)
_POSSESSIVE_NAME = re.compile(r"\w(?:'s|’s)$")
_COLON_OR_COMMA = re.compile(r"\s*[:,]")
_PLACE_CUES = re.compile(r"\b(?:in|from|to|near|visited|visit|at)\s+(?:the\s+)?$", re.IGNORECASE)
_TWO_CHARACTER_POSSESSIVES = ("'s", "’s")
_ONE_CHARACTER_POSSESSIVES = ("'", "’")
_ENTITY_CACHE = 4096


def canonical_key(text: str) -> str:
    """The key of an entity: width folded (NFKC), case folded, punctuation dropped.

    ``"Alice"``, ``"ALICE"``, ``"Ａｌｉｃｅ"`` and ``"Alice's"`` share the key ``"alice"``.
    """
    folded = unicodedata.normalize("NFKC", text).casefold().strip()
    folded = strip_possessive(folded)  # stripped: no line break ends it
    if folded.isascii():
        # _PUNCT's work on ASCII text (most keys, every English atom's) without its
        # regex scan of every character: the dots it drops, then a byte table.
        if "." in folded:
            folded = _LONE_DOT.sub(" ", folded)
        words = folded.encode("ascii").translate(_ASCII_SEPARATORS).split()
        return b" ".join(words).decode("ascii")[:200]
    folded = _PUNCT.sub(" ", folded)
    return " ".join(folded.split())[:200]


def strip_possessive(text: str) -> str:
    """``text`` without a trailing possessive: ``'s``, ``’s``, or an apostrophe ("James'").

    What ``re.sub(r"(?:'s|’s|'|’)$", "", text)`` gives for a text that does not end
    with a line break: the regex removes its leftmost match, the two-character
    endings first.
    """
    if text.endswith(_TWO_CHARACTER_POSSESSIVES):
        return text[:-2]
    if text.endswith(_ONE_CHARACTER_POSSESSIVES):
        return text[:-1]
    return text


def make_entity(value: str, kind: str) -> Entity | None:
    """An entity named ``value`` of type ``kind``, or ``None`` if it has no usable key."""
    value = " ".join(value.split()).strip(" ,.;:!?\"'“”‘’")
    key = canonical_key(value)
    if not key or key in STOPWORDS or len(key) > 120:
        return None
    return Entity(key=key, type=kind, value=value[:200])


@lru_cache(maxsize=_ENTITY_CACHE)
def cached_entity(value: str, kind: str) -> Entity | None:
    """:func:`make_entity`, kept for the last few thousand names (entities are immutable)."""
    return make_entity(value, kind)


def english_names(text: str) -> Iterator[tuple[int, int, Entity]]:
    """The names of an English (Latin-script) text: ``(start, end, entity)``, in order.

    Only capitalised runs (one regex pass) are looked at. A run's words are
    separated by single spaces; "&" joins words without being one.
    """
    for run in _CAPITALISED_RUN.finditer(text):
        start, words = run.start(), run.group()
        if " " in words:
            yield from _run_names(text, start, words)
        elif len(words) > 1:  # one word, a span of its own if capitalised ("I" is not)
            name = _span_name(text, [(start, start + len(words), words)])
            if name is not None:
                yield name


def _capitalised(word: str) -> bool:
    return word[0].isupper() and (len(word) > 1 or word in ("&",))


def _run_words(start: int, run: str) -> list[tuple[int, int, str]]:
    """``(start, end, word)`` of the words of a capitalised run found at ``start``."""
    if " " not in run:
        return [(start, start + len(run), run)]
    words: list[tuple[int, int, str]] = []
    for word in run.split(" "):
        if word != "&":
            words.append((start, start + len(word), word))
        start += len(word) + 1
    return words


def _run_names(text: str, start: int, run: str) -> Iterator[tuple[int, int, Entity]]:
    """The names of one capitalised run of ``text``: its spans of capitalised words.

    A span is cut after a possessive and where words are not next to each other;
    a connector ("of", "de", "van") stays between two capitalised words.
    """
    words = _run_words(start, run)
    count = len(words)
    index = 0
    while index < count:
        if not _capitalised(words[index][2]):
            index += 1
            continue
        span = [words[index]]
        cursor = index + 1
        while cursor < count:
            last, (word_start, word_end, word) = span[-1], words[cursor]
            if word_start != last[1] + 1 or last[2].endswith(_POSSESSIVE_ENDINGS):
                break
            if _capitalised(word) or (
                word.lower() in _CONNECTORS
                and cursor + 1 < count
                and _capitalised(words[cursor + 1][2])
                and words[cursor + 1][0] == word_end + 1
            ):
                span.append(words[cursor])
            else:
                break
            cursor += 1
        index = cursor
        if len(span) <= 6:
            mention = _span_name(text, span)
            if mention is not None:
                yield mention


def _span_name(text: str, span: list[tuple[int, int, str]]) -> tuple[int, int, Entity] | None:
    """The name a span of capitalised words is, without sentence-initial common words."""
    initial = _opens_sentence(text, span[0][0])
    while span and _droppable(span[0][2], initial=initial):
        span.pop(0)
        initial = False
    while span and span[-1][2].lower() in _CONNECTORS:
        span.pop()
    if not span:
        return None
    first, last = span[0], span[-1]
    if initial and len(span) == 1 and not _initial_name(text, first[0], first[1]):
        return None
    if _NOT_NAME_WORDS.issuperset([word.lower() for _, _, word in span]):
        return None
    value = strip_possessive(text[first[0] : last[1]])
    kind = _latin_type([word for _, _, word in span], text[max(0, first[0] - 24) : first[0]])
    entity = cached_entity(value, kind)
    if entity is None:
        return None
    return first[0], first[0] + len(value), entity


def _opens_sentence(text: str, at: int) -> bool:
    """``at == 0 or re.search(r"[.!?:;\\n\"“(\\[]\\s*$", text[max(0, at - 8) : at])``.

    A break (. ! ? : ; a line break, a quote or bracket) is among the 8 characters
    before ``at`` with nothing but whitespace after it.
    """
    if at == 0:
        return True
    window = text[max(0, at - 8) : at]
    body = window.rstrip()
    return body[-1:] in _BREAKS or "\n" in window[len(body) :]


def _initial_name(text: str, start: int, end: int) -> bool:
    """Whether a lone capitalised word opening a sentence is a name, not just capitalised.

    It is when it is possessive ("Bob's team"), a colon or comma follows it
    ("Caroline: ...", "Mel, ..."), a verb follows it ("Alice lives ...", "Bob and
    ..."), or the text capitalises it elsewhere.
    """
    value = text[start:end]
    if _POSSESSIVE_NAME.search(value):
        return True  # "Bob's team ..."
    after = text[end : end + 40]
    if _VERB_AFTER.match(after):
        return True
    if _COLON_OR_COMMA.match(after):  # "Caroline: ...", "Mel, ..." but not "Honestly, ..."
        return not value.lower().endswith(("ly", "ing"))
    at = text.find(value)
    while at != -1:
        if at != start and at > 0 and not text[at - 1].isalnum():
            end = at + len(value)
            if (end == len(text) or not text[end].isalnum()) and not _opens_sentence(text, at):
                return True
        at = text.find(value, at + 1)
    return False


def _droppable(word: str, *, initial: bool) -> bool:
    """A stopword or "I" (anywhere), or a common word opening a sentence."""
    return word.lower().replace("’", "'") in (_DROPPED_INITIAL if initial else _DROPPED)


def _latin_type(words: Sequence[str], before: str) -> str:
    last = strip_possessive(words[-1])
    if last.lower() in _ORG_SUFFIXES or (len(last) >= 2 and last.isupper()):
        return "organization"
    if last.lower() in _PLACE_SUFFIXES or _PLACE_CUES.search(before[-24:]):
        return "place"
    return "name"
