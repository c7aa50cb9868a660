"""Each example script runs by itself, as ``python examples/NAME.py``, in a new process.

Its agents talk over the XMPP socket of an embedded server it starts itself.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from factories import EXAMPLES, run_python

TIMEOUT = 90


CASES = [
    (
        "two_agents_learn.py",
        [
            "bob's notes about this conversation: ['Alice is a data scientist who likes tea']",
            "alice's notes about this conversation: ['Bob runs the Lisbon office']",
            "bob recalls: I recall: Alice is a data scientist who likes tea",
            "alice recalls: I recall: Bob runs the Lisbon office",
        ],
    ),
    (
        "team_coordinator.py",
        [
            "coordinator stored 4 memories:",
            "[preference] Ana prefers morning meetings (from planner@localhost)",
            "client: what do you know about the survey?",
            "  - the customer survey closes on Friday",
        ],
    ),
    (
        "ephemeral_agents.py",
        [
            "scout memories while running: 1",
            "scout memories after restart: 0",
            "memory folder exists: False; files on disk: 0",
        ],
    ),
]


def run_example(script: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_python(str(EXAMPLES / script), *args, cwd=cwd, timeout=TIMEOUT)


def check(done: subprocess.CompletedProcess[str], expected: list[str]) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    for line in expected:
        assert line in done.stdout, f"{line!r} missing from:\n{done.stdout}"


@pytest.mark.slow
@pytest.mark.parametrize(("script", "expected"), CASES)
def test_example_runs_by_itself(script: str, expected: list[str], tmp_path: Path) -> None:
    check(run_example(script, tmp_path), expected)
    assert list(tmp_path.iterdir()) == []


def test_every_example_is_tested() -> None:
    tested = {"two_agents_learn.py", "team_coordinator.py", "ephemeral_agents.py"}
    tested.add("shared_memory.py")  # run by tests/sharing/test_shared_memory_example.py
    tested.add("spade_llm_agent.py")  # run by tests/integrations/test_spade_llm_example.py
    assert {path.name for path in EXAMPLES.glob("*.py")} == tested
