"""Every limit, end to end: at the limit a call reaches storage, one past it stops at the tool."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import pytest

from spade_memory import MemoryConfig, MemoryManager
from spade_memory.config import DEFAULT_CATEGORIES
from spade_memory.limits import LIMITS
from spade_memory.tools import ToolContext, build_memory_tools

CONTENT_CHARS = 300  # a configured content limit, so that content is not the context's limit
NOTE_CHARS = 150


@pytest.fixture
async def manager() -> AsyncIterator[MemoryManager]:
    config = MemoryConfig(
        in_memory=True,
        embedder=None,
        max_content_chars=CONTENT_CHARS,
        max_note_chars=NOTE_CHARS,
    )
    memory = await MemoryManager.open("limits@localhost", config)
    try:
        yield memory
    finally:
        await memory.aclose()


async def _call(manager: MemoryManager, name: str, arguments: Any) -> tuple[bool, str]:
    tool = next(tool for tool in manager.tools() if tool.name == name)
    context = ToolContext(manager=manager, conversation_id="c-1", sender="bob@localhost")
    result = await tool.call(arguments, context)
    return result.ok, result.text


def _store(**extra: Any) -> dict[str, Any]:
    return {"category": "fact", "content": "Alice works at Acme", **extra}


def _relations(count: int, chars: int = 5) -> list[dict[str, str]]:
    return [
        {"source": f"s{i}".ljust(chars, "s"), "relation": "knows", "target": f"t{i}"}
        for i in range(count)
    ]


# (tool, arguments at the limit, arguments one past it, words of the refusal)
CASES = [
    (
        "store_memory",
        _store(content="c" * CONTENT_CHARS),
        _store(content="c" * (CONTENT_CHARS + 1)),
        f"content is too long: {CONTENT_CHARS + 1} characters; at most {CONTENT_CHARS}",
    ),
    (
        "store_memory",
        _store(context="x" * LIMITS.context_chars),
        _store(context="x" * (LIMITS.context_chars + 1)),
        f"context is too long: {LIMITS.context_chars + 1} characters; "
        f"at most {LIMITS.context_chars}",
    ),
    (
        "store_memory",
        _store(entities=[f"Entity {i}" for i in range(LIMITS.explicit_entities)]),
        _store(entities=[f"Entity {i}" for i in range(LIMITS.explicit_entities + 1)]),
        f"entities must hold at most {LIMITS.explicit_entities} items",
    ),
    (
        "store_memory",
        _store(entities=["E" * LIMITS.entity_chars]),
        _store(entities=["E" * (LIMITS.entity_chars + 1)]),
        f"entities[0] is too long: {LIMITS.entity_chars + 1} characters",
    ),
    (
        "store_memory",
        _store(relations=_relations(LIMITS.explicit_entities)),
        _store(relations=_relations(LIMITS.explicit_entities + 1)),
        f"relations must hold at most {LIMITS.explicit_entities} items",
    ),
    (
        "store_memory",
        _store(relations=_relations(1, LIMITS.entity_chars)),
        _store(relations=_relations(1, LIMITS.entity_chars + 1)),
        f"relations[0].source is too long: {LIMITS.entity_chars + 1} characters",
    ),
    (
        "search_memories",
        {"query": "q" * LIMITS.query_chars},
        {"query": "q" * (LIMITS.query_chars + 1)},
        f"query is too long: {LIMITS.query_chars + 1} characters; at most {LIMITS.query_chars}",
    ),
    (
        "search_memories",
        {"query": "Acme", "limit": LIMITS.tool_search_limit},
        {"query": "Acme", "limit": LIMITS.tool_search_limit + 1},
        f"limit must be an integer from 1 to {LIMITS.tool_search_limit}",
    ),
    (
        "list_memories",
        {"limit": LIMITS.tool_list_limit},
        {"limit": LIMITS.tool_list_limit + 1},
        f"limit must be an integer from 1 to {LIMITS.tool_list_limit}",
    ),
    (
        "remember_interaction_info",
        {"information": "n" * NOTE_CHARS},
        {"information": "n" * (NOTE_CHARS + 1)},
        f"information is too long: {NOTE_CHARS + 1} characters; at most {NOTE_CHARS}",
    ),
]


async def _state(manager: MemoryManager) -> tuple[int, int]:
    stats = await manager.stats()
    return stats.total, stats.notes


@pytest.mark.parametrize(
    ("tool", "at_limit", "past_limit", "words"),
    CASES,
    ids=[f"{case[0]}-{case[3].split()[0]}" for case in CASES],
)
async def test_one_past_a_limit_stops_at_the_tool_and_at_it_reaches_storage(
    manager: MemoryManager, tool: str, at_limit: Any, past_limit: Any, words: str
) -> None:
    before = await _state(manager)
    ok, text = await _call(manager, tool, past_limit)
    assert not ok
    assert text.startswith(f"invalid arguments for {tool}: ")  # the tool refused, not storage
    assert words in text and "Nothing was changed" in text
    assert await _state(manager) == before

    ok, text = await _call(manager, tool, at_limit)
    assert ok, text
    if tool == "store_memory":
        (memory,) = await manager.list()
        assert memory.content == at_limit["content"]
        assert memory.context == at_limit.get("context")
    elif tool == "remember_interaction_info":
        (note,) = await manager.notes("c-1")
        assert note.content == at_limit["information"]


async def test_the_manager_and_the_tools_agree_on_the_query_limit(manager: MemoryManager) -> None:
    assert await manager.search("q" * LIMITS.query_chars) == []
    with pytest.raises(ValueError, match="too long"):
        await manager.search("q" * (LIMITS.query_chars + 1))
    with pytest.raises(ValueError, match="too long"):
        await manager.store("x", context="y" * (LIMITS.context_chars + 1))


def test_schema_bounds_are_the_limits() -> None:
    tools = {tool.name: tool.parameters["properties"] for tool in build_memory_tools(("fact",))}
    assert tools["search_memories"]["query"]["maxLength"] == LIMITS.query_chars
    assert tools["search_memories"]["limit"]["maximum"] == LIMITS.tool_search_limit
    assert tools["list_memories"]["limit"]["maximum"] == LIMITS.tool_list_limit
    store = tools["store_memory"]
    assert store["context"]["maxLength"] == LIMITS.context_chars
    assert store["entities"]["maxItems"] == LIMITS.explicit_entities
    assert store["entities"]["items"]["maxLength"] == LIMITS.entity_chars
    assert store["relations"]["maxItems"] == LIMITS.explicit_entities
    for part in ("source", "relation", "target"):
        assert store["relations"]["items"]["properties"][part]["maxLength"] == LIMITS.entity_chars


# -- nesting and size of the raw input ---------------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [LIMITS.argument_depth + 1, 1_000, 100_000])
@pytest.mark.parametrize("as_text", [False, True], ids=["mapping", "json-text"])
async def test_deeply_nested_arguments_are_refused_without_recursion(
    manager: MemoryManager, depth: int, as_text: bool
) -> None:
    arguments: Any = (
        '{"query": ' + "[" * depth + '"x"' + "]" * depth + "}"
        if as_text
        else {"query": _nested(depth)}
    )
    for name in ("search_memories", "store_memory", "remember_interaction_info"):
        ok, text = await _call(manager, name, arguments)  # no RecursionError escapes
        assert not ok and "nested too deeply" in text, text
    assert await _state(manager) == (0, 0)


async def test_too_many_values_are_refused_naming_the_argument(manager: MemoryManager) -> None:
    ok, text = await _call(manager, "store_memory", _store(entities=["a"] * 20_000))
    assert not ok and f"entities holds more than {LIMITS.argument_items} values" in text
    assert await _state(manager) == (0, 0)


async def test_nesting_a_valid_call_needs_stays_accepted(manager: MemoryManager) -> None:
    text = json.dumps(_store(relations=_relations(2)))
    ok, reply = await _call(manager, "store_memory", text)
    assert ok, reply


# -- the generated schemas stay what the LLM was given before ----------------------------


def test_generated_schemas_keep_their_shape() -> None:
    shapes = {
        tool.name: {
            name: (
                spec["type"],
                spec.get("enum"),
                spec.get("minimum"),
                spec.get("maximum"),
                spec.get("minLength"),
                spec.get("maxLength"),
                spec.get("default"),
            )
            for name, spec in tool.parameters["properties"].items()
        }
        for tool in build_memory_tools(DEFAULT_CATEGORIES)
    }
    categories = list(DEFAULT_CATEGORIES)
    assert shapes == {
        "store_memory": {
            "category": ("string", categories, None, None, None, None, None),
            "content": ("string", None, None, None, 1, None, None),
            "context": ("string", None, None, None, None, LIMITS.context_chars, None),
            "confidence": ("number", None, 0, 1, None, None, 1.0),
            "importance": ("number", None, 0, 1, None, None, 0.5),
            "entities": ("array", None, None, None, None, None, None),
            "relations": ("array", None, None, None, None, None, None),
        },
        "search_memories": {
            "query": ("string", None, None, None, 1, LIMITS.query_chars, None),
            "limit": ("integer", None, 1, LIMITS.tool_search_limit, None, None, 10),
            "category": ("string", categories, None, None, None, None, None),
        },
        "list_memories": {
            "category": ("string", categories, None, None, None, None, None),
            "limit": ("integer", None, 1, LIMITS.tool_list_limit, None, None, 20),
        },
        "remember_interaction_info": {
            "information": ("string", None, None, None, 1, None, None),
        },
        "forget_memory": {"memory_id": ("integer", None, 1, None, None, None, None)},
    }
    for tool in build_memory_tools(DEFAULT_CATEGORIES):
        schema = tool.parameters
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert all(spec.get("description") for spec in schema["properties"].values())
        assert "$defs" not in json.dumps(schema) and "anyOf" not in json.dumps(schema)
    store = build_memory_tools(DEFAULT_CATEGORIES)[0].parameters
    assert store["required"] == ["category", "content"]
    assert store["properties"]["category"]["description"] == (
        "The kind of knowledge: fact, pattern, preference, capability."
    )
    assert store["properties"]["relations"]["items"] == {
        "type": "object",
        "description": "How two entities relate.",
        "properties": {
            part: {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S"}
            for part in ("source", "relation", "target")
        },
        "required": ["source", "relation", "target"],
        "additionalProperties": False,
    }


def test_the_sharing_tools_and_protocol_read_the_same_limits() -> None:
    from spade_memory.errors import ProtocolError
    from spade_memory.spade.sharing.protocol import MemoryQuery, parse_query
    from spade_memory.spade.sharing.tools import build_sharing_tools

    ask, share = (tool.parameters["properties"] for tool in build_sharing_tools(None))  # type: ignore[arg-type]
    assert ask["query"]["maxLength"] == LIMITS.query_chars
    assert ask["agent"]["maxLength"] == share["agent"]["maxLength"] == LIMITS.jid_chars
    assert ask["category"]["maxLength"] == LIMITS.category_chars
    assert ask["limit"]["maximum"] == LIMITS.tool_search_limit
    parse_query(MemoryQuery(query="q" * LIMITS.query_chars, limit=LIMITS.search_limit).to_body())
    with pytest.raises(ProtocolError, match=f"at most {LIMITS.query_chars}"):
        MemoryQuery(query="q" * (LIMITS.query_chars + 1)).to_body()
    with pytest.raises(ProtocolError, match=f"from 1 to {LIMITS.search_limit}"):
        MemoryQuery(query="q", limit=LIMITS.search_limit + 1).to_body()
