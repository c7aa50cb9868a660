"""Typed tool arguments: raw checks, pydantic models, generated schemas, clear errors.

Each tool's arguments are a :class:`ToolArguments` model (pydantic v2, strict);
its JSON schema (OpenAI function ``parameters``) is generated from the model by
:func:`tool_schema`. A call is checked in two steps:

1. :func:`parse_arguments` reads the raw input (a mapping, or the JSON text the LLM
   produced, ``""`` meaning no arguments) and checks its size and nesting
   *iteratively* before anything recurses: at most ``LIMITS.argument_text_chars``
   of text, ``LIMITS.argument_depth`` levels and ``LIMITS.argument_items`` values.
   NaN, infinities and duplicate keys are refused.
2. The model checks the values: strict types (``"5"`` and ``true`` are not
   integers; ``5.0`` is the integer 5, as in JSON Schema), bounds, categories,
   unknown arguments refused, strings without NUL characters or lone surrogates,
   required strings not blank. ``null`` is refused for every argument, optional
   ones included: an optional argument is left out, never sent as ``null``.

Every problem becomes one line naming the argument, what was wrong and what is
accepted (:func:`problems`); no pydantic text or traceback reaches the LLM.

Cost of checking one call from its JSON text (``python benchmarks/tool_validation.py
--baseline <the previous validation.py>``, 20,000 calls, median µs, a loaded 2-core
machine): ``store_memory`` with entities and relations 19 with pydantic here, 47
with the hand-written validator it replaced, 0.8 with msgspec (measured only; its
errors and rules would need the same wrapping); ``search_memories`` 8, 10 and 0.2.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from ..errors import InvalidToolInput
from ..limits import LIMITS
from ..validation import JSONRejected, loads_strict

__all__ = [
    "MAX_ARGUMENT_TEXT_CHARS",
    "WHOLE",
    "Category",
    "Number",
    "OptionalText",
    "RequiredText",
    "ToolArguments",
    "check_schema",
    "check_shape",
    "inline_schema",
    "json_depth",
    "parse_arguments",
    "problems",
    "tool_schema",
    "validate_arguments",
    "validate_model",
]

MAX_ARGUMENT_TEXT_CHARS = LIMITS.argument_text_chars

ModelT = TypeVar("ModelT", bound=BaseModel)

_show_repr = reprlib.Repr()
_show_repr.maxstring = 50
_show_repr.maxother = 50
_show_repr.maxlong = 40
_show_repr.maxlist = _show_repr.maxdict = 4
_show_repr.maxlevel = 3


def _show(value: object) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return _show_repr.repr(value)


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


# -- field types -------------------------------------------------------------------


def _clean_text(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError("text", "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError(
            "text", "contains a lone surrogate (invalid Unicode); send valid UTF-8 text"
        ) from None
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("text", "must not be empty or only whitespace")
    return value


def _whole_number(value: object) -> object:
    """``5.0`` is the integer 5 (JSON Schema); anything else is left to the strict check."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _category(value: str, info: ValidationInfo) -> str:
    categories = (info.context or {}).get("categories")
    if categories is not None and value not in categories:
        raise PydanticCustomError("enum", "is not one of the categories")
    return value


_NOT_BLANK = {"pattern": r"\S"}

RequiredText = Annotated[
    str,
    AfterValidator(_clean_text),
    AfterValidator(_not_blank),
    Field(min_length=1, json_schema_extra=_NOT_BLANK),
]
"""A string holding more than whitespace, without NUL characters or lone surrogates."""

OptionalText = Annotated[str, AfterValidator(_clean_text)]
"""A string without NUL characters or lone surrogates (may be empty)."""

WHOLE = BeforeValidator(_whole_number)
"""Put last in ``Annotated[int, Field(...), WHOLE]``: a JSON integer (``5.0`` counts,
``"5"`` and ``true`` do not)."""

Number = Annotated[float, Field(allow_inf_nan=False)]
"""A finite JSON number (``true`` does not count)."""

