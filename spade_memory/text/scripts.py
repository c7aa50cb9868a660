"""Which writing system a text is in, as far as similarity levels care.

Texts of one script sit nearer each other under a multilingual embedder than texts
of mixed ones, so a chance level (:mod:`spade_memory.embedding.chance`) is measured
per script, and a query is measured against the level of its own.
"""

from __future__ import annotations

import re

__all__ = ["CJK_RUN", "HAN", "HAN_RANGES", "HAN_RUN", "KANA_RANGES", "script_of"]

HAN_RANGES = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
"""Chinese characters (CJK unified ideographs, extension A, compatibility ideographs),
as the inside of a regular expression's character class."""

KANA_RANGES = "\u3040-\u30ff"
"""Japanese hiragana and katakana, as the inside of a character class."""

HAN = re.compile(f"[{HAN_RANGES}]")
"""One Chinese character (kana are not: a Japanese text without kanji is not Chinese)."""

HAN_RUN = re.compile(f"[{HAN_RANGES}]+")
"""A run of Chinese characters (without kana)."""

CJK_RUN = re.compile(f"[{KANA_RANGES}{HAN_RANGES}]+")
"""A run of Chinese characters or Japanese kana."""


def script_of(text: str) -> str:
    """``cjk`` when ``text`` holds a Chinese or Japanese character, else ``latin``."""
    return "cjk" if CJK_RUN.search(text) else "latin"
