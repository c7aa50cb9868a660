"""examples/spade_llm_agent.py runs end to end in its own process, with no network.

Where the machine lets an unprivileged user make a network namespace, the example
runs in one with only loopback up: LiteLLM and spade_llm must not reach out (and
must not hang trying).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from factories import EXAMPLES, child_env, run_python

SCRIPT = EXAMPLES / "spade_llm_agent.py"
TIMEOUT = 120
EXPECTED = [
    "user: remember that the staging database password rotates every 30 days",
    "assistant: Stored as memory 1 in category fact.",
    'assistant: I recall: - [fact] "the staging database password rotates every 30 days" (id 1)',
    "AgentBaseMemory.search_memories('how often does the password change?'):",
    "  - [fact] the staging database password rotates every 30 days (id ",
    "memories stored: 1",
    "scripted LLM requests: 4",
]


def offline_prefix() -> list[str]:
    """``unshare`` into a namespace with loopback only, when the machine allows it."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    probe = subprocess.run(
        [unshare, "-rn", "sh", "-c", "ip link set lo up"],
        capture_output=True,
        timeout=10,
        check=False,
    )
    if probe.returncode != 0:
        return []
    return [unshare, "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']


# About 10 s of CPU (LiteLLM's import alone takes 3 to 4); 24 to 51 s of wall time on a
# loaded machine, so it counts as slow.
@pytest.mark.slow
def test_example_runs_offline_end_to_end(tmp_path: Path) -> None:
    env = child_env()
    env.pop("LITELLM_LOCAL_MODEL_COST_MAP", None)
    prefix = offline_prefix()
    done = run_python(str(SCRIPT), cwd=tmp_path, timeout=TIMEOUT, prefix=prefix, env=env)
    where = "without network" if prefix else "with the network of this machine"
    assert done.returncode == 0, f"{where}:\n{done.stdout}{done.stderr}"
    lines = done.stdout.splitlines()
    for expected in EXPECTED:
        assert any(line.startswith(expected) for line in lines), f"{expected!r} not in {lines}"
    assert list(tmp_path.iterdir()) == []  # nothing left where it ran
