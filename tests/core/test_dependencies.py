"""Every third-party module the package imports is declared in pyproject.toml."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGE = ROOT / "spade_memory"

# Distributions that must not be declared: spade depends on its own fork of
# slixmpp (slixmpp-multiplatform, module ``slixmpp``); the PyPI ``slixmpp`` would
# install a second copy of the same module.
FORBIDDEN = {"slixmpp"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, str]:
    """``{normalised distribution name: requirement}`` of ``[project].dependencies``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    found: dict[str, str] = {}
    for requirement in project["dependencies"]:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        assert match, requirement
        found[_normal(match.group(1))] = requirement
    return found


def imported_modules() -> dict[str, list[str]]:
    """Top-level third-party modules imported anywhere in the package -> files."""
    modules: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "spade_memory":
                    continue
                modules.setdefault(top, []).append(str(path.relative_to(ROOT)))
    return modules


def test_the_scan_finds_the_known_imports() -> None:
    modules = imported_modules()
    for module in ("aiosqlite", "numpy", "filelock", "platformdirs", "pyjabber", "loguru"):
        assert module in modules, module


def test_every_imported_third_party_module_is_declared() -> None:
    distributions = packages_distributions()
    wanted = declared()
    missing = []
    for module, where in sorted(imported_modules().items()):
        names = distributions.get(module)
        if not names:
            pytest.fail(f"module {module} (imported by {where[0]}) is not installed")
        if not any(_normal(name) in wanted for name in names):
            missing.append(f"{module} (distribution {', '.join(names)}; imported by {where[0]})")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_no_forbidden_distribution_is_declared() -> None:
    assert not FORBIDDEN & set(declared())


def test_pyjabber_is_held_to_the_tested_minor_release() -> None:
    # testing/xmpp_server.py patches pyjabber's internals: a new minor release may
    # move them, so the requirement has an upper bound.
    requirement = declared()["pyjabber"].replace(" ", "")
    assert re.search(r"<0\.\d+", requirement), requirement
