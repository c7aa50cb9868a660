"""store_memory's entities and relations: schema, validation, and what they store."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.config import DEFAULT_CATEGORIES, MemoryConfig
from spade_memory.errors import InvalidToolInput
from spade_memory.manager import MemoryManager
from spade_memory.tools import ToolContext, build_memory_tools, validate_arguments
from spade_memory.tools.validation import check_schema

Opener = Callable[..., Awaitable[MemoryManager]]  # the open_memory fixture (conftest.py)

STORE = next(t for t in build_memory_tools(DEFAULT_CATEGORIES) if t.name == "store_memory")
SCHEMA = STORE.parameters


def test_the_schema_is_valid_json_schema_and_in_the_subset() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    check_schema(SCHEMA)
    assert SCHEMA["properties"]["entities"]["items"]["type"] == "string"
    assert SCHEMA["properties"]["relations"]["items"]["required"] == [
        "source",
        "relation",
        "target",
    ]


async def test_explicit_entities_and_relations_reach_the_graph(open_memory: Opener) -> None:
    memory = await open_memory("tool@localhost", MemoryConfig(in_memory=True, embedder=None))
    arguments = json.dumps(
        {
            "category": "fact",
            "content": "the usual spot for Friday lunch",
            "entities": ["Blue Bottle"],
            "relations": [{"source": "Zed", "relation": "likes", "target": "Blue Bottle"}],
        }
    )
    result = await STORE.call(arguments, ToolContext(manager=memory))
    assert result.ok, result.text
    await memory.flush()  # graph rows are derived right after the store
    edges = await memory.base_store.fetchall(
        "SELECT s.key, e.relation, t.key FROM graph_edges AS e "
        "JOIN graph_nodes AS s ON s.id = e.source_id JOIN graph_nodes AS t ON t.id = e.target_id"
    )
    assert ("zed", "likes", "blue bottle") in [tuple(row) for row in edges]
    found = await memory.search("what does zed like?", explain=True)
    assert found and found[0].explanation is not None
    assert "graph" in found[0].explanation.routes


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"entities": "Alice"}, "entities must be an array"),
        ({"entities": ["Alice", 3]}, r"entities\[1\] must be a string"),
        ({"entities": [""]}, r"entities\[0\] must not be empty"),
        ({"entities": ["a\x00b"]}, "NUL"),
        ({"entities": ["x"] * 33}, "at most 32 items"),
        ({"relations": [{"source": "a", "target": "b"}]}, "missing relation"),
        ({"relations": [{"source": "a", "relation": "r", "target": "b", "x": 1}]}, "unknown x"),
        ({"relations": ["a likes b"]}, r"relations\[0\] must be an object"),
    ],
)
async def test_bad_arrays_are_refused_and_nothing_is_written(
    open_memory: Opener, extra: dict[str, Any], message: str
) -> None:
    memory = await open_memory("bad@localhost", MemoryConfig(in_memory=True, embedder=None))
    arguments = {"category": "fact", "content": "Alice likes tea", **extra}
    with pytest.raises(InvalidToolInput, match=message):
        validate_arguments(SCHEMA, arguments)
    result = await STORE.call(arguments, ToolContext(manager=memory))
    assert not result.ok and "Nothing was changed" in result.text
    assert await memory.list() == []


_items = st.one_of(
    st.text(max_size=4),
    st.sampled_from(["a\x00", "\x00"]),
    st.integers(),
    st.none(),
    st.dictionaries(
        st.sampled_from(["source", "relation", "target", "other"]),
        st.one_of(st.text(max_size=3), st.integers()),
        max_size=4,
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    entities=st.one_of(st.none(), st.lists(_items, max_size=3), st.text(max_size=3)),
    relations=st.one_of(st.none(), st.lists(_items, max_size=3), st.integers()),
)
def test_array_validation_agrees_with_json_schema(entities: Any, relations: Any) -> None:
    arguments: dict[str, Any] = {"category": "fact", "content": "x"}
    if entities is not None:
        arguments["entities"] = entities
    if relations is not None:
        arguments["relations"] = relations
    # jsonschema's verdict, with the documented extra rule: no NUL inside strings
    expected = jsonschema.Draft202012Validator(SCHEMA).is_valid(arguments) and (
        "\\u0000" not in json.dumps(arguments)
    )
    try:
        cleaned = validate_arguments(SCHEMA, arguments)
    except InvalidToolInput:
        accepted = False
    else:
        accepted = True
        assert cleaned.get("entities") == arguments.get("entities")
        assert cleaned.get("relations") == arguments.get("relations")
    assert accepted == expected, arguments
