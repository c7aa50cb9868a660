"""Checks of configuration fields, driven by their annotations and declared ranges.

A configuration class declares each field's default and range together::

    @dataclass(frozen=True, kw_only=True)
    class Budget:
        max_calls: int = knob(4, ge=1)
        max_seconds: float = knob(20.0, gt=0)

        def __post_init__(self) -> None:
            check_fields(self)

:func:`check_fields` refuses, with a :class:`~spade_memory.errors.ConfigError`
naming the class, the field, the value given and what is accepted, any value whose
type does not match the field's annotation or that lies outside its range. It runs
in ``__post_init__``, so ``dataclasses.replace()`` is checked the same way.

What an annotation accepts:

- ``bool``: ``True`` or ``False`` only; ``int``: an integer, never a bool;
  ``float``: a finite int or float, never a bool;
- ``str``, a class (``Path`` also takes any ``os.PathLike``), ``None``;
- ``Literal[...]``: exactly one of the values (``True`` is not ``1``);
- a runtime-checkable ``Protocol``: an object with its members (looked up
  statically, so no property runs);
- ``X | Y``: whatever one of them accepts;
- ``tuple[T, ...]``: a tuple of ``T``; ``frozenset[T]``: a set, list or tuple of
  ``T`` (stored as a ``frozenset``); ``Collection[T]`` / ``Sequence[T]``: such a
  container of ``T``, never one string;
- ``Mapping[K, V]``: a mapping of ``K`` to ``V``;
- ``Annotated[T, "text"]``: what ``T`` accepts, described to the user as ``text``.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigError

__all__ = ["Bounds", "check_fields", "knob"]

_T = TypeVar("_T")
_BOUNDS = "spade_memory.bounds"


@dataclass(frozen=True, slots=True, kw_only=True)
class Bounds:
    """The range a numeric field accepts (``None``: no bound on that side).

    Args:
        ge: at least this. gt: more than this. le: at most this.
        note: why, added to the message of a value out of range.
    """

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    note: str | None = None

    def admits(self, value: float) -> bool:
        """Whether ``value`` lies inside the range."""
        return not (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le)
        )

    def __str__(self) -> str:
        low = (
            f"[{_number(self.ge)}" if self.ge is not None
            else f"({_number(self.gt)}" if self.gt is not None
            else None
        )
        if low is not None and self.le is not None:
            return f"in {low}, {_number(self.le)}]"
        if self.ge is not None:
            return f">= {_number(self.ge)}"
        if self.gt is not None:
            return f"> {_number(self.gt)}"
        if self.le is not None:
            return f"<= {_number(self.le)}"
        return ""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def knob(
    default: _T,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    note: str | None = None,
) -> _T:
    """A dataclass field with its default and the range it accepts, declared together."""
    bounds = Bounds(ge=ge, gt=gt, le=le, note=note)
    return field(default=default, metadata={_BOUNDS: bounds})


# -- rules: what one annotation accepts ----------------------------------------------

# (where inside the value, what is accepted there, what was found there)
_Problem = tuple[str, str, object]


class _Rule:
    accepts: str = ""

    def problem(self, value: object) -> _Problem | None:
        raise NotImplementedError

    def normalise(self, value: Any) -> Any:
        return value


class _Is(_Rule):
    def __init__(self, test: Callable[[object], bool], accepts: str) -> None:
        self.test, self.accepts = test, accepts

    def problem(self, value: object) -> _Problem | None:
        return None if self.test(value) else ("", self.accepts, value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_float(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


class _OneOf(_Rule):
    def __init__(self, values: tuple[object, ...]) -> None:
        self.values = values
        self.accepts = "one of " + ", ".join(repr(v) for v in values)

    def problem(self, value: object) -> _Problem | None:
        found = any(type(value) is type(v) and value == v for v in self.values)
        return None if found else ("", self.accepts, value)


class _Protocol(_Rule):
    def __init__(self, protocol: type) -> None:
        self.members = tuple(sorted(n for n in vars(protocol) if not n.startswith("_")))
        self.accepts = f"{_article(protocol.__name__)} (an object with {', '.join(self.members)})"

    def problem(self, value: object) -> _Problem | None:
        missing = object()
        if all(
            _static_attr(value, name, missing) is not missing for name in self.members
        ):
            return None
        return ("", self.accepts, value)


def _static_attr(value: object, name: str, missing: object) -> object:
    return inspect.getattr_static(value, name, missing)


class _Union(_Rule):
    def __init__(self, rules: list[_Rule]) -> None:
        # Literal values of a union read as one list: "'a', 'b', a Thing or None".
        values = tuple(v for r in rules if isinstance(r, _OneOf) for v in r.values)
        others = [r for r in rules if not isinstance(r, _OneOf)]
        self.rules = ([_OneOf(values)] if values else []) + others
        parts = [", ".join(repr(v) for v in values)] if values else []
        parts += [r.accepts for r in others]
        self.accepts = ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else parts[0]

    def problem(self, value: object) -> _Problem | None:
        problems = [r.problem(value) for r in self.rules]
        if any(p is None for p in problems):
            return None
        # A container of the right kind with a wrong item says which item.
        inner = [p for p in problems if p is not None and p[0]]
        return inner[0] if len(inner) == 1 else ("", self.accepts, value)

    def normalise(self, value: Any) -> Any:
        for rule in self.rules:
            if rule.problem(value) is None:
                return rule.normalise(value)
        return value


class _Items(_Rule):
    """A container of items each accepted by ``item``."""

    def __init__(
        self, kind: str, item: _Rule, accepts: str, *, to_frozenset: bool = False
    ) -> None:
        self.kind, self.item, self.accepts = kind, item, accepts
        self.to_frozenset = to_frozenset

    def _container(self, value: object) -> bool:
        if isinstance(value, str | bytes | bytearray):
            return False
        if self.kind == "tuple":
            return isinstance(value, tuple)
        if self.kind == "sequence":
            return isinstance(value, Sequence)
        if self.kind == "set":
            return isinstance(value, Set | list | tuple)
        return isinstance(value, Collection) and not isinstance(value, Mapping)

    def problem(self, value: object) -> _Problem | None:
        if not self._container(value):
            return ("", self.accepts, value)
        assert isinstance(value, Collection)
        for position, entry in enumerate(value):
            found = self.item.problem(entry)
            if found is not None:
                where = f"[{position}]" if self.kind in ("tuple", "sequence") else " item"
                return (where + found[0], found[1], found[2])
        return None

    def normalise(self, value: Any) -> Any:
        return frozenset(value) if self.to_frozenset else value


class _MappingOf(_Rule):
    def __init__(self, key: _Rule, value: _Rule) -> None:
        self.key, self.value = key, value
        self.accepts = f"a mapping of {_plural(key)} to {value.accepts}"

    def problem(self, value: object) -> _Problem | None:
        if not isinstance(value, Mapping):
            return ("", self.accepts, value)
        for key, entry in value.items():
            found = self.key.problem(key)
            if found is not None:
                return (f" key {key!r}", found[1], found[2])
            found = self.value.problem(entry)
            if found is not None:
                return (f"[{key!r}]" + found[0], found[1], found[2])
        return None


def _article(name: str) -> str:
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _rule(hint: Any) -> _Rule:
    """The rule of one annotation (refuses, at once, an annotation it cannot check)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        rule = _rule(args[0])
        descriptions = [a for a in args[1:] if isinstance(a, str)]
        if descriptions:
            rule.accepts = descriptions[0]
        return rule
    if hint is type(None) or hint is None:
        return _Is(lambda v: v is None, "None")
    if hint is bool:
        return _Is(lambda v: isinstance(v, bool), "a bool (True or False)")
    if hint is int:
        return _Is(_is_int, "an integer")
    if hint is float:
        return _Is(_is_float, "a finite number")
    if hint is str:
        return _Is(lambda v: isinstance(v, str), "a string")
    if hint is Path:
        return _Is(lambda v: isinstance(v, os.PathLike), "a path")
    if origin is typing.Literal:
        return _OneOf(args)
    if origin is typing.Union or origin is types.UnionType:
        return _Union([_rule(a) for a in args])
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _rule(args[0])
        return _Items("tuple", item, f"a tuple of {_plural(item)}")
    if origin in (frozenset, Set):
        item = _rule(args[0])
        return _Items("set", item, f"a set of {_plural(item)}", to_frozenset=origin is frozenset)
    if origin is Sequence:
        item = _rule(args[0])
        return _Items("sequence", item, f"a list of {_plural(item)}")
    if origin is Collection:
        item = _rule(args[0])
        return _Items("collection", item, f"a list of {_plural(item)}")
    if origin is Mapping:
        return _MappingOf(_rule(args[0]), _rule(args[1]))
    if isinstance(hint, type) and getattr(hint, "_is_runtime_protocol", False):
        return _Protocol(hint)
    if isinstance(hint, type) and origin is None:
        return _Is(lambda v: isinstance(v, hint), _article(hint.__name__))
    raise TypeError(f"no configuration check for the annotation {hint!r}")


