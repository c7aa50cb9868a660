"""The import contract: every import inside ``spade_memory`` points down the layers, and
no modules import each other in a cycle.

Every import is counted, wherever it stands: at the top of a module, inside a function,
under ``if TYPE_CHECKING:``. The layers, top to bottom (a module imports only from its
own package or from a lower row; packages sharing a row are independent, except for the
pairs in ``SAME_ROW``)::

    aliases     agents, sharing, xmpp_server   (deprecated paths of moved modules)
    edge        spade (agents, behaviours, sharing), cli, integrations, web (the
                memory pages); cli may import spade, integrations and web; spade web
    facade      manager
    services    maintenance, tools, context (prompt context from notes and memories),
                disclosure (who sees what: the viewer and scope of a partner),
                formation (what a conversation's messages become as memories)
    engine      engine
    retrieval   retrieval, embedding
    storage     storage, text          (storage may import text)
    doubles     llm, testing           (testing may import llm)
    ground      config
                identity, models, validation, documents, field_checks
                limits, errors, endpoint_urls, http_sessions, in_flight (work others
                wait for),
                _moved (re-exports a moved module by name),
                _lazy (a package's names imported on first use)

The package's ``__init__`` re-exports the public API and stands above every row;
nothing inside the package imports it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "spade_memory"
ROOT = "spade_memory"

# Top to bottom; each entry names a first-level package or module of spade_memory.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("aliases", ("agents", "sharing", "xmpp_server")),
    ("edge", ("spade", "cli", "integrations", "web")),
    ("facade", ("manager",)),
    ("services", ("maintenance", "tools", "context", "disclosure", "formation")),
    ("engine", ("engine",)),
    ("retrieval", ("retrieval", "embedding")),
    ("storage", ("storage", "text")),
    ("doubles", ("llm", "testing")),
    ("ground", ("config",)),
    ("ground", ("identity", "models", "validation", "documents", "field_checks")),
    ("ground", ("limits", "errors", "endpoint_urls", "http_sessions", "_moved", "_lazy")),
    ("ground", ("in_flight",)),
)

# (importer, imported) packages of one row, the first allowed to import the second.
SAME_ROW: dict[tuple[str, str], str] = {
    ("cli", "spade"): "the demo command runs LLM agents",
    ("cli", "integrations"): "the import-spade-llm command reads spade_llm's memory files",
    ("cli", "web"): "the serve command serves the memory pages of a root",
    ("spade", "web"): "MemoryMixin adds the memory pages to the agent's web interface",
    ("storage", "text"): "rows are written with the text layer's tokens, atoms and graph terms",
    ("testing", "llm"): "the scripted LLM answers in the LLM clients' message types",
}

# Known upward imports, (importing module, imported module) with the reason each stays.
# Every other upward import fails the test; an entry whose import is gone fails too.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    (
        "spade_memory.testing",
        "spade_memory.embedding.hashing",
    ): "re-exports HashingEmbedder for tests and examples; the embedder lives in embedding/",
}

Edges = Mapping[str, Iterable[tuple[str, int]]]


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = (package.name, *path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports_of(
    module: str, is_package: bool, source: str, known: Iterable[str]
) -> list[tuple[str, int]]:
    """The modules of the package that ``source`` imports, with the line of each import.

    ``from X import name`` counts as an import of ``X.name`` when that is a module,
    else of ``X``; relative imports are resolved against ``module``.
    """
    modules = set(known)
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.append((full if full in modules else target, node.lineno))
    inside = [(name, line) for name, line in found if name == ROOT or name.startswith(ROOT + ".")]
    return list(dict.fromkeys((name, line) for name, line in inside if name in modules))


def import_graph(files: Mapping[str, Path]) -> dict[str, list[tuple[str, int]]]:
    """Every module's imports of other modules of the package."""
    return {
        module: imports_of(
            module, path.name == "__init__.py", path.read_text(encoding="utf-8"), files
        )
        for module, path in files.items()
    }


