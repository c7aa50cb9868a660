"""Tool argument validation, checked against jsonschema (Draft 2020-12)."""

from __future__ import annotations

import json
import math
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.config import DEFAULT_CATEGORIES
from spade_memory.errors import InvalidToolInput
from spade_memory.tools import build_memory_tools, validate_arguments
from spade_memory.tools.validation import check_schema, parse_arguments

TOOLS = build_memory_tools(DEFAULT_CATEGORIES)
SCHEMAS = {tool.name: tool.parameters for tool in TOOLS}
STORE = SCHEMAS["store_memory"]
SEARCH = SCHEMAS["search_memories"]


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_every_tool_schema_is_valid_draft_2020_12(tool: Any) -> None:
    jsonschema.Draft202012Validator.check_schema(tool.parameters)
    validator = jsonschema.Draft202012Validator
    for name, spec in tool.parameters["properties"].items():
        if "default" in spec:
            assert validator(spec).is_valid(spec["default"]), name
    schema = tool.schema()
    assert schema["type"] == "function"
    assert schema["function"]["name"] == tool.name
    assert schema["function"]["parameters"] == tool.parameters
    assert len(schema["function"]["description"]) > 80
    json.dumps(schema)  # serialisable as is


def test_parameters_are_a_copy() -> None:
    tool = build_memory_tools(DEFAULT_CATEGORIES)[0]
    tool.parameters["properties"].clear()
    assert tool.parameters["properties"]


def test_category_error_names_the_choices() -> None:
    with pytest.raises(InvalidToolInput) as caught:
        validate_arguments(STORE, {"category": "facts", "content": "x"})
    assert str(caught.value) == (
        "category must be one of fact, pattern, preference, capability; got 'facts'"
    )


def test_defaults_are_applied_and_numbers_cleaned() -> None:
    cleaned = validate_arguments(STORE, {"category": "fact", "content": "x", "confidence": 1})
    assert cleaned == {"category": "fact", "content": "x", "confidence": 1.0, "importance": 0.5}
    assert isinstance(cleaned["confidence"], float)
    assert validate_arguments(SEARCH, '{"query": "q", "limit": 5.0}') == {"query": "q", "limit": 5}
    assert type(validate_arguments(SEARCH, {"query": "q", "limit": 5.0})["limit"]) is int


def test_null_is_refused_for_every_argument() -> None:
    """An optional argument is left out, never sent as null; each null is named."""
    with pytest.raises(InvalidToolInput) as caught:
        validate_arguments(SEARCH, '{"query": "q", "category": null, "limit": null}')
    assert str(caught.value).splitlines() == [
        "category must be one of fact, pattern, preference, capability; got null: leave an "
        "optional argument out instead of sending null",
        "limit must be an integer from 1 to 20; got null: leave an optional argument out "
        "instead of sending null",
    ]
    with pytest.raises(InvalidToolInput, match="query must be a string; got null"):
        validate_arguments(SEARCH, '{"query": null}')
    assert "never send it as null" in TOOLS[1].description


def test_empty_text_means_no_arguments() -> None:
    assert parse_arguments("") == {}
    assert parse_arguments("  \n") == {}
    assert validate_arguments(SCHEMAS["list_memories"], "") == {"limit": 20}
    with pytest.raises(InvalidToolInput, match="missing required argument: query"):
        validate_arguments(SEARCH, "")


