"""examples/shared_memory.py runs by itself, in a new process, on its own embedded server."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import EXAMPLES, run_python

pytestmark = pytest.mark.slow  # a new Python process running three agents

SCRIPT = EXAMPLES / "shared_memory.py"


def test_shared_memory_example_runs_by_itself(tmp_path: Path) -> None:
    done = run_python(str(SCRIPT), cwd=tmp_path, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in [
        "librarian stored 3 memories (one private)",
        '  - [fact] "The Lisbon office opens on 3 March"',
        '  - [fact] "The Lisbon office has 40 desks"',
        "visitor asks too: librarian@localhost refused: visitor@localhost is not allowed",
        "analyst now remembers: The Lisbon office has 40 desks (from librarian@localhost)",
    ]:
        assert line in out, f"{line!r} missing from:\n{out}"
    assert "confidential" not in out
    assert list(tmp_path.iterdir()) == []
