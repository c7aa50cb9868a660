"""examples/spade_llm_agent.py runs end to end in its own process, with no network.

Where the machine lets an unprivileged user make a network namespace, the example
runs in one with only loopback up: LiteLLM and spade_llm must not reach out (and
must not hang trying).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "spade_llm_agent.py"
TIMEOUT = 120
EXPECTED = [
    "user: remember that the staging database password rotates every 30 days",
    "assistant: Stored as memory 1 in category fact.",
    "assistant: I recall: - [fact] the staging database password rotates every 30 days (id 1)",
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
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    for name in (
        "SPADE_MEMORY_XMPP_HOST",
        "SPADE_MEMORY_XMPP_PORT",
        "LITELLM_LOCAL_MODEL_COST_MAP",
    ):
        env.pop(name, None)
    prefix = offline_prefix()
    done = subprocess.run(
        [*prefix, sys.executable, str(SCRIPT)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    where = "without network" if prefix else "with the network of this machine"
    assert done.returncode == 0, f"{where}:\n{done.stdout}{done.stderr}"
    lines = done.stdout.splitlines()
    for expected in EXPECTED:
        assert any(line.startswith(expected) for line in lines), f"{expected!r} not in {lines}"
    assert list(tmp_path.iterdir()) == []  # nothing left where it ran
