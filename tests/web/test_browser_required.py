"""Without a browser the browser tests skip, unless ``SPADE_MEMORY_REQUIRE_BROWSER=1``
(set by ``.ci/run`` on CI) asks for them: then they fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from factories import REPO, child_env

BROWSER_TESTS = "tests/web/test_inspector_browser.py"


def _run_without_browser(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The browser tests with nothing on ``PATH``, so that no Chromium is found."""
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", BROWSER_TESTS]
    environment = child_env(PATH=str(empty))
    environment.pop("SPADE_MEMORY_REQUIRE_BROWSER", None)
    environment.update(env)
    return subprocess.run(
        command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_they_skip_when_no_browser_is_required(tmp_path: Path) -> None:
    done = _run_without_browser(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped" in done.stdout and "failed" not in done.stdout
    assert "needs Chromium and chromedriver" in done.stdout


@pytest.mark.slow
def test_they_fail_when_a_browser_is_required(tmp_path: Path) -> None:
    done = _run_without_browser(tmp_path, SPADE_MEMORY_REQUIRE_BROWSER="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "skipped" not in done.stdout
    assert "SPADE_MEMORY_REQUIRE_BROWSER=1 but the browser tests cannot run" in done.stdout
