"""Counted nouns in the right number: ``1 memory``, ``2 memories``, ``0 results``."""

from __future__ import annotations

__all__ = ["plural"]

_IRREGULAR = {"memory": "memories", "entry": "entries"}


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``"1 memory"``, ``"2 memories"``, ``"0 results"``, ``"1,200 notes"``."""
    if count == 1:
        return f"1 {singular}"
    return f"{count:,} {plural_form or _IRREGULAR.get(singular, singular + 's')}"
