"""The spade_llm baseline: its own agent memory on the same LoCoMo turns and questions.

spade_llm (``pip install spade-llm``) keeps long-term memories in
``spade_llm.memory.AgentBaseMemory`` over its SQLite backend and finds them with
``search_memories(query, limit)``. It pulls in litellm and many other packages,
so it lives in its own virtual environment and this module runs there as a
subprocess (it imports nothing from spade_memory)::

    python3 -m venv .venv-bench
    .venv-bench/bin/pip install spade-llm==0.3.0 greenlet
    .venv-bench/bin/python -m benchmarks.spade_llm_baseline --out rankings.json

``python -m benchmarks.locomo --systems spade_llm`` does that for you. The
output file holds, per conversation, the dialog ids spade_llm returned for each
question (in the order of :func:`benchmarks.data.load_locomo`) and the timings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .data import Conversation, load_locomo, repo_root, resolve_data_dir

__all__ = [
    "BASELINE_VENV_PYTHON",
    "BaselineUnavailable",
    "main",
    "run_baseline",
    "run_in_subprocess",
]

BASELINE_VENV_PYTHON = repo_root() / ".venv-bench" / "bin" / "python"
_AGENT = "bench@localhost"


class BaselineUnavailable(RuntimeError):
    """The spade_llm environment is missing or the baseline run failed."""


async def _run_conversation(conversation: Conversation, folder: Path, limit: int) -> dict[str, Any]:
    from spade_llm.memory import AgentBaseMemory  # type: ignore[import-not-found]

    memory = AgentBaseMemory(_AGENT, memory_path=str(folder))
    dia_ids: dict[str, str] = {}
    try:
        started = time.perf_counter()
        for session in conversation.sessions:
            for turn in session.turns:
                memory_id = await memory.store_memory(
                    "fact", turn.content, context=session.date or None
                )
                dia_ids[str(memory_id)] = turn.dia_id
        index_seconds = time.perf_counter() - started
        rankings: list[list[str]] = []
        seconds: list[float] = []
        for question in conversation.questions:
            started = time.perf_counter()
            found = await memory.search_memories(question.text, limit=limit)
            seconds.append(time.perf_counter() - started)
            rankings.append([dia_ids.get(str(entry.id), "") for entry in found])
    finally:
        await memory.cleanup()
    return {
        "sample_id": conversation.sample_id,
        "index_seconds": index_seconds,
        "query_seconds": seconds,
        "rankings": rankings,
    }


async def run_baseline(
    conversations: Sequence[Conversation], *, limit: int = 10
) -> list[dict[str, Any]]:
    """Store every turn in a fresh spade_llm memory per conversation and ask every question."""
    results = []
    for conversation in conversations:
        with tempfile.TemporaryDirectory(prefix="spade-llm-bench-") as folder:
            results.append(await _run_conversation(conversation, Path(folder), limit))
    return results


def run_in_subprocess(
    *,
    python: Path,
    data_dir: Path,
    conversations: int | None,
    limit: int = 10,
    timeout: float = 1800.0,
) -> dict[str, Any]:
    """Run this module with ``python`` (the spade_llm environment) and return its output.

    Raises:
        BaselineUnavailable: ``python`` does not exist, or the run failed.
    """
    if not python.exists():
        raise BaselineUnavailable(
            f"no spade_llm environment at {python}; create it with "
            "'python3 -m venv .venv-bench && .venv-bench/bin/pip install spade-llm==0.3.0 "
            "greenlet', or pass --spade-llm-python"
        )
    with tempfile.TemporaryDirectory(prefix="spade-llm-out-") as folder:
        out = Path(folder) / "rankings.json"
        command = [
            str(python),
            "-m",
            "benchmarks.spade_llm_baseline",
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--limit",
            str(limit),
        ]
        if conversations is not None:
            command += ["--conversations", str(conversations)]
        env = dict(os.environ)
        # litellm would otherwise fetch its model price list over the network on import.
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        completed = subprocess.run(
            command,
            cwd=repo_root(),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if completed.returncode != 0:
            tail = "\n".join(completed.stderr.strip().splitlines()[-15:])
            raise BaselineUnavailable(
                f"the spade_llm baseline failed (exit {completed.returncode}):\n{tail}"
            )
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        return result


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spade-llm")
    except PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the baseline and write its rankings as JSON to ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spade_llm_baseline")
    parser.add_argument(
        "--data", help="data folder (default: $SPADE_MEMORY_DATA or ../shared/data)"
    )
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument("--limit", type=int, default=10, help="results per search")
    parser.add_argument("--out", required=True, help="where to write the JSON rankings")
    args = parser.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    conversations = load_locomo(resolve_data_dir(args.data), limit=args.conversations)
    results = asyncio.run(run_baseline(conversations, limit=args.limit))
    payload = {"spade_llm_version": _version(), "conversations": results}
    Path(args.out).write_text(json.dumps(payload), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
