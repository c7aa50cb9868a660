"""English names, sentences and pronouns are found as their plain definitions find them.

The English name scan splits each capitalised run at its spaces instead of running
a word regex over it, tells a sentence opening from the characters before a word
without a regex, and strips possessives by their last characters; sentence
boundaries are tried only where one can start, an abbreviation is searched for only
before an r, s or t; pronouns are looked for first, then whether they open a
clause. Each is checked here against the plain definition it stands for (the scan
as first written, word by word with regexes), on texts built to hit the edges:
connectors, "&", possessives, single letters, Latin-1 capitals, other whitespace,
abbreviations, full-width punctuation.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.config import AtomConfig
from spade_memory.text import mentions, names
from spade_memory.text.atoms import build_atoms, ttl_seconds
from spade_memory.text.extraction import get_extractor
from spade_memory.text.graph import Entity
from spade_memory.text.tokenizer import ENGLISH_STOPWORDS

# -- the plain definitions -------------------------------------------------------

LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f][A-Za-z0-9\u00c0-\u024f'’\-]*")
INITIAL_BREAK = re.compile(r"[.!?:;\n\"“(\[]\s*$")
POSSESSIVE = re.compile(r"(?:'s|’s|'|’)$")
PRONOUNS = re.compile(
    r"(?:(?<=^)|(?<=[.!?]\s)|(?<=[，,。！？；]))\s*((?:he|she|they)\b|他|她)", re.IGNORECASE
)


def plain_capitalised(word: str) -> bool:
    return word[0].isupper() and (len(word) > 1 or word in ("&",))


def plain_droppable(word: str, *, initial: bool) -> bool:
    lower = word.lower().replace("’", "'")
    if lower in ENGLISH_STOPWORDS or (lower in names._NOT_NAMES and lower == "i"):
        return True
    return initial and lower in names._COMMON_STARTERS


def plain_initial_name(text: str, word: re.Match[str]) -> bool:
    if names._POSSESSIVE_NAME.search(word.group()):
        return True
    after = text[word.end() : word.end() + 40]
    if names._VERB_AFTER.match(after):
        return True
    if names._COLON_OR_COMMA.match(after):
        return not word.group().lower().endswith(("ly", "ing"))
    value = word.group()
    at = text.find(value)
    while at != -1:
        if at != word.start() and at > 0 and not text[at - 1].isalnum():
            end = at + len(value)
            if (end == len(text) or not text[end].isalnum()) and not INITIAL_BREAK.search(
                text, max(0, at - 8), at
            ):
                return True
        at = text.find(value, at + 1)
    return False


def plain_latin_type(words: Sequence[str], before: str) -> str:
    last = POSSESSIVE.sub("", words[-1])
    if last.lower() in names._ORG_SUFFIXES or (len(last) >= 2 and last.isupper()):
        return "organization"
    if last.lower() in names._PLACE_SUFFIXES or names._PLACE_CUES.search(before[-24:]):
        return "place"
    return "name"


def plain_names(text: str) -> Iterator[tuple[int, int, Entity]]:
    """The English name scan word by word, with a regex for each question."""
    words = [
        word
        for run in names._CAPITALISED_RUN.finditer(text)
        for word in LATIN_WORD.finditer(text, run.start(), run.end())
    ]
    index = 0
    while index < len(words):
        first = words[index]
        if not plain_capitalised(first.group()):
            index += 1
            continue
        span = [first]
        cursor = index + 1
        while cursor < len(words):
            gap = text[span[-1].end() : words[cursor].start()]
            word = words[cursor].group()
            if gap != " " or POSSESSIVE.search(span[-1].group()):
                break
            if plain_capitalised(word) or (
                word.lower() in names._CONNECTORS
                and cursor + 1 < len(words)
                and plain_capitalised(words[cursor + 1].group())
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
        initial = opening == 0 or bool(INITIAL_BREAK.search(text, max(0, opening - 8), opening))
        while span and plain_droppable(span[0].group(), initial=initial):
            span.pop(0)
            initial = False
        while span and span[-1].group().lower() in names._CONNECTORS:
            span.pop()
        if not span:
            continue
        if initial and len(span) == 1 and not plain_initial_name(text, span[0]):
            continue
        value = POSSESSIVE.sub("", text[span[0].start() : span[-1].end()])
        lower = [w.group().lower() for w in span]
        if all(w in names._NOT_NAMES or w in names._COMMON_STARTERS for w in lower):
            continue
        kind = plain_latin_type([w.group() for w in span], text[: span[0].start()])
        entity = names.make_entity(value, kind)
        if entity is not None:
            yield span[0].start(), span[0].start() + len(value), entity


# -- generated texts -------------------------------------------------------------

_WORDS_TEXT = """
    Alice Bob Bank of America Van van der Berg de la Cruz AT & T & Mr Mrs Dr St vs I A
    Yesterday Thanks Hey Honestly Caroline Mel Bob's James' Bob’s O'Brien Jean-Luc X-1
    ÉMILE Émile Øre Zoë ÀB NASA IBM's Acme Inc Corp University Lake Street City Paris
    lives went met said and is in from at visited the The It's I'm Monday May June
    he she they He SHE They ſhe 他 她 x é 3 10am
