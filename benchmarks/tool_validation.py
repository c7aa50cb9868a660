"""The cost of checking one tool call's arguments.

Times the validation of a valid ``store_memory`` call (with entities and relations)
and of a ``search_memories`` call, from the JSON text an LLM sends, with:

- ``pydantic``: what ``MemoryTool.call`` runs (raw size and depth checks, the strict
  JSON parse, the argument model);
- ``msgspec``: the same shape as ``msgspec.Struct`` types, decoded from the text (only
  when msgspec is installed; measured for comparison, not used by the package);
- ``baseline``: a previous validator, a Python file defining
  ``validate_arguments(schema, arguments)`` given with ``--baseline FILE``.

    python benchmarks/tool_validation.py [--calls 20000] [--baseline FILE]

Prints the median and 95th percentile microseconds per call.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spade_memory.config import DEFAULT_CATEGORIES
from spade_memory.tools import build_memory_tools
from spade_memory.tools.validation import validate_model

STORE = json.dumps(
    {
        "category": "fact",
        "content": "Alice moved to the payments team at Acme in March",
        "context": "told by Bob during the planning meeting",
        "confidence": 0.9,
        "importance": 0.7,
        "entities": ["Alice", "Acme", "payments team"],
        "relations": [
            {"source": "Alice", "relation": "works at", "target": "Acme"},
            {"source": "Alice", "relation": "member of", "target": "payments team"},
        ],
    }
)
SEARCH = json.dumps({"query": "where does Alice work", "limit": 5, "category": "fact"})


def _time(check: Callable[[], object], calls: int) -> tuple[float, float]:
    for _ in range(min(calls, 1_000)):
        check()
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        check()
        samples.append((time.perf_counter_ns() - start) / 1_000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95)]


def _pydantic() -> dict[str, Callable[[], object]]:
    tools = {tool.name: tool for tool in build_memory_tools(DEFAULT_CATEGORIES)}
    checks: dict[str, Callable[[], object]] = {}
    for name, text in (("store_memory", STORE), ("search_memories", SEARCH)):
        tool = tools[name]

        def check(tool: Any = tool, text: str = text, schema: Any = tool.parameters) -> object:
            return validate_model(
                tool.arguments,
                text,
                schema=schema,
                categories=DEFAULT_CATEGORIES,
                max_lengths={"content": 8_000},
            )

        checks[name] = check
    return checks


try:
    import msgspec
except ImportError:  # measured only when installed
    msgspec = None

if msgspec is not None:  # module level: msgspec resolves the annotations here
    Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    Unit = Annotated[float, msgspec.Meta(ge=0, le=1)]
    Category = Literal["fact", "pattern", "preference", "capability"]

    class Relation(msgspec.Struct, forbid_unknown_fields=True):
        source: Name
        relation: Name
        target: Name

    class Store(msgspec.Struct, forbid_unknown_fields=True):
        category: Category
        content: Annotated[str, msgspec.Meta(min_length=1, max_length=8_000)]
        context: Annotated[str, msgspec.Meta(max_length=2_000)] | None = None
        confidence: Unit = 1.0
        importance: Unit = 0.5
        entities: Annotated[list[Name], msgspec.Meta(max_length=32)] | None = None
        relations: Annotated[list[Relation], msgspec.Meta(max_length=32)] | None = None

    class Search(msgspec.Struct, forbid_unknown_fields=True):
        query: Annotated[str, msgspec.Meta(min_length=1, max_length=1_000)]
        limit: Annotated[int, msgspec.Meta(ge=1, le=20)] = 10
        category: Category | None = None


def _msgspec() -> dict[str, Callable[[], object]] | None:
    if msgspec is None:
        return None
    store, search = msgspec.json.Decoder(Store), msgspec.json.Decoder(Search)
    return {
        "store_memory": lambda: store.decode(STORE),
        "search_memories": lambda: search.decode(SEARCH),
    }


def _baseline(path: Path) -> dict[str, Callable[[], object]]:
    # named inside the package, so that its relative imports resolve
    spec = importlib.util.spec_from_file_location("spade_memory.tools._baseline", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tools = {tool.name: tool for tool in build_memory_tools(DEFAULT_CATEGORIES)}
    schemas = {name: tools[name].parameters for name in ("store_memory", "search_memories")}
    return {
        "store_memory": lambda: module.validate_arguments(
            schemas["store_memory"], STORE, max_lengths={"content": 8_000}
        ),
        "search_memories": lambda: module.validate_arguments(schemas["search_memories"], SEARCH),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--baseline", type=Path, help="a previous validator module (a .py file)")
    options = parser.parse_args()
    runs: dict[str, dict[str, Callable[[], object]]] = {"pydantic": _pydantic()}
    found = _msgspec()
    if found is not None:
        runs["msgspec"] = found
    if options.baseline is not None:
        runs["baseline"] = _baseline(options.baseline)
    print(f"{'validator':<10} {'tool':<16} {'median µs':>10} {'p95 µs':>8}")
    for label, checks in runs.items():
        for name, check in checks.items():
            median, p95 = _time(check, options.calls)
            print(f"{label:<10} {name:<16} {median:>10.1f} {p95:>8.1f}")


if __name__ == "__main__":
    main()