Category = Annotated[str, AfterValidator(_category)]
"""One of the memory's categories (given at validation time, an enum in the schema)."""


class ToolArguments(BaseModel):
    """The arguments of one tool: strict, unknown fields refused, frozen.

    ``category_fields`` name the fields whose schema gets the memory's categories
    as ``enum``.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    category_fields: ClassVar[tuple[str, ...]] = ()


# -- schemas -----------------------------------------------------------------------


def inline_schema(node: Any, defs: Mapping[str, Any]) -> Any:
    """The schema ``node`` with ``$ref`` resolved, ``title`` dropped and ``T | None``
    turned into ``T`` (``null`` is never accepted)."""
    if isinstance(node, list):
        return [inline_schema(item, defs) for item in node]
    if not isinstance(node, Mapping):
        return node
    if "$ref" in node:
        resolved = dict(defs[node["$ref"].rsplit("/", 1)[-1]])
        resolved.update({k: v for k, v in node.items() if k != "$ref"})
        return inline_schema(resolved, defs)
    options = node.get("anyOf")
    if isinstance(options, list):
        kept = [option for option in options if option != {"type": "null"}]
        if len(kept) == 1:
            merged = {k: v for k, v in node.items() if k != "anyOf"}
            merged.update(kept[0])
            return inline_schema(merged, defs)
    cleaned: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "default" and value is None:
            continue
        if key == "properties" and isinstance(value, Mapping):
            cleaned[key] = {name: inline_schema(spec, defs) for name, spec in value.items()}
        else:
            cleaned[key] = inline_schema(value, defs)
    return cleaned


def tool_schema(
    model: type[ToolArguments], categories: Sequence[str] = (), *, description: str = ""
) -> dict[str, Any]:
    """The OpenAI function ``parameters`` of ``model``.

    ``type: object``, ``properties`` (with the field descriptions), ``required`` and
    ``additionalProperties: false``; fields named by ``category_fields`` get
    ``categories`` as their ``enum``.
    """
    raw = model.model_json_schema()
    schema: dict[str, Any] = inline_schema(
        {k: v for k, v in raw.items() if k != "$defs"}, raw.get("$defs", {})
    )
    schema.pop("description", None)
    if description:
        schema["description"] = description
    properties = schema.setdefault("properties", {})
    for name in model.category_fields:
        spec = {**properties[name], "enum": list(categories)}
        if "description" in spec:
            spec["description"] = spec["description"].replace("{categories}", ", ".join(categories))
        properties[name] = spec
    schema["additionalProperties"] = False
    if not schema.get("required"):
        schema.pop("required", None)
    check_schema(schema)
    _REGISTRY[_key(schema)] = (model, tuple(categories))
    return schema


_REGISTRY: dict[str, tuple[type[ToolArguments], tuple[str, ...]]] = {}
"""Generated schemas and the model (and categories) each came from."""


def _key(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, ensure_ascii=True)


_ROOT_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "description"}
)
_SCALAR_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "default",
    }
)
_ARRAY_KEYWORDS = frozenset({"type", "description", "items", "minItems", "maxItems", "default"})
_TYPES = ("string", "integer", "number", "boolean")


def check_schema(schema: Mapping[str, Any]) -> None:
    """Refuse a schema outside what LLM function calling handles well.

    An object schema with ``additionalProperties: false``, whose properties each
    have one scalar ``type`` (or are an array of scalars or of such objects), with
    no ``anyOf``, ``$ref`` or ``null``.

    Raises:
        ValueError: naming what is outside the subset.
    """
    _check_object(schema, "the schema")


def _check_object(schema: object, where: str) -> None:
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise ValueError(f"{where} must be an object schema")
    if set(schema) - _ROOT_KEYWORDS:
        raise ValueError(
            f"{where} uses unsupported keywords {sorted(set(schema) - _ROOT_KEYWORDS)}"
        )
    if schema.get("additionalProperties", True) is not False:
        raise ValueError(f"{where} must set additionalProperties to false")
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise ValueError(f"the properties of {where} must be an object")
    for name, spec in properties.items():
        if isinstance(spec, Mapping) and spec.get("type") == "array":
            if set(spec) - _ARRAY_KEYWORDS:
                raise ValueError(f"array {name!r} uses unsupported keywords")
            items = spec.get("items")
            if isinstance(items, Mapping) and items.get("type") == "object":
                _check_object(items, f"the items of {name!r}")
            else:
                _check_scalar(f"{name}[]", items)
        else:
            _check_scalar(name, spec)
    required = schema.get("required", [])
    if not isinstance(required, list) or any(r not in properties for r in required):
        raise ValueError(f"the required list of {where} must name declared properties")


def _check_scalar(name: str, spec: object) -> None:
    if not isinstance(spec, Mapping) or spec.get("type") not in _TYPES:
        raise ValueError(f"property {name!r} needs one type of {', '.join(_TYPES)} or array")
    if set(spec) - _SCALAR_KEYWORDS:
        raise ValueError(
            f"property {name!r} uses unsupported keywords {sorted(set(spec) - _SCALAR_KEYWORDS)}"
        )


# -- raw input ---------------------------------------------------------------------

_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},]', re.DOTALL)


def json_depth(text: str) -> int:
    """The deepest nesting of brackets in a JSON text, outside strings (no recursion)."""
    return _scan(text)[0]


def _scan(text: str) -> tuple[int, int]:
    """Bounds on the nesting of a JSON text and on how many values it holds.

    Counting brackets and commas anywhere (strings included) bounds both from above;
    only when those counts pass a limit is the text scanned token by token.
    """
    opens = text.count("[") + text.count("{")
    commas = text.count(",")
    if opens <= LIMITS.argument_depth and opens + commas < LIMITS.argument_items:
        return opens, opens + commas + 1
    depth = deepest = values = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            values += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
        elif token == ",":
            values += 1
    return deepest, values + 1


_CONTAINERS = (Mapping, list, tuple)


def check_shape(value: object, what: str = "arguments") -> None:
    """Refuse a value nested deeper than ``LIMITS.argument_depth`` or holding more
    than ``LIMITS.argument_items`` values; walks it without recursion.

    Raises:
        InvalidToolInput: naming the top-level field at fault and the limit passed.
    """
    stack: list[tuple[Any, int, str | None]] = [(value, 0, None)]
    count = 0
    while stack:
        node, depth, top = stack.pop()
        if depth >= LIMITS.argument_depth:
            where = f"{top} is" if top is not None else f"{what} are"
            raise InvalidToolInput(
                f"{where} nested too deeply (more than {LIMITS.argument_depth} levels)"
            )
        count += len(node)
        if count > LIMITS.argument_items:
            where = f"{top} holds" if top is not None else f"{what} hold"
            raise InvalidToolInput(f"{where} more than {LIMITS.argument_items} values; send fewer")
        if isinstance(node, Mapping):
            for key, child in node.items():
                if isinstance(child, _CONTAINERS):
                    name = top if depth else (key if isinstance(key, str) else None)
                    stack.append((child, depth + 1, name))
        else:
            for child in node:
                if isinstance(child, _CONTAINERS):
                    stack.append((child, depth + 1, top))


def parse_arguments(arguments: object) -> dict[str, Any]:
    """Turn a tool call's arguments (a mapping or the LLM's JSON text) into a dict.

    Size and depth are checked before the text is parsed or the mapping walked
    recursively.

    Raises:
        InvalidToolInput: the text is not JSON, not a JSON object, too large or
            nested too deeply.
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
        depth, values = _scan(arguments)
        if depth > LIMITS.argument_depth:
            raise InvalidToolInput(
                f"arguments are nested too deeply (more than {LIMITS.argument_depth} levels)"
            )
        if values > LIMITS.argument_items:
            raise InvalidToolInput(
                f"arguments hold more than {LIMITS.argument_items} values; send fewer"
            )
        try:
            arguments = loads_strict(arguments)
        except JSONRejected as exc:
            raise InvalidToolInput(_rejection(exc)) from None
        checked = True
    else:
        checked = False
    if not isinstance(arguments, Mapping):
        raise InvalidToolInput(
            f"arguments must be a JSON object of named arguments, got {_json_type(arguments)}"
        )
    if not checked:
        check_shape(arguments)
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


