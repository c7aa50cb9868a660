"""What the JSON documents spade_memory writes share: strict pydantic models.

Each document (the interaction notes file, an export) is described by a
:class:`Document` model in the module that reads and writes it. The models are
strict: a value of the wrong type is refused, never converted (``"1"`` is not a
number, ``true`` is not ``1``), except that an integer is a number; numbers are
finite; text is valid Unicode. Keys a model does not name are ignored, as they
always were. :func:`describe` turns a refusal into one line naming each field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from .limits import LIMITS

__all__ = ["Document", "Text", "Time", "describe"]


class Document(BaseModel):
    """Base of the document models: strict types, finite numbers, frozen."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, allow_inf_nan=False)


def _unicode(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text holds a lone surrogate (invalid Unicode)") from None
    return value


Text = Annotated[str, AfterValidator(_unicode)]
"""A string that can be written as UTF-8 (JSON's ``\\ud800`` escapes cannot)."""

Time = Annotated[float, Field(ge=0, le=LIMITS.latest_time)]
"""Seconds since the epoch, from 1970 to :attr:`Limits.latest_time` (9999-12-30)."""


def _shown(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(location: Sequence[int | str]) -> str:
    out = ""
    for part in location:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out and not part.isidentifier():
            out += f"[{_shown(part, 40)}]"
        else:
            out += f".{part}" if out else part
    return out


def describe(error: ValidationError, *, limit: int = 3) -> str:
    """One line naming each refused field, what was wrong and what was found."""
    parts: list[str] = []
    problems: list[Any] = error.errors(include_url=False)
    for problem in problems[:limit]:
        where = _where(problem["loc"]) or "the document"
        message = problem["msg"]
        if problem["type"] == "missing":
            parts.append(f"{where}: {message}")
            continue
        given = problem.get("input")
        parts.append(f"{where}: {message}, got {_shown(given)} ({type(given).__name__})")
    if len(problems) > limit:
        parts.append(f"and {len(problems) - limit} more")
    return "; ".join(parts)
