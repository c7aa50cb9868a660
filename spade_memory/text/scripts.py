"""Which writing system a text is in, as far as similarity levels care.

Texts of one script sit nearer each other under a multilingual embedder than texts
of mixed ones, so a chance level (:mod:`spade_memory.embedding.chance`) is measured
per script, and a query is measured against the level of its own.
"""

from __future__ import annotations

import re

__all__ = ["CJK_RUN", "script_of"]

CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
"""A run of Chinese characters or Japanese kana."""


def script_of(text: str) -> str:
    """``cjk`` when ``text`` holds a Chinese or Japanese character, else ``latin``."""
    return "cjk" if CJK_RUN.search(text) else "latin"
