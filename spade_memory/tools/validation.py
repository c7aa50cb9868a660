"""Tool argument validation: the JSON-Schema subset the memory tools use.

Schemas are objects with ``properties``, ``required`` and ``additionalProperties:
false``; each property has one ``type`` (string, integer, number, boolean) and may
have ``enum``, ``minimum``/``maximum``, ``minLength``/``maxLength``, ``default`` and
``description``. A property may also be an ``array`` (with ``minItems``/``maxItems``)
whose ``items`` are one such scalar, or an object of such scalars (with its own
``properties``, ``required`` and ``additionalProperties: false``).
:func:`validate_arguments` agrees with a Draft 2020-12 validator on that subset,
and adds the rules an LLM's text needs:

- arguments may be the raw JSON text the LLM produced (``""`` means no arguments);
- NaN and infinities are refused, as are duplicate keys in the JSON text;
- strings (also inside arrays) must not hold NUL characters or lone surrogates;
- a required string must not be empty or only whitespace;
- ``null`` for an optional argument means the argument was left out;
- ``5.0`` is the integer 5 (as in JSON Schema), ``"5"`` and ``true`` are not.

The result is a new dict with defaults filled in. Every error names the argument,
what was wrong with it and what is accepted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidToolInput
from ..validation import JSONRejected, check_characters, loads_strict

__all__ = [
    "MAX_ARGUMENT_TEXT_CHARS",
    "check_schema",
    "parse_arguments",
    "validate_arguments",
]

MAX_ARGUMENT_TEXT_CHARS = 4_000_000

_TYPES = ("string", "integer", "number", "boolean")
_ROOT_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "description", "title"}
)
_PROPERTY_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "title",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "default",
    }
)
_ARRAY_KEYWORDS = frozenset({"type", "description", "title", "items", "minItems", "maxItems"})


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _show(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_schema(schema: Mapping[str, Any]) -> None:
    """Refuse a schema that uses anything outside the supported subset.

    Raises:
        ValueError: the schema is not an object schema of the supported subset.
    """
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise ValueError("a tool schema must be an object schema")
    if set(schema) - _ROOT_KEYWORDS:
        raise ValueError(f"unsupported schema keywords: {sorted(set(schema) - _ROOT_KEYWORDS)}")
    if schema.get("additionalProperties", True) is not False:
        raise ValueError("tool schemas must set additionalProperties to false")
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise ValueError("properties must be an object")
    for name, spec in properties.items():
        if isinstance(spec, Mapping) and spec.get("type") == "array":
            _check_array_schema(name, spec)
            continue
        _check_scalar_schema(name, spec)
    required = schema.get("required", [])
    if not isinstance(required, list) or any(r not in properties for r in required):
        raise ValueError("required must list declared properties")


def _check_scalar_schema(name: str, spec: object) -> None:
    if not isinstance(spec, Mapping) or spec.get("type") not in _TYPES:
        raise ValueError(f"property {name!r} needs one type of {', '.join(_TYPES)} or array")
    if set(spec) - _PROPERTY_KEYWORDS:
        extra = sorted(set(spec) - _PROPERTY_KEYWORDS)
        raise ValueError(f"property {name!r} uses unsupported keywords {extra}")


def _check_array_schema(name: str, spec: Mapping[str, Any]) -> None:
    if set(spec) - _ARRAY_KEYWORDS:
        raise ValueError(
            f"array {name!r} uses unsupported keywords {sorted(set(spec) - _ARRAY_KEYWORDS)}"
        )
    items = spec.get("items")
    if isinstance(items, Mapping) and items.get("type") == "object":
        if set(items) - _ROOT_KEYWORDS:
            raise ValueError(f"the items of {name!r} use unsupported keywords")
        if items.get("additionalProperties", True) is not False:
            raise ValueError(f"the items of {name!r} must set additionalProperties to false")
        fields = items.get("properties", {})
        if not isinstance(fields, Mapping):
            raise ValueError(f"the items of {name!r} need properties")
        for field, field_spec in fields.items():
            _check_scalar_schema(f"{name}.{field}", field_spec)
        needed = items.get("required", [])
        if not isinstance(needed, list) or any(r not in fields for r in needed):
            raise ValueError(f"the items of {name!r} must require declared properties")
    else:
        _check_scalar_schema(f"{name}[]", items)


def parse_arguments(arguments: object) -> dict[str, Any]:
    """Turn a tool call's arguments (a mapping or the LLM's JSON text) into a dict.

    Raises:
        InvalidToolInput: the text is not JSON, or not a JSON object.
    """
    if arguments is None:
        return {}
    if isinstance(arguments, bytes | bytearray):
        try:
            arguments = bytes(arguments).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidToolInput("arguments are not valid UTF-8 text") from None
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        if len(arguments) > MAX_ARGUMENT_TEXT_CHARS:
            raise InvalidToolInput(
                f"arguments are too long ({len(arguments)} characters); "
                f"at most {MAX_ARGUMENT_TEXT_CHARS} are accepted"
            )
        try:
            parsed = loads_strict(arguments)
        except JSONRejected as exc:
            raise InvalidToolInput(_rejection(exc)) from None
        arguments = parsed
    if not isinstance(arguments, Mapping):
        raise InvalidToolInput(
            f"arguments must be a JSON object of named arguments, got {_json_type(arguments)}"
        )
    result: dict[str, Any] = {}
    for key, value in arguments.items():
        if not isinstance(key, str):
            raise InvalidToolInput(f"argument names must be strings, got {_show(key)}")
        result[key] = value
    return result


def _rejection(exc: JSONRejected) -> str:
    """The words of refused arguments."""
    if exc.reason == "constant":
        return f"arguments contain {exc.detail}, which is not a valid JSON number"
    if exc.reason == "duplicate":
        return f"argument {exc.detail!r} is given twice"
    if exc.reason == "depth":
        return "arguments are nested too deeply"
    return (
        f"arguments are not valid JSON ({exc.detail} at character {exc.position}); "
        'send a JSON object such as {"query": "..."}'
    )


def _accepted(spec: Mapping[str, Any]) -> str:
    kind = spec["type"]
    if "enum" in spec:
        return "one of " + ", ".join(str(v) for v in spec["enum"])
    low, high = spec.get("minimum"), spec.get("maximum")
    article = "an" if kind == "integer" else "a"
    if kind in ("integer", "number") and low is not None and high is not None:
        return f"{article} {kind} from {low:g} to {high:g}"
    if kind in ("integer", "number") and low is not None:
        return f"{article} {kind} >= {low:g}"
    if kind in ("integer", "number") and high is not None:
        return f"{article} {kind} <= {high:g}"
    return f"{article} {kind}"


def _check_array(name: str, spec: Mapping[str, Any], value: object) -> list[Any]:
    items = spec["items"]
    if not isinstance(value, list):
        raise InvalidToolInput(f"{name} must be an array; got {_show(value)} ({_json_type(value)})")
    low, high = spec.get("minItems"), spec.get("maxItems")
    if low is not None and len(value) < low:
        raise InvalidToolInput(f"{name} must hold at least {low} items, got {len(value)}")
    if high is not None and len(value) > high:
        raise InvalidToolInput(f"{name} must hold at most {high} items, got {len(value)}")
    if items["type"] != "object":
        return [_check_value(f"{name}[{i}]", items, v, False) for i, v in enumerate(value)]
    fields: Mapping[str, Mapping[str, Any]] = items.get("properties", {})
    needed = items.get("required", [])
    cleaned: list[Any] = []
    for index, element in enumerate(value):
        label = f"{name}[{index}]"
        if not isinstance(element, Mapping) or not all(isinstance(k, str) for k in element):
            raise InvalidToolInput(
                f"{label} must be an object with {', '.join(fields)}; got {_show(element)}"
            )
        unknown = sorted(set(element) - set(fields))
        missing = [k for k in needed if k not in element]
        if unknown or missing:
            raise InvalidToolInput(
                f"{label} must be an object with {', '.join(fields)}"
                + (f"; unknown {', '.join(unknown)}" if unknown else "")
                + (f"; missing {', '.join(missing)}" if missing else "")
            )
        cleaned.append(
            {k: _check_value(f"{label}.{k}", fields[k], v, False) for k, v in element.items()}
        )
    return cleaned


def _check_value(name: str, spec: Mapping[str, Any], value: object, required: bool) -> Any:
    kind = spec["type"]
    if kind == "array":
        return _check_array(name, spec, value)
    wrong = InvalidToolInput(
        f"{name} must be {_accepted(spec)}; got {_show(value)} ({_json_type(value)})"
    )
    cleaned: Any
    if kind == "string":
        if not isinstance(value, str):
            raise wrong
        cleaned = value
    elif kind == "boolean":
        if not isinstance(value, bool):
            raise wrong
        cleaned = value
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong
        if isinstance(value, float):
            if not math.isfinite(value) or not value.is_integer():
                raise wrong
            cleaned = int(value)
        else:
            cleaned = value
    else:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidToolInput(f"{name} must be {_accepted(spec)}; got {value!r}")
        cleaned = value
    if "enum" in spec and cleaned not in spec["enum"]:
        raise InvalidToolInput(f"{name} must be {_accepted(spec)}; got {_show(value)}")
    if kind in ("integer", "number"):
        low, high = spec.get("minimum"), spec.get("maximum")
        if (low is not None and cleaned < low) or (high is not None and cleaned > high):
            raise InvalidToolInput(f"{name} must be {_accepted(spec)}; got {_show(value)}")
        if kind == "number":
            try:
                cleaned = float(cleaned)
            except OverflowError:
                raise InvalidToolInput(f"{name} is too large; got {_show(value)}") from None
    if kind == "string":
        _check_length(name, cleaned, spec.get("minLength"), spec.get("maxLength"))
        check_characters(name, cleaned)
        if required and not cleaned.strip():
            raise InvalidToolInput(f"{name} must not be empty or only whitespace")
    return cleaned


def _check_length(name: str, value: str, low: int | None, high: int | None) -> None:
    if low is not None and len(value) < low:
        if low == 1:
            raise InvalidToolInput(f"{name} must not be empty")
        raise InvalidToolInput(f"{name} is too short: {len(value)} characters, at least {low}")
    if high is not None and len(value) > high:
        raise InvalidToolInput(
            f"{name} is too long: {len(value)} characters; at most {high} are accepted"
        )


def validate_arguments(
    schema: Mapping[str, Any],
    arguments: Mapping[str, Any] | str,
    *,
    max_lengths: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Check ``arguments`` against ``schema`` and return them cleaned, with defaults.

    Args:
        schema: an object schema of the supported subset (see :func:`check_schema`).
        arguments: a mapping, or the JSON text of one.
        max_lengths: extra ``maxLength`` limits by argument name, known only at run
            time (such as the configured longest memory content).

    Returns:
        A new dict holding every given argument (integers as ``int``, numbers as
        ``float``) plus the defaults of the missing ones.

    Raises:
        InvalidToolInput: the arguments do not fit the schema; the message names
            the argument, what was wrong and what is accepted.
    """
    given = parse_arguments(arguments)
    properties: Mapping[str, Mapping[str, Any]] = schema.get("properties", {})
    required = set(schema.get("required", []))
    unknown = sorted(set(given) - set(properties))
    if unknown:
        accepted = ", ".join(properties) or "none"
        names = ", ".join(_show(n, 40) for n in unknown)
        raise InvalidToolInput(
            f"unknown argument{'s' if len(unknown) > 1 else ''} {names}; "
            f"accepted arguments: {accepted}"
        )
    cleaned: dict[str, Any] = {}
    for name, spec in properties.items():
        if name not in given or (given[name] is None and name not in required):
            continue
        value = _check_value(name, spec, given[name], name in required)
        limit = (max_lengths or {}).get(name)
        if limit is not None and isinstance(value, str):
            _check_length(name, value, None, limit)
        cleaned[name] = value
    missing = [name for name in properties if name in required and name not in cleaned]
    if missing:
        described = ", ".join(f"{n} ({_accepted(properties[n])})" for n in missing)
        raise InvalidToolInput(
            f"missing required argument{'s' if len(missing) > 1 else ''}: {described}"
        )
    for name, spec in properties.items():
        if name not in cleaned and "default" in spec:
            cleaned[name] = spec["default"]
    return cleaned
