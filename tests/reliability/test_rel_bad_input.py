"""Bad tool input changes nothing: 1,000 malformed calls per tool, 0 exceptions, 0 writes.

Calls are generated from each tool's own JSON schema by a seeded generator: wrong
types, missing and unknown fields, 1 MB strings, NUL bytes, lone surrogates, NaN,
infinities and huge numbers, unknown categories, JSON that is not an object,
malformed JSON, non-string keys, invalid UTF-8, plus calls that are well formed
but name nothing (an id no memory has, a note outside any conversation). Each
goes through ``tool.call(arguments, ToolContext(manager=<a real manager>))``.

Every call must return ``ok=False`` with a short error that names what was wrong,
and afterwards the memory's counts and its files must be exactly as before.
"""

from __future__ import annotations

import json
import math
import random
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from factories import MEMORY_TOOL_NAMES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_support import file_states, sized

from spade_memory.config import MaintenanceConfig, MemoryConfig
from spade_memory.manager import MemoryManager
from spade_memory.tools import MemoryTool, ToolContext

CALLS_PER_TOOL = sized(1_000, 5_000)
MEGABYTE = 1_000_000
MAX_ERROR_CHARS = 1_500


@dataclass(frozen=True)
class BadCall:
    kind: str
    arguments: Any
    names: str | None  # an argument the error must name, when it is about one
    context: str = "conversation"  # or "no-conversation"


def valid_value(spec: dict[str, Any], rng: random.Random) -> Any:
    if "enum" in spec:
        return rng.choice(spec["enum"])
    kind = spec["type"]
    if kind == "array":
        return [valid_value(spec["items"], rng)] if rng.random() < 0.5 else []
    if kind == "object":
        return {name: valid_value(field, rng) for name, field in spec["properties"].items()}
    if kind == "string":
        return "Bob prefers tea in the morning"
    if kind == "integer":
        return int(spec.get("minimum", 1))
    if kind == "number":
        return float(spec.get("minimum", 0.0))
    return True


def wrong_type_values(kind: str) -> list[Any]:
    others: dict[str, list[Any]] = {
        "string": [42, 3.5, True, False, ["a"], {"a": 1}],
        "integer": ["5", "one", 2.5, True, [1], {"n": 1}],
        "number": ["0.5", True, [0.5], {"x": 0.5}, "NaN"],
        "boolean": ["true", 1, 0, [True]],
        "array": ["Alice", 1, {"a": 1}, True, 2.5],
    }
    return others[kind]


def _refuse(constant: str) -> Any:
    raise ValueError(constant)


def _plain_json_object(text: str) -> bool:
    """Whether ``text`` parses (strictly) into a JSON object after all."""
    pairs: list[Any] = []

    def no_duplicates(items: list[tuple[str, Any]]) -> dict[str, Any]:
        pairs.append(len(items) != len({k for k, _ in items}))
        return dict(items)

    try:
        value = json.loads(text, parse_constant=_refuse, object_pairs_hook=no_duplicates)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and not any(pairs)


