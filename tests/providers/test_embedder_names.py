"""Endpoint embedders named on the command line: ``--embedder openai:MODEL@URL``."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from spade_memory.cli import build_parser, main
from spade_memory.config import MemoryConfig
from spade_memory.manager import MemoryManager
from spade_memory.spade.demo import DemoOptions, options_from, run_demo
from spade_memory.testing.embedding_server import EmbeddingServer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_names_are_checked_when_parsed(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["demo", "--embedder", "openai:nomic-embed-text@http://h:1/v1"])
    assert options_from(args).embedder == "openai:nomic-embed-text@http://h:1/v1"
    args = parser.parse_args(["search", "a@b", "q", "--embedder", "openai:m@http://h/v1"])
    assert args.embedder == "openai:m@http://h/v1"
    for command in (["demo"], ["stats", "a@b"]):
        with pytest.raises(SystemExit):
            parser.parse_args([*command, "--embedder", "openai:no-url"])
        assert "openai:MODEL@URL" in capsys.readouterr().err


async def test_the_demo_stops_in_one_line_when_the_endpoint_is_down(
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = f"openai:m@http://127.0.0.1:{free_port()}/v1"
    assert await run_demo(DemoOptions(in_memory=True, embedder=name)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the embedding endpoint does not answer" in err
    assert "dimensions=N" not in err  # an option of the library, not of the demo


async def test_a_command_uses_the_named_endpoint(
    memory_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with EmbeddingServer(dim=16) as server:
        name = f"openai:{server.model}@{server.base_url}"
        config = MemoryConfig(root=memory_root, embedder=name)
        async with await MemoryManager.open("alice@localhost", config) as memory:
            await memory.store("The Porto office opens at 9")
            await memory.flush()
        requests = server.requests
        # the command runs its own event loop: in a thread, while this one serves
        status = await asyncio.to_thread(
            main,
            ["search", "alice@localhost", "Porto office", "--root", str(memory_root),
             "--embedder", name, "--json"],
        )  # fmt: skip
        assert status == 0, capsys.readouterr().err
        assert "opens at 9" in capsys.readouterr().out
        assert server.requests > requests  # the query was embedded by the endpoint
    # the endpoint is down now: its vectors tell their length, nothing is asked
    argv = ["stats", "alice@localhost", "--root", str(memory_root), "--embedder", name]
    status = await asyncio.to_thread(main, argv)
    assert status == 0, capsys.readouterr().err


def test_a_command_says_what_to_do_when_a_new_endpoint_is_down(
    memory_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"openai:m@http://127.0.0.1:{free_port()}/v1"
    export = memory_root.parent / "export.json"
    export.write_text('{"format": "spade_memory.export", "version": 2, "memories": []}')
    argv = ["import", "dave@localhost", str(export), "--root", str(memory_root)]
    status = main([*argv, "--embedder", name])
    err = capsys.readouterr().err
    assert status == 1 and err.count("\n") == 1
    assert "cannot learn the vector length of m" in err
    assert "start the server, or give another --embedder" in err
    assert "dimensions=N" not in err  # an option of the library, not of the command
