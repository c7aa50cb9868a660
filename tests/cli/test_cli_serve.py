"""``spade-memory serve``: the inspector of a whole root, in a process of its own."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from factories import REPO, child_env, hashing_config

from spade_memory.identity import AgentIdentity
from spade_memory.manager import MemoryManager
from spade_memory.storage.base import BaseMemoryStore

ALICE = "alice@localhost"


async def build(root: Path) -> None:
    async with await MemoryManager.open(ALICE, hashing_config(root)) as memory:
        await memory.store("Frida Lund repairs the looms on Fridays", category="fact")


def _get(url: str, **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.parametrize(
    ("stop", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)], ids=["SIGINT", "SIGTERM"]
)
def test_serve_shows_every_agent_of_a_root(
    tmp_path: Path, stop: signal.Signals, status: int
) -> None:
    root = tmp_path / "memory"
    asyncio.run(build(root))
    with subprocess.Popen(
        [sys.executable, "-m", "spade_memory.cli", "serve", "--root", str(root), "--port", "0"],
        cwd=REPO,
        env={**child_env(), "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as server:
        _look(server, root, stop)
    assert server.returncode == status
    # the memory it opened was closed: nothing holds it open any more, and closing
    # it removed its open marker and SQLite's write-ahead log
    database = root / AgentIdentity.of(ALICE).database_name
    assert not BaseMemoryStore.open_in_any_process(database)
    assert not list((root / ".open").glob(f"{database.name}.*"))
    assert not Path(f"{database}-wal").exists()


def _look(server: subprocess.Popen[str], root: Path, stop: signal.Signals) -> None:
    """What the running server shows; then stop it with ``stop`` (SIGINT as Ctrl-C
    does, SIGTERM as ``kill`` does)."""
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        found = re.search(r"on (http://127\.0\.0\.1:\d+)/", line)
        assert found, line + (server.stderr.read() if server.poll() is not None else "")
        url = found.group(1)
        status, body = _get(f"{url}/?format=json")
        assert status == 200
        (agent,) = json.loads(body)["agents"]
        assert agent["jid"] == ALICE and agent["memories"] == 1
        stem = AgentIdentity.of(ALICE).stem
        status, page = _get(f"{url}/agents/{stem}/memories")
        assert status == 200 and "Frida Lund repairs the looms" in page
        assert BaseMemoryStore.open_in_any_process(root / AgentIdentity.of(ALICE).database_name)
        status, body = _get(f"{url}/search?q=looms&format=json")
        assert status == 200
        assert [r["agent"] for r in json.loads(body)["results"]] == [ALICE]
        status, _ = _get(f"{url}/", Host="rebound.example")
        assert status == 403
    finally:
        server.send_signal(stop)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            try:
                _, said = server.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                _, said = server.communicate()
            raise AssertionError(
                f"the server did not stop on {stop.name}; it said:\n{said}"
            ) from None


@pytest.mark.parametrize("args", [["--root", "nowhere"]])
def test_serve_refuses_a_missing_root(tmp_path: Path, args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spade_memory.cli", "serve", *args, "--port", "0"],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "no memory root" in done.stderr
