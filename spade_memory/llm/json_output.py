"""Structured output: JSON found in a model's text, and checked against a JSON schema.

:meth:`~spade_memory.llm.openai.OpenAICompatibleLLM.complete_json` asks for
``response_format: json_schema``; a server without it answers in text, from
which :func:`json_in_text` takes the JSON (the whole text, a fenced block, or the
first object or array that parses). :func:`schema_problems` checks the common subset of JSON
Schema that structured output uses: ``type`` (one or a list), ``properties``,
``required``, ``additionalProperties: false``, ``items``, ``enum``, ``minimum`` /
``maximum``, ``minLength`` / ``maxLength``, ``minItems`` / ``maxItems``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["json_in_text", "schema_problems"]

_FENCE = re.compile(r"```(?:json)?[ \t]*\n?(.*?)```", re.S | re.I)
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
_MAX_PROBLEMS = 10
_OPENER = re.compile(r"[{\[]")
_DECODE_BUDGET = 4_000_000  # characters the decoder may read in failed tries
_DEEP_COST = 20_000  # a try that nested past the recursion limit
_DECODER = json.JSONDecoder()


def json_in_text(text: str) -> Any:
    """The JSON value a model's text holds.

    Tried in turn: the whole text, each fenced block, then the object or array
    opening at each opening bracket (within a bound on the work).

    Raises:
        ValueError: the text holds no JSON value.
    """
    stripped = text.strip()
    candidates = [stripped, *(block.strip() for block in _FENCE.findall(text))]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except (json.JSONDecodeError, RecursionError):
            continue
    # The value that opens at each bracket, read by the JSON decoder itself, within a
    # budget of characters read (this runs on the event loop, where no timeout can
    # stop it): of a run of one bracket only the first and the last are tried (a
    # model repeating "[" would cost a decoder call per bracket, each as deep as it
    # nests).
    budget = _DECODE_BUDGET
    for opener in _OPENER.finditer(text):
        start = opener.start()
        bracket = text[start]
        inside_a_run = (
            start > 0
            and text[start - 1] == bracket
            and start + 1 < len(text)
            and text[start + 1] == bracket
        )
        if inside_a_run:
            continue  # of "[[[...": the first and the last are tried ("{{" of a template)
        try:
            value, _ = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            budget -= exc.pos - start + 1
        except RecursionError:
            budget -= _DEEP_COST
        else:
            return value
        if budget <= 0:
            break
    raise ValueError("the answer holds no JSON object")


def _type_ok(value: Any, names: list[str]) -> bool:
    for name in names:
        kinds = _TYPES.get(name)
        if kinds is None:
            return True  # a type this checker does not know: accept
        if isinstance(value, bool) and name in ("integer", "number"):
            continue
        if name == "integer" and isinstance(value, float) and value.is_integer():
            return True
        if isinstance(value, kinds):
            return True
    return False


def schema_problems(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """What in ``value`` breaks ``schema`` (at most ten problems, each naming its path);
    empty when it conforms."""
    problems: list[str] = []
    _check(value, schema, path, problems)
    return problems[:_MAX_PROBLEMS]


def _check(value: Any, schema: Mapping[str, Any], path: str, problems: list[str]) -> None:
    if len(problems) >= _MAX_PROBLEMS or not isinstance(schema, Mapping):
        return
    declared = schema.get("type")
    names = [declared] if isinstance(declared, str) else list(declared or [])
    if names and not _type_ok(value, names):
        problems.append(f"{path} must be {' or '.join(names)}, got {type(value).__name__}")
        return
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path} must be one of {json.dumps(schema['enum'])}")
    if isinstance(value, dict):
        _check_object(value, schema, path, problems)
    elif isinstance(value, list):
        items = schema.get("items")
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append(f"{path} needs at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{path} holds more than {schema['maxItems']} items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                _check(item, items, f"{path}[{index}]", problems)
    elif isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            problems.append(f"{path} is shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{path} is longer than {schema['maxLength']} characters")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{path} is below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{path} is above the maximum {schema['maximum']}")


def _check_object(
    value: dict[str, Any], schema: Mapping[str, Any], path: str, problems: list[str]
) -> None:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    for name in schema.get("required") or ():
        if name not in value:
            problems.append(f"{path} lacks the required property {name!r}")
    if schema.get("additionalProperties") is False:
        for name in value:
            if name not in properties:
                problems.append(f"{path} has the unknown property {name!r}")
    for name, sub in properties.items():
        if name in value:
            _check(value[name], sub, f"{path}.{name}", problems)
