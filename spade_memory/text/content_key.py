"""When two memories are the same: their content and their context each equal once case,
width, punctuation and spacing are set aside.

:func:`content_key` is what a store compares to find a copy of what it already
holds ("Bob prefers answers in Chinese." and "bob prefers answers in chinese" are one
memory); symbols and digits count ("C++" is not "C", "3.5" is not "35"), and so does
every word, negations included, and the context (the same words said on two dates are
two memories). Paraphrases are left to consolidation, which compares meanings.
"""

from __future__ import annotations

import hashlib
import string
import unicodedata

__all__ = ["CONTENT_KEY_FUNCTION", "content_key", "normalized_text"]

CONTENT_KEY_FUNCTION = "spade_content_key"
"""The name under which :func:`content_key` is registered as a SQL function."""


class _Punctuation(dict[int, int | str]):
    """``str.translate``'s table: a punctuation character becomes a space, any other
    stays; each character's category is looked up once, when first met."""

    def __missing__(self, code: int) -> int | str:
        value: int | str = " " if unicodedata.category(chr(code)).startswith("P") else code
        self[code] = value
        return value


_PUNCTUATION = _Punctuation()
_ASCII_PUNCTUATION = str.maketrans(
    {mark: " " for mark in string.punctuation if unicodedata.category(mark).startswith("P")}
)


def normalized_text(text: str) -> str:
    """``text`` with compatibility forms unified (NFKC), case folded, punctuation
    turned into spaces and spacing collapsed."""
    if text.isascii():  # most memories: NFKC changes nothing, one small table
        return " ".join(text.lower().translate(_ASCII_PUNCTUATION).split())
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(folded.translate(_PUNCTUATION).split())


def content_key(content: str, context: str | None = None) -> bytes:
    """A 16-byte key, equal for memories whose content and context are each equal once
    normalised (:func:`normalized_text`; no context is an empty one)."""
    both = f"{normalized_text(content)}\x00{normalized_text(context or '')}"
    return hashlib.blake2b(both.encode("utf-8"), digest_size=16).digest()
