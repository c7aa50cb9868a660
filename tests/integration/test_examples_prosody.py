"""The examples against a real XMPP server (Prosody), as their docstrings promise.

Runs when ``SPADE_MEMORY_TEST_XMPP_PORT`` names a running Prosody
(``bash .ci/prosody.sh start`` prints it); skipped otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_examples_run import CASES, check, run_example


@pytest.mark.prosody
@pytest.mark.parametrize(("script", "expected"), CASES)
def test_example_runs_on_a_real_server(script: str, expected: list[str], tmp_path: Path) -> None:
    port = os.environ.get("SPADE_MEMORY_TEST_XMPP_PORT")
    if not port:
        pytest.skip("no Prosody: set SPADE_MEMORY_TEST_XMPP_PORT (bash .ci/prosody.sh start)")
    host = os.environ.get("SPADE_MEMORY_TEST_XMPP_HOST", "localhost")
    done = run_example(script, tmp_path, "--xmpp-host", host, "--xmpp-port", port)
    check(done, [line.replace("@localhost", f"@{host}") for line in expected])
