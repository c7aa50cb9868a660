"""Words one typo away: the candidates a misspelt query term may have meant.

A query word no memory holds ("accomplsih", "jqanna") is often a word the
memory does hold, typed with one slip: a letter left out, one too many, one
replaced, or two adjacent letters swapped (Damerau's four edits). :func:`respellings`
gives every index term one such edit away from a word, as the tokenizer stems it
("paitned" -> "painted" -> "paint"), so a caller can look them all up in the
keyword index's vocabulary at once and keep the few it holds
(:func:`closest`); the word each came from can stand for the typo in the text
of the query (its vector, the names the graph looks up).

Only Latin words are respelt: a Chinese query is indexed as jieba words and
character bigrams, so a wrong character (错别字) leaves the other bigrams of the
word and of the sentence to match, while every one-character edit of a Chinese
word is another word. Words shorter than the caller's ``min_chars``
(``RetrievalTuning.typo_min_chars``) are left alone.

A word no memory holds is not always a typo: "travel", asked of a conversation that
never speaks of travelling, is one edit from the held "gravel". A word of the
English dictionary (:func:`english_words`) is searched as typed, never respelt.
Other languages have no such dictionary here: their words are respelt as before.
"""

from __future__ import annotations

import string
import threading
from collections.abc import Mapping

from .tokenizer import STOPWORDS, stem

__all__ = ["closest", "english_words", "respellable", "respellings"]

_LETTERS = string.ascii_lowercase


def respellable(word: str, min_chars: int) -> bool:
    """Whether ``word`` (lower-case, as typed) is a Latin word of at least
    ``min_chars`` letters worth respelling."""
    return (
        word.islower()
        and len(word) >= min_chars
        and word.isascii()
        and word.isalpha()
        and (word not in STOPWORDS)
    )


def _edits(word: str) -> set[str]:
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    found = {left + right[1:] for left, right in splits if right}
    found.update(left + right[1] + right[0] + right[2:] for left, right in splits if len(right) > 1)
    found.update(left + c + right[1:] for left, right in splits if right for c in _LETTERS)
    found.update(left + c + right for left, right in splits for c in _LETTERS)
    found.discard(word)
    return found


def respellings(word: str) -> dict[str, str]:
    """Every index term one edit from ``word`` (lower-case ASCII letters, as typed),
    with the word that edit gives: ``"paitned"`` -> ``{"paint": "painted", ...}``.
    Never ``word``'s own term nor a stopword."""
    own = stem(word)
    found: dict[str, str] = {}
    for edit in sorted(_edits(word)):
        if edit in STOPWORDS:
            continue
        for term in (stem(edit), edit):
            if term and term != own and term != word:
                found.setdefault(term, edit)
    return found


def closest(held: Mapping[str, int], limit: int) -> list[str]:
    """The ``limit`` respellings the memory holds most often (``held``: each
    respelling's document frequency; ties alphabetical)."""
    ranked = sorted((t for t, count in held.items() if count > 0), key=lambda t: (-held[t], t))
    return ranked[:limit]


_ENGLISH_LOCK = threading.Lock()
_english: frozenset[str] | None = None


def english_words() -> frozenset[str]:
    """The words of an English dictionary, lower-case: pyspellchecker's list, made
    from word frequencies in subtitles (about 160,000 words, names among them;
    misspellings such as "recieve" or "definately" are not in it). Loaded on the
    first call, about 0.4 s; call it from a thread where that matters."""
    global _english
    with _ENGLISH_LOCK:
        if _english is None:
            from spellchecker import SpellChecker

            checker = SpellChecker(language="en", distance=1)
            _english = frozenset(checker.word_frequency.dictionary)
        return _english
