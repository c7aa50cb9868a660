"""ruff and mypy run as part of the suite, so style and types never drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_ruff_is_clean() -> None:
    result = run("ruff", "check", "spade_memory", "tests", "benchmarks", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    result = run("mypy", "spade_memory")
    assert result.returncode == 0, result.stdout + result.stderr