@pytest.mark.parametrize(
    ("schema", "arguments", "message"),
    [
        (SEARCH, '{"query": "q"', "not valid JSON"),
        (SEARCH, "query=q", "not valid JSON"),
        (SEARCH, '["q"]', "must be a JSON object"),
        (SEARCH, '"q"', "must be a JSON object"),
        (SEARCH, "42", "must be a JSON object"),
        (SEARCH, '{"query": "q", "query": "r"}', "given twice"),
        (SEARCH, '{"query": "q", "limit": NaN}', "NaN"),
        (STORE, '{"category": "fact", "content": "x", "confidence": Infinity}', "Infinity"),
        (STORE, {"category": "fact", "content": "x", "confidence": math.nan}, "confidence must"),
        (STORE, {"category": "fact", "content": "x", "importance": -math.inf}, "importance must"),
        (SEARCH, {"query": "q", "sort": "new"}, "unknown argument 'sort'; accepted arguments"),
        (SEARCH, {"query": "q", "limit": True}, "limit must be an integer from 1 to 20"),
        (SEARCH, {"query": "q", "limit": "5"}, "got '5' (string)"),
        (SEARCH, {"query": "q", "limit": 5.5}, "limit must be an integer"),
        (SEARCH, {"query": "q", "limit": 21}, "limit must be an integer from 1 to 20; got 21"),
        (SEARCH, {"query": "q", "limit": 0}, "from 1 to 20"),
        (STORE, {"category": "fact", "content": "x", "confidence": 1.5}, "from 0 to 1"),
        (STORE, {"category": "fact", "content": "x", "confidence": "high"}, "a number"),
        (STORE, {"category": "fact", "content": "a\x00b"}, "NUL"),
        (STORE, '{"category": "fact", "content": "bad \\ud800 text"}', "lone surrogate"),
        (STORE, {"category": "fact", "content": "   "}, "content must not be empty"),
        (STORE, {"category": "fact", "content": ""}, "content must not be empty"),
        (STORE, {"category": "fact"}, "missing required argument: content (a string)"),
        (STORE, {}, "missing required arguments: category (one of fact,"),
        (SEARCH, {"query": "q" * 1001}, "too long: 1001 characters; at most 1000"),
        (SEARCH, {"query": ["q"]}, "got ['q'] (array)"),
        (SEARCH, {1: "q"}, "argument names must be strings"),
        (SEARCH, "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (SEARCH, b"\xff", "not valid UTF-8"),
    ],
)
def test_bad_arguments_are_refused_clearly(schema: Any, arguments: Any, message: str) -> None:
    with pytest.raises(InvalidToolInput) as caught:
        validate_arguments(schema, arguments)
    assert message in str(caught.value)


def test_runtime_length_limits() -> None:
    arguments = {"category": "fact", "content": "x" * 11}
    with pytest.raises(InvalidToolInput, match="content is too long: 11 characters; at most 10"):
        validate_arguments(STORE, arguments, max_lengths={"content": 10})
    assert validate_arguments(STORE, arguments, max_lengths={"content": 11})["content"] == "x" * 11


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array"},
        {"type": "object", "properties": {"a": {"type": "string"}}},  # extra properties allowed
        {"type": "object", "additionalProperties": False, "anyOf": []},
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"a": {"type": ["string", "null"]}},
        },
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"a": {"type": "string", "format": "email"}},
        },
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"a": {"type": "string"}},
            "required": ["b"],
        },
    ],
)
def test_schemas_outside_the_subset_are_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        check_schema(schema)


# -- agreement with jsonschema ---------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=60),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=1),
    st.sampled_from([0.0, 1.0, 5.0, 20.0, 20.5, -0.0]),
    st.text(max_size=12),
    st.sampled_from(["", " ", "\t\n", "a\x00b", "x\ud800y", "q" * 1001, *DEFAULT_CATEGORIES]),
    st.sampled_from(["fact ", "Fact", "facts", "5"]),
)
_values = st.one_of(
    _scalars,
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _arguments(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    names = st.sampled_from(sorted(schema["properties"]))
    return st.dictionaries(st.one_of(names, names, st.text(max_size=6)), _values, max_size=6)


def _bad_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return "\x00" in value


def expected_verdict(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """jsonschema's verdict, with this package's documented extra rules applied."""
    if not jsonschema.Draft202012Validator(schema).is_valid(arguments):
        return False
    for value in arguments.values():
        if isinstance(value, str) and _bad_text(value):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
    return True


@settings(max_examples=400, deadline=None)
@given(data=st.data(), tool=st.sampled_from(TOOLS))
def test_validator_agrees_with_jsonschema(data: st.DataObject, tool: Any) -> None:
    schema = tool.parameters
    arguments = data.draw(_arguments(schema))
    expected = expected_verdict(schema, arguments)
    try:
        cleaned = validate_arguments(schema, arguments)
    except InvalidToolInput:
        accepted = False
    else:
        accepted = True
        for name, value in cleaned.items():
            if name in arguments and arguments[name] is not None:
                assert value == arguments[name]
            else:
                assert value == schema["properties"][name]["default"]
        assert jsonschema.Draft202012Validator(schema).is_valid(cleaned)
    assert accepted == expected, (arguments, expected)

    try:
        text = json.dumps(arguments, allow_nan=True)
    except (TypeError, ValueError):
        return
    try:
        validate_arguments(schema, text)
        from_text = True
    except InvalidToolInput:
        from_text = False
    assert from_text == expected, (text, expected)


@settings(max_examples=100, deadline=None)
@given(
    categories=st.lists(
        st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), min_size=1, max_size=6, unique=True
    )
)
def test_custom_categories_become_the_enum(categories: list[str]) -> None:
    tools = {t.name: t for t in build_memory_tools(tuple(categories))}
    for name in ("store_memory", "search_memories", "list_memories"):
        schema = tools[name].parameters
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["category"]["enum"] == categories
    cleaned = validate_arguments(
        tools["store_memory"].parameters, {"category": categories[-1], "content": "c"}
    )
    assert cleaned["category"] == categories[-1]