class Generator:
    """Malformed calls for one tool, derived from its schema (seeded, reproducible)."""

    def __init__(self, tool: MemoryTool, limits: dict[str, int], seed: int) -> None:
        self.tool = tool
        self.schema = tool.parameters
        self.properties: dict[str, dict[str, Any]] = self.schema["properties"]
        self.required: list[str] = list(self.schema.get("required", []))
        self.limits = limits
        self.rng = random.Random(seed)

    def base(self) -> dict[str, Any]:
        """A valid set of arguments (every required one, some optional ones)."""
        args = {name: valid_value(self.properties[name], self.rng) for name in self.required}
        for name, spec in self.properties.items():
            if name not in args and self.rng.random() < 0.5:
                args[name] = valid_value(spec, self.rng)
        return args

    def fields(self, kind: str | None = None) -> list[str]:
        return [n for n, s in self.properties.items() if kind is None or s["type"] == kind]

    def string_bound(self, name: str) -> int | None:
        spec = self.properties[name]
        bounds = [spec.get("maxLength"), self.limits.get(name)]
        present = [b for b in bounds if b is not None]
        return min(present) if present else None

    def kinds(self) -> list[str]:
        kinds = ["not-object", "malformed-json", "unknown-field", "non-string-key", "bad-utf8"]
        if self.required:
            kinds += ["missing-required", "none-text"]
            if any(self.properties[n]["type"] == "string" for n in self.required):
                kinds.append("blank-required")
        kinds.append("wrong-type")
        if self.fields("string"):
            kinds += ["huge-string", "nul-byte", "lone-surrogate"]
        if self.fields("integer") or self.fields("number"):
            kinds += ["non-finite", "huge-number", "out-of-range"]
        if any("enum" in s for s in self.properties.values()):
            kinds.append("unknown-category")
        if self.fields("array"):
            kinds.append("bad-array")
        if self.tool.name == "forget_memory":
            kinds.append("no-such-memory")
        if self.tool.name == "remember_interaction_info":
            kinds.append("no-conversation")
        return kinds

    def make(self) -> BadCall:
        kind = self.rng.choice(self.kinds())
        call = getattr(self, "_" + kind.replace("-", "_"))()
        assert isinstance(call, BadCall)
        if (
            isinstance(call.arguments, dict)
            and self.rng.random() < 0.4
            and kind != "non-string-key"
        ):
            try:  # the same call as the raw JSON text an LLM sends
                text = json.dumps(call.arguments, allow_nan=True)
            except (TypeError, ValueError):
                return call
            # NaN is refused as JSON, a huge text for its size: neither names an argument
            names = None if call.kind == "non-finite" or len(text) > 4_000_000 else call.names
            return BadCall(call.kind, text, names, call.context)
        return call

    # -- one method per kind ----------------------------------------------------------

    def _not_object(self) -> BadCall:
        choice = self.rng.choice(["[]", "[1, 2]", "1", "true", "null", '"query"', "3.5", "[{}]"])
        if self.rng.random() < 0.3:
            return BadCall("not-object", [self.base()], None)
        return BadCall("not-object", choice, None)

    def _malformed_json(self) -> BadCall:
        text = json.dumps(self.base())
        candidates = [
            text[: self.rng.randint(1, len(text) - 1)],
            text.replace('"', "'"),
            text[:-1] + ",}",
            text + "}",
            "{" + text,
            text.replace(":", "=", 1),
            "{" * 5 + text,
            '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
            text[:-1] + ', "x": NaN}',
            text[:-1] + ', "x": Infinity}',
            text[:-1] + ', "x": 1e999}',
        ]
        if self.properties:
            name = next(iter(self.properties))
            candidates.append(f'{{"{name}": 1, "{name}": 2}}')  # a duplicate key
        variants = [v for v in candidates if not _plain_json_object(v)]
        return BadCall("malformed-json", self.rng.choice(variants), None)

    def _unknown_field(self) -> BadCall:
        args = self.base()
        name = self.rng.choice(["id", "Content", "categroy", "x" * MEGABYTE, "a\x00b", "\ud800"])
        args[name] = self.rng.choice([1, "value", None, [1]])
        return BadCall("unknown-field", args, None)

    def _non_string_key(self) -> BadCall:
        args: dict[Any, Any] = self.base()
        args[self.rng.choice([1, 2.5, None, (1, 2)])] = "value"
        return BadCall("non-string-key", args, None)

    def _bad_utf8(self) -> BadCall:
        raw = json.dumps(self.base()).encode()
        cut = self.rng.randint(0, len(raw))
        return BadCall("bad-utf8", raw[:cut] + b"\xff\xfe\xc3" + raw[cut:], None)

    def _missing_required(self) -> BadCall:
        args = self.base()
        name = self.rng.choice(self.required)
        del args[name]
        return BadCall("missing-required", args, name)

    def _none_text(self) -> BadCall:
        args = self.base()
        name = self.rng.choice(self.required)
        args[name] = None
        return BadCall("none-text", args, name)

    def _blank_required(self) -> BadCall:
        args = self.base()
        name = self.rng.choice([n for n in self.required if self.properties[n]["type"] == "string"])
        args[name] = self.rng.choice(["", " ", "\n\t ", "\u3000"])
        return BadCall("blank-required", args, name)

    def _wrong_type(self) -> BadCall:
        args = self.base()
        name = self.rng.choice(list(self.properties))
        args[name] = self.rng.choice(wrong_type_values(self.properties[name]["type"]))
        return BadCall("wrong-type", args, name)

    def _huge_string(self) -> BadCall:
        args = self.base()
        name = self.rng.choice(self.fields("string"))
        bound = self.string_bound(name)
        size = (
            MEGABYTE
            if bound is None or "enum" in self.properties[name]
            else max(bound + 1, self.rng.choice([bound + 1, MEGABYTE]))
        )
        args[name] = ("Bob " * (size // 4 + 1))[:size]
        return BadCall("huge-string", args, name)

    def _nul_byte(self) -> BadCall:
        args = self.base()
        name = self.rng.choice(self.fields("string"))
        args[name] = self.rng.choice(["a\x00b", "\x00", "Bob likes\x00 tea"])
        return BadCall("nul-byte", args, name)

    def _lone_surrogate(self) -> BadCall:
        args = self.base()
        name = self.rng.choice(self.fields("string"))
        args[name] = self.rng.choice(["\ud800", "Bob \udfff tea", "x\ud83d"])
        return BadCall("lone-surrogate", args, name)

    def _numeric_field(self) -> str:
        return self.rng.choice(self.fields("integer") + self.fields("number"))

    def _non_finite(self) -> BadCall:
        args = self.base()
        name = self._numeric_field()
        args[name] = self.rng.choice([math.nan, math.inf, -math.inf])
        return BadCall("non-finite", args, name)

    def _huge_number(self) -> BadCall:
        args = self.base()
        name = self._numeric_field()
        args[name] = self.rng.choice([10**30, -(10**30), 2**63, 2**64 + 1, 1e300, -1e300, 10**400])
        return BadCall("huge-number", args, name)

    def _out_of_range(self) -> BadCall:
        args = self.base()
        name = self._numeric_field()
        spec = self.properties[name]
        low, high = spec.get("minimum"), spec.get("maximum")
        choices = []
        if low is not None:
            choices += [low - 1, low - 0.5 if spec["type"] == "number" else low - 2]
        if high is not None:
            choices += [high + 1, high + 0.001 if spec["type"] == "number" else high + 100]
        if spec["type"] == "integer":
            choices.append(1.5)  # not an integer
        args[name] = self.rng.choice(choices or [1.5])
        return BadCall("out-of-range", args, name)

    def _unknown_category(self) -> BadCall:
        args = self.base()
        name = self.rng.choice([n for n, s in self.properties.items() if "enum" in s])
        args[name] = self.rng.choice(["facts", "FACT", " fact", "fact\x00", "", "secret", "é"])
        return BadCall("unknown-category", args, name)

    def _bad_array(self) -> BadCall:
        args = self.base()
        name = self.rng.choice(self.fields("array"))
        spec = self.properties[name]
        item = valid_value(spec["items"], self.rng)
        bad_items: list[Any] = [1, None, [item], "", "x" * MEGABYTE, "a\x00b", "\ud800"]
        if isinstance(item, dict):
            field = self.rng.choice(list(item))
            bad_items = [
                {k: v for k, v in item.items() if k != field},  # a required field missing
                {**item, "extra": "x"},
                {**item, field: 1},
                {**item, field: ""},
                {**item, field: "x" * MEGABYTE},
                {**item, field: "a\x00b"},
                "Alice",
                [item],
            ]
        choice = self.rng.random()
        if choice < 0.2 and "maxItems" in spec:
            value = [item] * (int(spec["maxItems"]) + 1)
        elif choice < 0.3:
            value = [item] * 100_000
        else:
            value = [item, self.rng.choice(bad_items)]
            self.rng.shuffle(value)
        args[name] = value
        return BadCall("bad-array", args, name)

    def _no_such_memory(self) -> BadCall:
        return BadCall("no-such-memory", {"memory_id": self.rng.randint(10_000, 2**62)}, None)

    def _no_conversation(self) -> BadCall:
        return BadCall("no-conversation", self.base(), None, context="no-conversation")


@pytest.fixture
async def manager(tmp_path: Path) -> Any:
    config = MemoryConfig(
        root=tmp_path / "memory",
        embedder="hashing",
        maintenance=MaintenanceConfig(check_on_open=False, behaviour=False),
    )
    async with await MemoryManager.open("target@localhost", config) as opened:
        for seq in range(5):
            await opened.store(f"Bob prefers tea number {seq}", category="preference")
        await opened.add_note("conversation", "Bob asked about the report")
        await opened.flush()
        yield opened


async def state_of(manager: MemoryManager) -> tuple[Any, ...]:
    stats = await manager.stats()
    assert manager.root is not None
    return (
        stats.total,
        stats.notes,
        stats.conversations,
        stats.by_category,
        file_states(manager.root),
    )


def check_refusal(tool: MemoryTool, call: BadCall, ok: bool, text: str) -> None:
    where = f"{tool.name} {call.kind}: {str(call.arguments)[:120]!r}"
    assert not ok, f"accepted a malformed call: {where}"
    assert text.strip(), f"empty error text: {where}"
    assert len(text) <= MAX_ERROR_CHARS, f"error text of {len(text)} characters: {where}"
    assert "Traceback" not in text and "internal error" not in text, f"{where}: {text}"
    if call.names is not None:
        named = call.names in text or call.names.replace("_", " ") in text
        assert named, f"the error does not name {call.names!r}: {text} ({where})"


@pytest.mark.parametrize("tool_name", MEMORY_TOOL_NAMES)
async def test_malformed_calls_are_refused_and_change_nothing(
    manager: MemoryManager, tool_name: str
) -> None:
    tool = next(t for t in manager.tools() if t.name == tool_name)
    limits = tool.max_lengths(manager)
    generator = Generator(tool, limits, seed=zlib.crc32(tool_name.encode()))
    for name in generator.fields("string"):  # no string argument is unbounded
        spec = generator.properties[name]
        assert "enum" in spec or generator.string_bound(name) is not None, name
    before = await state_of(manager)
    kinds: dict[str, int] = {}
    for _ in range(CALLS_PER_TOOL):
        call = generator.make()
        kinds[call.kind] = kinds.get(call.kind, 0) + 1
        context = ToolContext(
            manager=manager,
            conversation_id=None if call.context == "no-conversation" else "conversation",
            sender="bob@localhost",
        )
        result = await tool.call(call.arguments, context)
        check_refusal(tool, call, result.ok, result.text)
    assert await state_of(manager) == before, "a refused call wrote something"
    assert len(kinds) == len(generator.kinds()), f"kinds never generated: {kinds}"


@pytest.mark.slow
def test_the_generator_only_makes_invalid_calls() -> None:
    """A schema validator agrees that the generated mappings are invalid."""
    jsonschema = pytest.importorskip("jsonschema")
    from spade_memory.tools import build_memory_tools

    for tool in build_memory_tools(("fact", "pattern", "preference", "capability")):
        generator = Generator(tool, {}, seed=7)
        validator = jsonschema.Draft202012Validator(tool.parameters)
        for _ in range(150):
            call = generator.make()
            args = call.arguments
            if not isinstance(args, dict) or call.kind in _CONTEXTUAL | _BEYOND_JSON_SCHEMA:
                continue
            if any(not isinstance(k, str) for k in args) or _unencodable(args):
                continue
            if call.kind == "huge-number" and "maximum" not in tool.parameters["properties"].get(
                call.names or "", {}
            ):
                continue  # past SQLite's largest id: refused by the memory, not the schema
            assert list(validator.iter_errors(args)), f"{tool.name}: {call.kind} {args!r:.200}"


def _unencodable(value: Any) -> bool:
    """Holds a string with NUL or a lone surrogate (refused beyond JSON Schema)."""
    if isinstance(value, str):
        return "\x00" in value or any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_unencodable(k) or _unencodable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_unencodable(v) for v in value)
    return False


_CONTEXTUAL = {"no-such-memory", "no-conversation"}
# refused by rules JSON Schema does not have (NUL, surrogates, blanks, NaN, run-time
# lengths, null meaning missing)
_BEYOND_JSON_SCHEMA = {
    "nul-byte",
    "lone-surrogate",
    "blank-required",
    "non-finite",
    "huge-string",
    "none-text",
}


# -- arbitrary JSON: no call ever raises, a refused one writes nothing ------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(
    max_examples=sized(150, 1_500),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(arguments=st.dictionaries(st.text(max_size=12), _json, max_size=5) | _json)
async def test_arbitrary_json_never_raises(manager: MemoryManager, arguments: Any) -> None:
    for tool in manager.tools():
        if not tool.read_only:
            continue  # a valid write is possible here; the writers are covered above
        result = await tool.call(arguments, ToolContext(manager=manager))
        assert result.text.strip()
        assert "internal error" not in result.text
