"""The fast lane (``pytest -m "not slow"``) still reaches every part of the package:
each test folder keeps tests that are not marked slow."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _is_slow_mark(node: ast.expr) -> bool:
    """``pytest.mark.slow`` itself, or a list/tuple holding it."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_is_slow_mark(item) for item in node.elts)
    return isinstance(node, ast.Attribute) and node.attr == "slow"


def _sets_slow_pytestmark(node: ast.Assign) -> bool:
    named = any(
        isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
    )
    return named and _is_slow_mark(node.value)


def fast_tests(source: str) -> list[str]:
    """The test functions of a module that the fast lane runs."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and _sets_slow_pytestmark(node):
            return []
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if node.name.startswith("test_") and not any(map(_is_slow_mark, node.decorator_list)):
            found.append(node.name)
    return found


def test_every_test_folder_keeps_fast_tests() -> None:
    folders = sorted(
        path for path in TESTS.iterdir() if path.is_dir() and any(path.glob("test_*.py"))
    )
    assert folders
    empty = [
        folder.name
        for folder in folders
        if not any(
            fast_tests(path.read_text(encoding="utf-8")) for path in folder.glob("test_*.py")
        )
    ]
    assert not empty, f"only slow tests left in: {', '.join(empty)}"


def test_slow_marks_are_seen_on_functions_and_modules() -> None:
    source = (
        "import pytest\n"
        "@pytest.mark.slow\n"
        "def test_a(): pass\n"
        "@pytest.mark.parametrize('x', [1])\n"
        "async def test_b(x): pass\n"
        "def helper(): pass\n"
    )
    assert fast_tests(source) == ["test_b"]
    assert fast_tests("import pytest\npytestmark = pytest.mark.slow\ndef test_c(): pass\n") == []
    marks = (
        "import pytest\npytestmark = [pytest.mark.asyncio, pytest.mark.slow]\ndef test_d(): pass\n"
    )
    assert fast_tests(marks) == []
    other = "import pytest\npytestmark = pytest.mark.asyncio\ndef test_e(): pass\n"
    assert fast_tests(other) == ["test_e"]
