"""The benchmark's typos: one edit in one content word, the same on every run."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.typos import misspell


def _one_edit_apart(a: str, b: str) -> bool:
    """Damerau (restricted): a deletion, insertion, substitution or adjacent swap."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        if len(diff) == 1:
            return True
        i, j = diff[0], diff[-1]
        return len(diff) == 2 and j == i + 1 and a[i] == b[j] and a[j] == b[i]
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


QUESTION = "When did Caroline go to the LGBTQ support group?"


def test_the_same_question_gets_the_same_typo() -> None:
    assert misspell(QUESTION) == misspell(QUESTION)
    assert len({misspell(QUESTION, seed) for seed in range(20)}) > 5


def test_only_a_content_word_changes_by_one_edit() -> None:
    for seed in range(50):
        typed = misspell(QUESTION, seed)
        before, after = QUESTION.split(" "), typed.split(" ")
        changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
        assert len(changed) == 1
        word, misspelt = changed[0]
        assert word.strip("?").lower() not in {"when", "did", "go", "to", "the"}
        assert _one_edit_apart(word, misspelt)


def test_a_question_without_content_words_is_unchanged() -> None:
    assert misspell("Who is it?") == "Who is it?"


@settings(deadline=None)
@given(st.text(max_size=60), st.integers(0, 1000))
def test_any_text_changes_by_at_most_one_edit(text: str, seed: int) -> None:
    typed = misspell(text, seed)
    if re.search(r"[A-Za-z]{4,}", text) is None:
        assert typed == text
    else:
        assert typed == text or _one_edit_apart(text, typed)