# -- errors ------------------------------------------------------------------------


def _accepted(spec: Mapping[str, Any]) -> str:
    kind = spec.get("type", "value")
    if "enum" in spec:
        return "one of " + ", ".join(str(v) for v in spec["enum"])
    if kind == "array":
        return "an array"
    if kind == "object":
        return "an object"
    low, high = spec.get("minimum"), spec.get("maximum")
    article = "an" if kind == "integer" else "a"
    if kind in ("integer", "number") and low is not None and high is not None:
        return f"{article} {kind} from {low:g} to {high:g}"
    if kind in ("integer", "number") and low is not None:
        return f"{article} {kind} >= {low:g}"
    if kind in ("integer", "number") and high is not None:
        return f"{article} {kind} <= {high:g}"
    return f"{article} {kind}"


def _label(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _spec_at(schema: Mapping[str, Any], loc: Sequence[int | str]) -> Mapping[str, Any]:
    node: Mapping[str, Any] = schema
    for part in loc:
        if isinstance(part, int):
            node = node.get("items", {})
        else:
            node = node.get("properties", {}).get(part, {})
    return node


_TYPE_ERRORS = frozenset(
    {
        "string_type",
        "int_type",
        "int_from_float",
        "float_type",
        "bool_type",
        "finite_number",
        "list_type",
        "model_type",
        "model_attributes_type",
        "dict_type",
        "enum",
        "literal_error",
        "int_parsing",
        "float_parsing",
    }
)
_BOUND_ERRORS = frozenset(
    {"greater_than_equal", "less_than_equal", "greater_than", "less_than", "enum"}
)


def _line(error: ErrorDetails, schema: Mapping[str, Any]) -> str:
    loc = error["loc"]
    name = _label(loc)
    spec = _spec_at(schema, loc)
    kind, value = error["type"], error.get("input")
    ctx = error.get("ctx") or {}
    if kind in ("too_short", "too_long") and isinstance(value, str):
        kind = f"string_{kind}"  # a length bound outside the string's own validators
    if kind == "string_too_short":
        low = ctx.get("min_length", 1)
        if low == 1:
            return f"{name} must not be empty"
        return f"{name} is too short: {len(value)} characters, at least {low}"
    if kind == "string_too_long":
        return (
            f"{name} is too long: {len(value)} characters; "
            f"at most {ctx.get('max_length')} are accepted"
        )
    if kind == "too_long":
        return f"{name} must hold at most {ctx.get('max_length')} items, got {len(value)}"
    if kind == "too_short":
        return f"{name} must hold at least {ctx.get('min_length')} items, got {len(value)}"
    if kind == "text":
        return f"{name} {error['msg']}"
    if kind in _BOUND_ERRORS:
        return f"{name} must be {_accepted(spec)}; got {_show(value)}"
    if kind in ("model_type", "model_attributes_type", "dict_type") and "properties" in spec:
        return f"{name} must be an object with {', '.join(spec['properties'])}; got {_show(value)}"
    if kind in _TYPE_ERRORS:
        return f"{name} must be {_accepted(spec)}; got {_show(value)} ({_json_type(value)})"
    return f"{name}: {error['msg']}"


def problems(exc: ValidationError, schema: Mapping[str, Any]) -> list[str]:
    """One line per problem of ``exc``, in words for an LLM, naming what is accepted.

    Unknown and missing arguments are gathered into one line each, as are the
    unknown and missing fields of one nested object.
    """
    lines: list[str] = []
    unknown: dict[tuple[int | str, ...], list[str]] = {}
    missing: dict[tuple[int | str, ...], list[str]] = {}
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        if error["type"] == "extra_forbidden" and loc:
            unknown.setdefault(loc[:-1], []).append(str(loc[-1]))
        elif error["type"] == "missing" and loc:
            missing.setdefault(loc[:-1], []).append(str(loc[-1]))
        else:
            lines.append(_line(error, schema))
    for parent in dict.fromkeys([*unknown, *missing]):
        if not parent:
            continue
        spec = _spec_at(schema, parent)
        lines.append(
            f"{_label(parent)} must be an object with {', '.join(spec.get('properties', {}))}"
            + (f"; unknown {', '.join(unknown[parent])}" if parent in unknown else "")
            + (f"; missing {', '.join(missing[parent])}" if parent in missing else "")
        )
    properties: Mapping[str, Any] = schema.get("properties", {})
    if () in unknown:
        names = unknown[()]
        lines.insert(
            0,
            f"unknown argument{'s' if len(names) > 1 else ''} "
            f"{', '.join(_show(n) for n in names)}; "
            f"accepted arguments: {', '.join(properties) or 'none'}",
        )
    if () in missing:
        names = missing[()]
        described = ", ".join(f"{n} ({_accepted(properties.get(n, {}))})" for n in names)
        lines.append(f"missing required argument{'s' if len(names) > 1 else ''}: {described}")
    return lines


# -- validation --------------------------------------------------------------------


def validate_model(
    model: type[ModelT],
    arguments: object,
    *,
    schema: Mapping[str, Any],
    categories: Sequence[str] | None = None,
    max_lengths: Mapping[str, int] | None = None,
) -> ModelT:
    """Check a tool call's raw ``arguments`` and return them as a ``model``.

    Args:
        model: the tool's argument model.
        arguments: a mapping, or the JSON text of one.
        schema: the schema generated from ``model`` (its words name what is accepted).
        categories: the memory's categories, for the model's category fields.
        max_lengths: extra ``maxLength`` limits by argument name, known only at run
            time (such as the configured longest memory content).

    Raises:
        InvalidToolInput: one line per problem; nothing else is raised for any input.
    """
    given = parse_arguments(arguments)
    properties: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    optional_nulls = [
        name
        for name, value in given.items()
        if value is None and name in properties and name not in required
    ]
    lines = [
        f"{name} must be {_accepted(properties[name])}; got null: leave an optional "
        "argument out instead of sending null"
        for name in optional_nulls
    ]
    try:
        cleaned = model.model_validate(
            {k: v for k, v in given.items() if k not in optional_nulls},
            context={"categories": categories},
        )
    except ValidationError as exc:
        lines = [*problems(exc, schema), *lines]
        cleaned = None
    for name, limit in (max_lengths or {}).items():
        value = given.get(name)
        if isinstance(value, str) and len(value) > limit:
            lines.append(
                f"{name} is too long: {len(value)} characters; at most {limit} are accepted"
            )
    if lines or cleaned is None:
        raise InvalidToolInput("\n".join(dict.fromkeys(lines)))
    return cleaned


def validate_arguments(
    schema: Mapping[str, Any],
    arguments: Mapping[str, Any] | str,
    *,
    max_lengths: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Check ``arguments`` against a tool's generated ``schema``; return them cleaned.

    A thin function over the tool's model (see :func:`validate_model`).

    Returns:
        A new dict holding every given argument (integers as ``int``, numbers as
        ``float``) plus the defaults of the missing ones.

    Raises:
        InvalidToolInput: the arguments do not fit; one line per problem.
        ValueError: ``schema`` was not generated by :func:`tool_schema`.
    """
    found = _REGISTRY.get(_key(schema))
    if found is None:
        raise ValueError("validate_arguments needs a schema of a memory tool (tool.parameters)")
    model, categories = found
    cleaned = validate_model(
        model, arguments, schema=schema, categories=categories, max_lengths=max_lengths
    )
    return as_arguments(cleaned)


def as_arguments(cleaned: BaseModel) -> dict[str, Any]:
    """A validated model as a dict: what was given plus the defaults that are not ``None``."""
    data = cleaned.model_dump()
    return {
        name: data[name]
        for name in type(cleaned).model_fields
        if name in cleaned.model_fields_set or data[name] is not None
    }