"""
_WORDS = tuple(_WORDS_TEXT.split())
_SEPARATORS = (
    " ",
    " ",
    " ",
    "",
    "  ",
    ". ",
    ".",
    ", ",
    ",",
    ": ",
    "! ",
    "? ",
    "; ",
    "\n",
    "\t",
    "\x1c",
    "\u00a0",
    "\u3000",
    " (",
    '"',
    "“",
    "[",
    "’s ",
    "'s ",
    "-",
    "，",
    "。",
    "！",
    "；",
    ".\n",
)


# ... and a few of them often: runs joined by "&", single capitals, abbreviations.
_EDGE_WORDS_TEXT = "AT & & T X É I A Bob's of van Bank Alice St Mr Dr vs he They"
_EDGE_WORDS = tuple(_EDGE_WORDS_TEXT.split())
_EDGE_SEPARATORS = (" ", " ", " ", "  ", ". ", ".", "...", "?! ", "!!", ".\n", "\n", ", ", "。")


def _joined(words: Sequence[str], separators: Sequence[str]) -> st.SearchStrategy[str]:
    pieces = st.tuples(st.sampled_from(words), st.sampled_from(separators))
    return st.lists(pieces, max_size=14).map(lambda ps: "".join(w + s for w, s in ps))


def texts() -> st.SearchStrategy[str]:
    return _joined(_WORDS, _SEPARATORS) | _joined(_EDGE_WORDS, _EDGE_SEPARATORS)


# -- the shortcuts against them --------------------------------------------------


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(texts())
def test_english_names_are_the_plain_scans(text: str) -> None:
    assert list(names.english_names(text)) == list(plain_names(text))


@settings(max_examples=300, deadline=None)
@given(texts())
def test_a_sentence_opening_is_the_initial_break_regex(text: str) -> None:
    for at in range(len(text) + 1):
        plain = at == 0 or INITIAL_BREAK.search(text, max(0, at - 8), at) is not None
        assert names._opens_sentence(text, at) == plain, (text, at)


@settings(max_examples=300, deadline=None)
@given(texts())
def test_pronouns_are_the_pronoun_regex(text: str) -> None:
    found = list(mentions._clause_pronouns(text, text.lower()))
    assert found == [match.span(1) for match in PRONOUNS.finditer(text)]


@settings(max_examples=300, deadline=None)
@given(texts())
def test_sentence_boundaries_are_those_of_the_full_regex(text: str) -> None:
    # the split itself is checked against its plain definition in test_text_shortcuts.py
    assert [m.span() for m in mentions._boundaries(text)] == [
        m.span() for m in mentions._BOUNDARY.finditer(text)
    ]


@pytest.mark.parametrize(
    "text",
    [
        "he left",
        "  She left",
        "Bob.he left",
        "Bob. he left",
        "Bob!\n\tthey left",
        "Bob,they left",
        "Bob, the hero",
        "Bob;he left",
        "Bob， 他走了",
        "Bob。她走了",
        "Bob. ſhe left",
        "Bob.\x1che left",
        "Bob?\u3000They left, she said",
    ],
)
def test_pronouns_by_example_are_the_pronoun_regex(text: str) -> None:
    found = list(mentions._clause_pronouns(text, text.lower()))
    assert found == [match.span(1) for match in PRONOUNS.finditer(text)]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab's’'\u00e9 .", max_size=8))
def test_possessives_are_stripped_as_the_regex_strips_them(text: str) -> None:
    assert names.strip_possessive(text) == POSSESSIVE.sub("", text)
    assert text.endswith(names._POSSESSIVE_ENDINGS) == (POSSESSIVE.search(text) is not None)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aB's’'\u00e9 .\n\t\u3000ſﬁ", max_size=10))
def test_keys_strip_possessives_as_the_regex_does(text: str) -> None:
    folded = unicodedata.normalize("NFKC", text).casefold().strip()
    plain = POSSESSIVE.sub("", folded)
    punctuation = re.compile(r"[^\w@.+#]+|(?<!\w)[.]|[.](?!\w)")
    assert names.canonical_key(text) == " ".join(punctuation.sub(" ", plain).split())[:200]
    assert names.strip_possessive(folded) == plain


@pytest.mark.parametrize(
    "word",
    ["I", "i", "The", "Thanks", "It’s", "It's", "Alice", "Honestly", "Monday", "Dr", "Its"],
)
@pytest.mark.parametrize("initial", [True, False])
def test_dropped_words_are_the_plain_definition(word: str, initial: bool) -> None:
    assert names._droppable(word, initial=initial) == plain_droppable(word, initial=initial)


def test_dropped_words_cover_every_stopword_and_starter() -> None:
    for word in ENGLISH_STOPWORDS | names._COMMON_STARTERS | names._NOT_NAMES:
        for initial in (True, False):
            assert names._droppable(word, initial=initial) == plain_droppable(
                word, initial=initial
            ), word


@settings(max_examples=200, deadline=None)
@given(texts())
def test_cached_entities_are_made_entities(text: str) -> None:
    for kind in ("name", "place"):
        assert names.cached_entity(text, kind) == names.make_entity(text, kind)


@settings(max_examples=100, deadline=None)
@given(texts(), st.floats(min_value=0.0, max_value=1.0))
def test_atom_lifetimes_are_those_of_their_types(text: str, importance: float) -> None:
    config = AtomConfig()
    extraction = get_extractor().extract(text)
    for atom in build_atoms(
        text, extraction, category="fact", importance=importance, config=config
    ):
        assert atom.ttl_seconds == ttl_seconds(atom.type, importance, config)


@pytest.mark.parametrize(
    "text",
    [
        "AT & Bank",
        "We met AT & Bank staff and X & Y.",
        "Bank & Alice's & Bob Dylan",
        "Bank of & Alice",
        "Thanks & Alice met Bank van & Berg",
        "Ask Bank of America & Co about it",
    ],
)
def test_ampersands_join_no_words_as_in_the_plain_scan(text: str) -> None:
    assert list(names.english_names(text)) == list(plain_names(text))


@pytest.mark.parametrize("before", [" " * n for n in range(1, 12)])
@pytest.mark.parametrize("after", [" " * n for n in range(1, 12)])
def test_place_cues_as_far_back_as_the_plain_scan_looks(before: str, after: str) -> None:
    text = f"We visited{before}the{after}Paris and Lake Como"
    assert list(names.english_names(text)) == list(plain_names(text))


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Caroline: Hey Mel! Good to see you!", [("caroline", "name"), ("mel", "name")]),
        ("I met Bank of America people and AT & T staff.", [("bank of america", "name")]),
        (
            "We visited the Lake Geneva. Bob's car is red.",
            [("lake geneva", "place"), ("bob", "name")],
        ),
        ("Thanks! Honestly, Alice lives in Paris.", [("alice", "name"), ("paris", "place")]),
        (
            "Zoë and Émile met Acme Inc",
            [("zoë", "name"), ("émile", "name"), ("acme inc", "organization")],
        ),
    ],
)
def test_english_names_by_example(text: str, found: list[tuple[str, str]]) -> None:
    assert [(e.key, e.type) for _, _, e in names.english_names(text)] == found
