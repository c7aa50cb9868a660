"""One reproducible typo per question, as a user typing fast makes them.

:func:`misspell` picks one content word of a question (letters only, at least four
of them, not an English stopword) and changes it by one edit: a letter deleted,
inserted or replaced, or two adjacent letters swapped. The word and the edit are
drawn from a generator seeded with the question itself and a seed, so a run
gives the same typos every time, whatever the order of the questions.
"""

from __future__ import annotations

import hashlib
import random
import re
import string

from spade_memory.text.tokenizer import ENGLISH_STOPWORDS

__all__ = ["EDITS", "misspell"]

EDITS = ("delete", "insert", "substitute", "transpose")
_WORD = re.compile(r"[A-Za-z]{4,}")


def _generator(text: str, seed: int) -> random.Random:
    digest = hashlib.sha256(f"{seed}\x00{text}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _edit(word: str, kind: str, rng: random.Random) -> str:
    letters = string.ascii_uppercase if word.isupper() else string.ascii_lowercase
    if kind == "delete":
        at = rng.randrange(len(word))
        return word[:at] + word[at + 1 :]
    if kind == "insert":
        at = rng.randrange(len(word) + 1)
        return word[:at] + rng.choice(letters) + word[at:]
    if kind == "substitute":
        at = rng.randrange(len(word))
        other = rng.choice([c for c in letters if c != word[at].lower()])
        return word[:at] + (other.upper() if word[at].isupper() else other) + word[at + 1 :]
    swaps = [i for i in range(len(word) - 1) if word[i].lower() != word[i + 1].lower()]
    if not swaps:  # "aaaa": nothing to swap, delete instead
        return _edit(word, "delete", rng)
    at = rng.choice(swaps)
    return word[:at] + word[at + 1] + word[at] + word[at + 2 :]


def misspell(text: str, seed: int = 0) -> str:
    """``text`` with one typo in one of its content words (unchanged when it has none).

    >>> misspell("When did Caroline go to the LGBTQ support group?") != (
    ...     "When did Caroline go to the LGBTQ support group?")
    True
    """
    words = [m for m in _WORD.finditer(text) if m.group().lower() not in ENGLISH_STOPWORDS]
    if not words:
        return text
    rng = _generator(text, seed)
    chosen = rng.choice(words)
    changed = _edit(chosen.group(), rng.choice(EDITS), rng)
    return text[: chosen.start()] + changed + text[chosen.end() :]