def top_package(module: str) -> str:
    """``spade_memory.storage.base`` -> ``storage``; the package itself -> ``spade_memory``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def row_of() -> dict[str, int]:
    rows = {ROOT: -1}
    for index, (_label, names) in enumerate(LAYERS):
        for name in names:
            rows[name] = index
    return rows


def unplaced(modules: Iterable[str]) -> list[str]:
    """Modules whose first-level package has no row in ``LAYERS``."""
    rows = row_of()
    return sorted(module for module in modules if top_package(module) not in rows)


def upward_imports(graph: Edges) -> list[str]:
    """Each import that does not point down, as ``module:line imports target (why)``."""
    rows = row_of()
    offences: list[str] = []
    for module, targets in sorted(graph.items()):
        here = top_package(module)
        for target, line in targets:
            there = top_package(target)
            if there == here or (module, target) in ALLOWED_UPWARD:
                continue
            if there == ROOT:
                why = "the package's __init__ is the public surface, above every layer"
            elif rows[there] < rows[here]:
                why = (
                    f"{there} ({LAYERS[rows[there]][0]}) is above {here} ({LAYERS[rows[here]][0]})"
                )
            elif rows[there] == rows[here] and (here, there) not in SAME_ROW:
                why = (
                    f"{here} and {there} share the {LAYERS[rows[here]][0]} row and are independent"
                )
            else:
                continue
            offences.append(f"{module}:{line} imports {target}: {why}")
    return offences


def cycles(graph: Edges) -> list[list[str]]:
    """The import cycles: strongly connected sets of two or more modules (Tarjan, iterative).

    An import of a module's own enclosing package (its ``__init__``) is no edge: Python
    has that package half-initialised already when the module runs.
    """
    nodes = {
        module: sorted({t for t, _ in targets if not module.startswith(t + ".") and t != module})
        for module, targets in graph.items()
    }
    for targets in list(nodes.values()):
        for target in targets:
            nodes.setdefault(target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, 0)]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, position = work[-1]
            if position < len(nodes[node]):
                work[-1] = (node, position + 1)
                child = nodes[node][position]
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, list[tuple[str, int]]]:
    return import_graph(module_files())


def test_every_module_has_a_layer(graph: dict[str, list[tuple[str, int]]]) -> None:
    missing = unplaced(graph)
    assert not missing, "place these in LAYERS of tests/test_layers.py: " + ", ".join(missing)


def test_imports_point_down_the_layers(graph: dict[str, list[tuple[str, int]]]) -> None:
    offences = upward_imports(graph)
    assert not offences, "imports against the layers:\n  " + "\n  ".join(offences)


def test_every_allowed_upward_import_still_exists(graph: dict[str, list[tuple[str, int]]]) -> None:
    present = {(module, target) for module, targets in graph.items() for target, _ in targets}
    gone = [
        f"{module} -> {target}"
        for module, target in ALLOWED_UPWARD
        if (module, target) not in present
    ]
    assert not gone, "no longer imported; remove from ALLOWED_UPWARD: " + ", ".join(gone)


def test_no_import_cycles(graph: dict[str, list[tuple[str, int]]]) -> None:
    found = cycles(graph)
    lines = []
    for component in found:
        members = set(component)
        edges = [
            f"{module}:{line} -> {target}"
            for module in component
            for target, line in graph.get(module, [])
            if target in members
        ]
        lines.append(" / ".join(component) + "\n    " + "\n    ".join(edges))
    assert not found, "import cycles:\n  " + "\n  ".join(lines)


def test_the_table_names_each_package_once() -> None:
    names = [name for _label, row in LAYERS for name in row]
    assert len(names) == len(set(names))
    rows = row_of()
    for importer, imported in SAME_ROW:
        assert rows[importer] == rows[imported], (importer, imported)


# The checker itself, on made-up modules.

KNOWN = [
    "spade_memory",
    "spade_memory.storage",
    "spade_memory.storage.base",
    "spade_memory.storage.rows",
    "spade_memory.text",
    "spade_memory.text.tokenizer",
    "spade_memory.manager",
    "spade_memory.errors",
]


def test_imports_in_functions_and_under_type_checking_count() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "if TYPE_CHECKING:\n"
        "    from ..manager import MemoryManager\n"
        "def late():\n"
        "    from spade_memory.text import tokenizer\n"
        "    import spade_memory.errors\n"
        "from . import rows\n"
        "from .rows import ROW\n"
    )
    found = imports_of("spade_memory.storage.base", False, source, KNOWN)
    assert sorted(found, key=lambda pair: pair[1]) == [
        ("spade_memory.manager", 4),
        ("spade_memory.text.tokenizer", 6),
        ("spade_memory.errors", 7),
        ("spade_memory.storage.rows", 8),
        ("spade_memory.storage.rows", 9),
    ]


def test_relative_imports_in_a_package_init_resolve_from_the_package() -> None:
    found = imports_of(
        "spade_memory.storage", True, "from .base import X\nfrom .. import errors\n", KNOWN
    )
    assert sorted(found) == [("spade_memory.errors", 2), ("spade_memory.storage.base", 1)]


def test_an_upward_import_is_named_with_its_line() -> None:
    graph = {
        "spade_memory.storage.base": [
            ("spade_memory.manager", 12),
            ("spade_memory.text.tokenizer", 3),
        ],
        "spade_memory.text.tokenizer": [("spade_memory.storage.rows", 40)],
        "spade_memory.errors": [("spade_memory", 5)],
        "spade_memory.maintenance.decay": [("spade_memory.tools.base", 7)],
        "spade_memory.manager": [("spade_memory.storage.base", 1)],
    }
    assert upward_imports(graph) == [
        "spade_memory.errors:5 imports spade_memory: the package's __init__ is the public surface,"
        " above every layer",
        "spade_memory.maintenance.decay:7 imports spade_memory.tools.base: maintenance and tools"
        " share the services row and are independent",
        "spade_memory.storage.base:12 imports spade_memory.manager: manager (facade) is above"
        " storage (storage)",
        "spade_memory.text.tokenizer:40 imports spade_memory.storage.rows: text and storage"
        " share the storage row and are independent",
    ]


def test_a_new_package_must_be_placed() -> None:
    assert unplaced(["spade_memory.storage.base", "spade_memory.plugins.web"]) == [
        "spade_memory.plugins.web"
    ]


def test_cycles_are_found_through_any_length() -> None:
    graph = {
        "spade_memory.a": [("spade_memory.b", 1)],
        "spade_memory.b": [("spade_memory.c", 1)],
        "spade_memory.c": [("spade_memory.a", 1), ("spade_memory.d", 1)],
        "spade_memory.d": [("spade_memory.d", 1)],
        "spade_memory.e.f": [("spade_memory.e", 1)],
        "spade_memory.e": [("spade_memory.e.f", 1)],
    }
    assert cycles(graph) == [["spade_memory.a", "spade_memory.b", "spade_memory.c"]]
