"""The write path's shortcuts give the answers of the full scans they skip.

Atom cue words are looked up among a sentence's words, dates and times are only
searched for in a text that could hold them, and relation patterns run only on a
sentence that one of them matches: each is checked here against the plain regex
scan it stands for, on texts built to hit its edges (case folding, phrases split
by other whitespace, Chinese cues, full-width digits).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.text import relations
from spade_memory.text.atoms import (
    _EPISODE,
    _EPISODE_CUES,
    _FACT,
    _FACT_CUES,
    _FOLDED,
    _PLAN,
    _PLAN_CUES,
    _PREFERENCE,
    _PREFERENCE_CUES,
    _WORDS,
    _Cues,
    classify_atom,
)
from spade_memory.text.dates import find_dates
from spade_memory.text.extraction import get_extractor
from spade_memory.text.mentions import split_sentences

CUES = (
    (_PREFERENCE, _PREFERENCE_CUES),
    (_PLAN, _PLAN_CUES),
    (_EPISODE, _EPISODE_CUES),
    (_FACT, _FACT_CUES),
)
# Words of every cue, their neighbours, and the characters case folding treats apart.
_PIECES = (
    "likes LIKE Liked into INTO fond of can't CAN'T stand favourite favorite hates "
    "will Going to gonna plans plan intends next NEXT week Monday month later today "
    "this weekend morning last night time earlier yesterday ago saw Had is ARE never "
    "İnto lİke ıs ſaw \u212aelvin é É 5 _ x 喜欢 最爱 打算 明天 去了 昨天 是 有 了 去"
)
# ... and every word the regexes themselves spell (a cue missing from a lookup shows)
PIECES = sorted(
    {*_PIECES.split()}
    | {
        word
        for pattern, _ in CUES
        for word in re.findall(r"[a-z']+|[\u4e00-\u9fff]+", pattern.pattern)
        if word not in ("s", "b")
    }
)
SEPARATORS = (" ", "", "  ", "\t", "\n", "-", ", ", "'", "喜")


def _found(cues: _Cues, text: str) -> bool:
    lowered = "" if _FOLDED.search(text) else text.lower()
    words = set(_WORDS.findall(lowered)) if lowered else None
    return cues.found(text, words, lowered)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(PIECES), st.sampled_from(SEPARATORS)), min_size=0, max_size=8
    )
)
def test_cue_lookups_answer_as_the_cue_regexes(parts: list[tuple[str, str]]) -> None:
    text = "".join(word + separator for word, separator in parts)
    for pattern, cues in CUES:
        assert _found(cues, text) == (pattern.search(text) is not None), (text, pattern.pattern)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("I can't \t stand olives", "preference"),
        ("She is FOND  OF jazz", "preference"),
        ("Going\nto Rome NEXT Monday", "plan"),
        ("We met last   night", "episode"),
        ("我昨天去了北京", "episode"),
        ("他喜欢跑步", "preference"),
        ("Kelvin\u212a is cold", "fact"),  # folded like "k": the regexes decide
        ("İnto the wild", "preference"),
        ("nothing to see here", "unknown"),
    ],
)
def test_atom_kinds_from_cue_words(text: str, kind: str) -> None:
    assert classify_atom(text, [], category="none") == kind


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("at ５pm", ["time:17:00"]),
        ("at 5 p.m. sharp", ["time:17:00"]),
        ("the 17:45 train", ["time:17:45"]),
        ("on the 1st of May", ["date:05-01"]),
        ("in March 2024", ["date:2024-03"]),
        ("SEPT 3, 2021 it was", ["date:2021-09-03"]),
        ("on 2024-05-01 and 5/2/2024", ["date:2024-05-01", "date:2024-05-02"]),
        ("2024年5月1日", ["date:2024-05-01"]),
        ("五月三日下午三点半", ["date:05-03", "time:15:30"]),
        ("may I say 5 things", []),
        ("a 2-3 day trip, 1/2 done", []),
    ],
)
def test_dates_and_times_where_the_cues_are(text: str, keys: list[str]) -> None:
    assert [key for _, _, _, key in find_dates(text)] == keys


SENTENCES = [
    "Alice works at Acme.",
    "Alice, Bob and Carol are close friends.",
    "Bob is Alice's brother.",
    "Carol likes hiking in the Alps.",
    "Dave and Erin work together on the search team.",
    "Alice went to Paris with Bob.",
    "张伟在北京的阿里巴巴工作。",
    "李娜和王芳是好朋友。",
    "王小红住在上海，喜欢画画。",
    "Nothing here names anyone.",
]


@pytest.mark.parametrize("sentence", SENTENCES)
def test_relation_patterns_run_only_where_one_matches(
    sentence: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mentions = get_extractor().mentions(sentence)
    gated = relations.find_relations(split_sentences(sentence), mentions)

    class Always:
        def search(self, _: str) -> bool:
            return True

    english, chinese, _, _ = relations._patterns()
    monkeypatch.setattr(relations, "_patterns", lambda: (english, chinese, Always(), Always()))
    assert relations.find_relations(split_sentences(sentence), mentions) == gated
