"""Quoting text for an LLM: stored text as inert data, and no forged memory block.

An agent shows its LLM two kinds of text it did not write: what is stored in its
memory (recalled into the prompt, returned by the tools) and what a partner sends.
Neither may pass for the ``<memory-context>`` block the agent itself builds
(:mod:`spade_memory.context`), nor end one early.

- :func:`neutralize_markers` rewrites anything that imitates the block's tags —
  ``<memory-context>``, ``</memory-context>`` and their variants in case, spacing,
  full-width or look-alike brackets, invisible characters between the letters,
  HTML entities and JSON escapes — as the plain words ``[memory-context]`` and
  ``[/memory-context]``.
- :func:`quote_data` writes a text as a JSON string literal in which no bracket
  of any width appears raw.
- :func:`quote_stored` does both, within a length: how stored text is shown.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata

__all__ = [
    "CUT_MARK",
    "neutralize_markers",
    "quote_data",
    "quote_stored",
    "quote_within",
]

CUT_MARK = "…"

# Brackets that read as "<" or ">", of any width.
_OPENERS = "<\uff1c\ufe64\u3008\u2329\u27e8\u2039\u276e\u2770\u02c2\u1438"
_CLOSERS = ">\uff1e\ufe65\u3009\u232a\u27e9\u203a\u276f\u2771\u02c3\u1433"
_SLASHES = "/\uff0f\u2044\u2215\u29f8"
# Characters that show as nothing (or as a space) and may hide between the letters.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\u3164\ufeff\uffa0\U000e0000-\U000e007f]"
)
_HIDDEN = "\x00"  # what an invisible character folds to


@functools.lru_cache(maxsize=8192)
def _fold_char(char: str) -> str:
    """One character to one character: the look-alike a reader would take it for."""
    if char in _OPENERS:
        return "<"
    if char in _CLOSERS:
        return ">"
    if char in _SLASHES:
        return "/"
    if _INVISIBLE.match(char):
        return _HIDDEN
    folded = unicodedata.normalize("NFKC", char).lower()
    return folded if len(folded) == 1 else char


def _fold(text: str) -> str:
    """``text`` folded character by character (same length, so spans map back)."""
    if text.isascii():  # NFKC leaves ASCII as it is, and ASCII lower-cases one to one
        return text.lower()
    return "".join(map(_fold_char, text))


_GAP = rf"[{_HIDDEN}\s]*"
_JOIN = rf"[{_HIDDEN}\s\-_.\u00b7\u2010-\u2015\u2212]*"
_NAME = _GAP.join("memory") + _JOIN + _GAP.join("context")
_OPEN = r"(?:<|&lt;?|&#0*60;?|&#x0*3c;?|\\u003c|\\x3c|%3c)"
_CLOSE = r"(?:>|&gt;?|&#0*62;?|&#x0*3e;?|\\u003e|\\x3e|%3e)"
_SLASH = r"(?:/|&#0*47;?|&#x0*2f;?|\\u002f|%2f)"
_TAG = re.compile(
    # an opener, an optional slash, the name, then up to its closer if there is one
    rf"{_OPEN}{_GAP}(?P<slash>{_SLASH}{_GAP})?{_NAME}"
    rf"(?:(?:[{_HIDDEN}\s][^<>\n]{{0,80}}?)?{_GAP}{_CLOSE})?"
    # or the name (after a slash) right before a closer: "/memory-context>"
    rf"|(?P<tail>{_SLASH}{_GAP})?{_NAME}{_GAP}{_CLOSE}"
)


def neutralize_markers(text: str) -> str:
    """``text`` with every imitation of a memory-block tag made plain words.

    An opening tag becomes ``[memory-context]``, a closing one ``[/memory-context]``;
    everything else is kept as it was. Applying it twice changes nothing more.
    """
    folded = _fold(text)
    if "memory" not in "".join(folded.split()).replace(_HIDDEN, ""):
        return text  # the cheap test first: no name, no tag (split drops what \s matches)
    pieces: list[str] = []
    last = 0
    for match in _TAG.finditer(folded):
        closing = match.group("slash") is not None or match.group("tail") is not None
        pieces.append(text[last : match.start()])
        pieces.append("[/memory-context]" if closing else "[memory-context]")
        last = match.end()
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


# Escaped inside quoted data: the delimiters' characters and their look-alikes, and
# the line breaks JSON leaves raw.
_ESCAPES = {
    ord(ch): f"\\u{ord(ch):04x}"
    for ch in "&\x85\u2028\u2029" + _OPENERS + _CLOSERS
    if ord(ch) <= 0xFFFF
}


def quote_data(text: str) -> str:
    """``text`` as a JSON string literal that cannot open or close a delimiter.

    Quotes, backslashes and control characters are escaped by JSON; ``<``, ``>``,
    ``&`` and the look-alike brackets (full-width, small, CJK and mathematical angle
    brackets) become ``\\uXXXX`` escapes (still valid JSON, still readable), and so
    do the line breaks JSON leaves raw (U+0085, U+2028, U+2029), so no stored text
    can start a line of its own; a lone surrogate becomes ``?``.
    """
    clean = text.encode("utf-8", "replace").decode("utf-8")
    return json.dumps(clean, ensure_ascii=False).translate(_ESCAPES)


def quote_within(text: str, limit: int) -> str:
    """The longest quoted prefix of ``text`` (marked ``…`` when cut) of at most ``limit``."""
    whole = quote_data(text)
    if len(whole) <= limit:
        return whole
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if len(quote_data(text[:middle] + CUT_MARK)) <= limit:
            low = middle
        else:
            high = middle - 1
    return quote_data(text[:low] + CUT_MARK)


def quote_stored(text: str, limit: int) -> str:
    """Stored ``text`` as an LLM is shown it: tags neutralized, quoted, within ``limit``."""
    return quote_within(neutralize_markers(text), limit)