def _plural(item: _Rule) -> str:
    words = item.accepts.split(" ", 1)
    if words[0] in ("a", "an") and len(words) == 2:
        head, _, rest = words[1].partition(" ")
        return head + "s" + (" " + rest if rest else "")
    return item.accepts


@dataclass(frozen=True, slots=True)
class _FieldCheck:
    name: str
    rule: _Rule
    bounds: Bounds | None

    @property
    def accepts(self) -> str:
        if self.bounds is None:
            return self.rule.accepts
        return f"{self.rule.accepts} {self.bounds}"


_CHECKS: dict[type, tuple[_FieldCheck, ...]] = {}


def _checks_of(cls: type) -> tuple[_FieldCheck, ...]:
    checks = _CHECKS.get(cls)
    if checks is None:
        # Each class's annotations are read in the module that defines it.
        hints = typing.get_type_hints(cls, include_extras=True)
        checks = tuple(
            _FieldCheck(f.name, _rule(hints[f.name]), f.metadata.get(_BOUNDS))
            for f in dataclasses.fields(cls)
        )
        _CHECKS[cls] = checks
    return checks


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_fields(config: Any) -> None:
    """Check every field of a frozen configuration dataclass; normalise sets to frozensets.

    Raises:
        ConfigError: naming the class, the field, what was given and what is accepted.
    """
    cls = type(config)
    for check in _checks_of(cls):
        value = getattr(config, check.name)
        found = check.rule.problem(value)
        if found is not None:
            where, accepts, given = found
            if not where and check.bounds is not None:
                accepts = check.accepts
            raise ConfigError(
                f"{cls.__name__}.{check.name}{where} must be {accepts}, "
                f"got {_shown(given)} ({type(given).__name__})"
            )
        bounds = check.bounds
        if bounds is not None and isinstance(value, int | float) and not bounds.admits(value):
            note = f" ({bounds.note})" if bounds.note else ""
            raise ConfigError(
                f"{cls.__name__}.{check.name} must be {check.accepts}{note}, got {_shown(value)}"
            )
        normalised = check.rule.normalise(value)
        if normalised is not value:
            object.__setattr__(config, check.name, normalised)
