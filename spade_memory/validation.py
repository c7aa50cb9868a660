"""Checks of values passed to the memory API; each failure says what is accepted."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InvalidToolInput
from .limits import LIMITS

__all__ = [
    "JSONRejected",
    "check_category",
    "check_characters",
    "check_id",
    "check_limit",
    "check_metadata",
    "check_page",
    "check_text",
    "check_unit",
    "loads_strict",
]


def check_text(name: str, value: Any, *, max_chars: int, required: bool = True) -> str:
    """A non-empty string without NUL bytes or lone surrogates, at most ``max_chars``."""
    if not isinstance(value, str):
        raise InvalidToolInput(f"{name} must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise InvalidToolInput(f"{name} must not be empty")
    if len(value) > max_chars:
        raise InvalidToolInput(
            f"{name} is too long: {len(value)} characters, at most {max_chars} are accepted"
        )
    check_characters(name, value)
    return value


def check_characters(name: str, value: str) -> None:
    """Refuse NUL characters and lone surrogates, which SQLite and JSON cannot keep."""
    if "\x00" in value:
        raise InvalidToolInput(f"{name} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidToolInput(
            f"{name} contains a lone surrogate (invalid Unicode); send valid UTF-8 text"
        ) from None


def check_optional_text(name: str, value: Any, *, max_chars: int) -> str | None:
    if value is None:
        return None
    text = check_text(name, value, max_chars=max_chars, required=False)
    return text if text.strip() else None


def check_unit(name: str, value: Any) -> float:
    """A finite number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToolInput(f"{name} must be a number between 0 and 1, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise InvalidToolInput(f"{name} must be a number between 0 and 1, got {value!r}")
    return number


def check_category(value: Any, categories: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in categories:
        raise InvalidToolInput(f"category must be one of {', '.join(categories)}; got {value!r}")
    return value


def check_limit(name: str, value: Any, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidToolInput(f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


def check_page(limit: Any, offset: Any) -> tuple[int, int]:
    """One page of a listing: ``limit`` (1 to ``LIMITS.list_limit``) and ``offset``.

    Raises:
        InvalidToolInput: either is out of range or not an integer.
    """
    return (
        check_limit("limit", limit, low=1, high=LIMITS.list_limit),
        check_limit("offset", offset, low=0, high=2**62),
    )


def check_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise InvalidToolInput(
            f"memory id must be an integer from 1 to {2**63 - 1}, got {value!r:.40}"
        )
    return value


def check_metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidToolInput("metadata must be a mapping with string keys")
    try:
        text = json.dumps(dict(value), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidToolInput(f"metadata must be JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidToolInput("metadata is nested too deeply to keep as JSON") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidToolInput(
            f"metadata holds {exc.object[exc.start]!r}, a lone surrogate, which is no "
            "character of text and cannot be stored"
        ) from None
    if len(text) > LIMITS.metadata_chars:
        raise InvalidToolInput(
            f"metadata is larger than {LIMITS.metadata_chars:,} characters of JSON"
        )
    return dict(value)


class JSONRejected(ValueError):
    """Why :func:`loads_strict` refused a text.

    ``reason`` is ``"constant"`` (``detail``: ``NaN``, ``Infinity`` or ``-Infinity``),
    ``"duplicate"`` (``detail``: the key given twice), ``"syntax"`` (``detail``: the
    parser's message, ``position``: where) or ``"depth"`` (nested too deeply).
    """

    def __init__(self, reason: str, detail: str = "", position: int = 0) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        self.position = position


def _no_constant(name: str) -> Any:
    raise JSONRejected("constant", name)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise JSONRejected("duplicate", key)
        result[key] = value
    return result


def loads_strict(text: str) -> Any:
    """``json.loads`` that refuses what JSON does not allow but Python accepts.

    ``NaN``/``Infinity`` and a key given twice in one object are refused, like a
    syntax error or a nesting too deep for the parser: every refusal is one
    :class:`JSONRejected`, which callers turn into their own error and wording.
    """
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise JSONRejected("syntax", exc.msg, exc.pos) from None
    except RecursionError:
        raise JSONRejected("depth") from None
