"""examples/shared_memory.py runs by itself, in a new process, on its own embedded server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a new Python process running three agents

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "shared_memory.py"


def test_shared_memory_example_runs_by_itself(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    for name in ("SPADE_MEMORY_XMPP_HOST", "SPADE_MEMORY_XMPP_PORT"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in [
        "librarian stored 3 memories (one private)",
        "  - [fact] The Lisbon office opens on 3 March",
        "  - [fact] The Lisbon office has 40 desks",
        "visitor asks too: librarian@localhost refused: visitor@localhost is not allowed",
        "analyst now remembers: The Lisbon office has 40 desks (from librarian@localhost)",
    ]:
        assert line in out, f"{line!r} missing from:\n{out}"
    assert "confidential" not in out
    assert list(tmp_path.iterdir()) == []
