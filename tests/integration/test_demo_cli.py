"""``spade-memory demo`` run as a separate process, and the CLI around it.

The demo's agents talk to each other over the XMPP socket of an embedded server,
exactly as a user runs it. ``--llm-url`` is exercised against an OpenAI-compatible
HTTP server on 127.0.0.1 answering with the scripted model.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from factories import child_env, run_python

from spade_memory.cli import COMMANDS, build_parser, main
from spade_memory.llm import ChatMessage
from spade_memory.spade import demo
from spade_memory.testing.scripted_llm import ScriptedLLM

TIMEOUT = 90


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_python(*args, cwd=cwd, timeout=TIMEOUT)


@pytest.mark.slow
def test_demo_stores_restarts_and_recalls_within_a_minute(tmp_path: Path) -> None:
    began = time.monotonic()
    done = run("-m", "spade_memory.cli", "demo", cwd=tmp_path)
    took = time.monotonic() - began
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert took < 60
    assert "(coordinator's LLM called: store_memory)" in out
    assert "(researcher's LLM called: remember_interaction_info)" in out
    assert "all agents stopped; their memories are closed" in out
    assert "5/5 facts recalled after the restart" in out and "OK" in out
    recall = out.split("Part 2")[1]
    assert "the Lisbon office opens on 3 March" in recall
    assert "weekly summaries" in recall
    assert list(tmp_path.iterdir()) == []  # nothing left in the working directory
    temporary = next(line for line in out.splitlines() if "memory root:" in line)
    assert not Path(temporary.split("memory root: ")[1].split(" (")[0]).exists()


@pytest.mark.slow
def test_demo_in_memory_forgets_on_restart(tmp_path: Path) -> None:
    done = run(
        "-m", "spade_memory.cli", "demo", "--in-memory", "--embedder", "hashing", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "in-memory mode: 0/5 facts recalled after the restart (expected none)" in done.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
async def openai_server() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An OpenAI-compatible endpoint on 127.0.0.1 whose model is the ScriptedLLM."""
    requests: list[dict[str, Any]] = []

    async def completions(request: web.Request) -> web.Response:
        payload = await request.json()
        requests.append(payload)
        messages = [ChatMessage.from_openai(m) for m in payload["messages"]]
        answer = await ScriptedLLM().complete(messages, payload.get("tools") or ())
        message: dict[str, Any] = {"role": "assistant", "content": answer.text}
        if answer.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in answer.tool_calls]
        return web.json_response(
            {
                "id": f"chatcmpl-{len(requests)}",
                "object": "chat.completion",
                "model": payload["model"],
                "choices": [
                    {"index": 0, "message": message, "finish_reason": answer.finish_reason}
                ],
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1", requests
    finally:
        await runner.cleanup()


@pytest.mark.slow
async def test_demo_with_an_openai_compatible_endpoint(
    openai_server: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, requests = openai_server
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "spade_memory.cli",
        "demo",
        "--llm-url",
        url,
        "--model",
        "scripted-test",
        "--embedder",
        "hashing",
        "--root",
        str(tmp_path / "kept"),
        cwd=tmp_path,
        env=child_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT)
    out = stdout.decode()
    assert process.returncode == 0, out + stderr.decode()
    assert f"LLM: scripted-test at {url}" in out
    assert "5/5 facts recalled after the restart" in out
    assert f"memory root: {tmp_path / 'kept'}" in out
    assert any(path.name.endswith("_base_memory.db") for path in (tmp_path / "kept").iterdir())
    assert all(r["model"] == "scripted-test" for r in requests)
    offered = {tool["function"]["name"] for tool in requests[0]["tools"]}
    assert {"store_memory", "search_memories", "remember_interaction_info"} <= offered
    roles = [[m["role"] for m in r["messages"]] for r in requests]
    assert all(r[0] == "system" and "system" not in r[1:] for r in roles)


def test_cli_lists_demo_and_refuses_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert "demo" in [command.name for command in COMMANDS]
    assert "demo" in build_parser().format_help()
    assert main([]) == 2
    with pytest.raises(SystemExit, match="--llm-url and --model together"):
        main(["demo", "--llm-url", "http://127.0.0.1:1/v1"])
    with pytest.raises(SystemExit, match="exclude each other"):
        main(["demo", "--root", "x", "--in-memory"])
    with pytest.raises(SystemExit):
        main(["no-such-command"])
    assert "invalid choice" in capsys.readouterr().err


def test_demo_with_an_unreachable_endpoint_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    began = time.monotonic()
    done = run(
        "-m", "spade_memory.cli", "demo", "--llm-url", f"http://127.0.0.1:{port}/v1",
        "--model", "qwen2.5", "--embedder", "hashing", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert time.monotonic() - began < 20
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"cannot reach the LLM server at http://127.0.0.1:{port}/v1" in lines[0]
    assert "leave out --llm-url" in lines[0]
    assert "XMPP" not in done.stdout  # nothing started
    assert list(tmp_path.iterdir()) == []


def test_demo_with_a_root_that_is_a_file_says_so_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("not a folder")
    done = run(
        "-m", "spade_memory.cli", "demo", "--root", "taken", "--embedder", "hashing", cwd=tmp_path
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [f"spade-memory demo: memory root {tmp_path / 'taken'} is a file, not a folder"]
    assert (tmp_path / "taken").read_text() == "not a folder"


async def test_demo_with_an_xmpp_server_that_does_not_answer_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(demo, "START_TIMEOUT", 1.0)
    options = demo.DemoOptions(
        root=tmp_path / "memory", embedder="hashing", xmpp_host="localhost", xmpp_port=port
    )
    assert await demo.run_demo(options) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did not connect to the XMPP server localhost:" in err[0]
