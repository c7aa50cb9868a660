"""Keys, sentences, weekdays and atom lifetimes are those of their plain definitions.

``canonical_key`` does the punctuation pass of ASCII text (every English entity
and atom key) with a byte table instead of a regex scan of every character;
sentences look for an abbreviation before a dot in the last characters only;
weekdays are searched in an ASCII text only when its lower case holds one;
dates and times in an ASCII text are searched for in its lower case, without
``IGNORECASE``;
``ttl_seconds`` reads the lifetime of a type by field name. Each is checked
against the plain definitions here, on texts built to hit the edges (dots inside
and around words, the kept ``@ + # _``, control characters, non-ASCII letters,
possessives).
"""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spade_memory.config import AtomConfig
from spade_memory.text.atoms import ATOM_TYPES, ttl_seconds
from spade_memory.text.dates import _AS_TYPED, _WEEKDAY, _find, _may_name_weekday, find_dates
from spade_memory.text.mentions import (
    _ABBREVIATION,
    _BOUNDARY,
    canonical_key,
    split_sentences,
)

_POSSESSIVE = re.compile(r"(?:'s|’s|'|’)$")
_PUNCT = re.compile(r"[^\w@.+#]+|(?<!\w)[.]|[.](?!\w)")


def plain_key(text: str) -> str:
    """The canonical key by its definition: NFKC, casefold, possessive, punctuation."""
    folded = unicodedata.normalize("NFKC", text).casefold().strip()
    folded = _POSSESSIVE.sub("", folded)
    folded = _PUNCT.sub(" ", folded)
    return " ".join(folded.split())[:200]


_PIECES = (
    "Alice",
    "bob",
    "O'Brien",
    "Bob's",
    "Bob’s",
    "e.g.",
    "v1.2",
    ".net",
    "a..b",
    "...",
    "C++",
    "C#",
    "@bob",
    "user_name",
    "x@y.org",
    "Mr.",
    "3.14",
    "!",
    "?",
    ",",
    "-",
    "(",
    ")",
    "'",
    '"',
    "\t",
    "\n",
    "\x0b",
    "\x1c",
    "\x00",
    "\x7f",
    "é",
    "ＡＬＩＣＥ",
    "İ",
    "ß",
    "\u00a0",
    "中文",
    "’",
    "1",
    "_",
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), max_size=12), st.lists(st.sampled_from(" .,"), max_size=12)
)
def test_canonical_keys_are_those_of_the_definition(pieces: list[str], joins: list[str]) -> None:
    text = "".join(piece + (joins[i] if i < len(joins) else "") for i, piece in enumerate(pieces))
    assert canonical_key(text) == plain_key(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=60))
def test_canonical_keys_of_any_ascii_text(text: str) -> None:
    assert canonical_key(text) == plain_key(text)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("Alice's", "alice"),
        ("e.g. the U.S.", "e.g the u.s"),
        ("C++ & C#", "c++ c#"),
        ("  Dr. Who ", "dr who"),
        ("a.b.c. D. E", "a.b.c d e"),
    ],
)
def test_canonical_keys_of_examples(text: str, key: str) -> None:
    assert canonical_key(text) == key == plain_key(text)


def plain_sentences(text: str) -> list[tuple[int, str]]:
    """Sentences as split with the abbreviation searched in the whole sentence so far."""
    found: list[tuple[int, str]] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        if match.group()[0] in ".!?" and _ABBREVIATION.search(text, max(0, start), match.start()):
            continue
        end = match.start() if match.group() == "\n" else match.end()
        if text[start:end].strip():
            found.append((start, text[start:end]))
        start = match.end()
    if text[start:].strip():
        found.append((start, text[start:]))
    return found


_SENTENCE_PIECES = ("Mr", "Mrs", "Ms", "Dr", "St", "vs", "xMr", "MMrs", "a", "Bob", "_vs", "é")


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_SENTENCE_PIECES),
            st.sampled_from([".", ". ", ".\n", "\n.", "! ", "?", "。", ";", " ", "\n", "..."]),
        ),
        max_size=10,
    )
)
def test_sentences_are_those_of_the_full_search(pieces: list[tuple[str, str]]) -> None:
    text = "".join(word + after for word, after in pieces)
    assert split_sentences(text) == plain_sentences(text)


_WEEKDAY_PIECES = ("Monday", "FRIDAY", "fri", "day", "to", "ſunday", "Sun", "s", " ", "é", "\u0130")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_WEEKDAY_PIECES), max_size=8))
def test_a_text_naming_a_weekday_is_always_searched(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert _WEEKDAY.search(text) is None or _may_name_weekday(text, text.lower())


_DATE_PIECES = (
    "May",
    "MAY",
    "may",
    "Sept",
    "sept.",
    "DECEMBER",
    "Jan",
    "june",
    "3",
    "03",
    "12",
    "31",
    "1st",
    "2ND",
    "23rd",
    "4th",
    "2024",
    "1999",
    "of",
    ",",
    ", ",
    " ",
    "  ",
    "-",
    "/",
    ":",
    "30",
    "5",
    "PM",
    "p.m.",
    "am",
    "A.M.",
    "pmx",
    "Monday",
    "FRIDAYS",
    "sunday",
    "day",
    "at",
    "x",
    "\n",
    ".",
    "1/2/2024",
    "2024-05-01",
    "12:45",
    "9am",
)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_DATE_PIECES), max_size=12))
@example(["at 5 PM on ", "MAY 3rd, 2024", "; FRIDAYS ", "12:45"])
def test_an_ascii_text_gives_the_dates_of_the_search_ignoring_case(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert find_dates(text) == _find(text, text.lower(), text, _AS_TYPED)


def test_weekdays_are_found_however_spelt() -> None:
    found = [value for _, _, value, _ in find_dates("on MONDAY, then ſunday; today")]
    assert found == ["MONDAY", "ſunday"]  # ſ: IGNORECASE's s, kept apart by lower()
    assert not _may_name_weekday("a birthday today", "a birthday today")


@pytest.mark.parametrize("kind", [*ATOM_TYPES, "other"])
@pytest.mark.parametrize("importance", [0.0, 0.3, 1.0])
def test_lifetimes_are_those_of_each_type(kind: str, importance: float) -> None:
    config = AtomConfig(
        episode_ttl_days=1.5,
        plan_ttl_days=2.5,
        fact_ttl_days=3.5,
        relation_ttl_days=4.5,
        preference_ttl_days=5.5,
        unknown_ttl_days=6.5,
    )
    days = {
        "episode": 1.5,
        "plan": 2.5,
        "fact": 3.5,
        "relation": 4.5,
        "preference": 5.5,
    }.get(kind, 6.5)
    expected = days * 86_400.0 * (1.0 + config.importance_factor * importance)
    assert ttl_seconds(kind, importance, config) == expected
