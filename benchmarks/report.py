"""Benchmark output: JSON result files and the sections of BENCHMARKS.md.

Each benchmark owns sections of ``BENCHMARKS.md`` between HTML comment markers
(``<!-- locomo:start -->`` ... ``<!-- locomo:end -->``); rewriting a section leaves
everything outside its markers as it was. Standard library only.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .data import repo_root

__all__ = [
    "BENCHMARKS_MD",
    "RESULTS_DIR",
    "command_line",
    "configure_logging",
    "load_average",
    "machine_note",
    "replace_section",
    "revision",
    "run_note",
    "today",
    "update_markdown",
    "write_json",
]

BENCHMARKS_MD = repo_root() / "BENCHMARKS.md"
RESULTS_DIR = repo_root() / "benchmarks" / "results"

_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


def _markers(name: str) -> tuple[str, str]:
    if not _NAME.fullmatch(name):
        raise ValueError(f"section name must be lower-case letters, digits and '-', got {name!r}")
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def replace_section(document: str, name: str, body: str, *, heading: str) -> str:
    """``document`` with the text between ``name``'s markers replaced by ``body``.

    A document without those markers gets a new ``## heading`` section at its end.

    Raises:
        ValueError: the markers are unbalanced or in the wrong order.
    """
    start, end = _markers(name)
    first = document.find(start)
    last = document.find(end)
    if first == -1 and last == -1:
        prefix = document.rstrip("\n")
        prefix = f"{prefix}\n\n" if prefix else ""
        return f"{prefix}## {heading}\n\n{start}\n{body.strip()}\n{end}\n"
    if first == -1 or last == -1 or last < first or document.count(start) != 1:
        raise ValueError(f"BENCHMARKS.md has broken {name} markers; fix them by hand")
    return document[: first + len(start)] + "\n" + body.strip() + "\n" + document[last:]


def update_markdown(name: str, body: str, *, heading: str, path: Path | None = None) -> Path:
    """Rewrite section ``name`` of BENCHMARKS.md (created if missing); returns its path."""
    target = path or BENCHMARKS_MD
    current = target.read_text(encoding="utf-8") if target.exists() else "# Benchmarks\n"
    updated = replace_section(current, name, body, heading=heading)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(updated, encoding="utf-8")
    os.replace(tmp, target)
    return target


def configure_logging(verbose: bool) -> None:
    """Warnings on stderr; with ``verbose`` also the benchmarks' own progress lines."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("benchmarks").setLevel(logging.INFO if verbose else logging.WARNING)


def load_average() -> float | None:
    """The one-minute load average, where the system reports one."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def revision() -> str:
    """The git commit of the working tree (``+changes`` when it has uncommitted edits)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=repo_root(),
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo_root(),
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}+changes" if status else commit


def machine_note() -> str:
    """One line on the machine: OS, cores, Python."""
    cores = os.cpu_count() or 0
    return (
        f"{platform.system()} {platform.machine()}, {cores} CPU cores, "
        f"Python {platform.python_version()}"
    )


def command_line(module: str, argv: Sequence[str]) -> str:
    """The command that reproduces this run, without ``--write-md`` and ``--note``."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--write-md" or arg.startswith("--note="):
            continue
        elif arg == "--note":
            skip = True
        else:
            kept.append(arg)
    return shlex.join([".venv/bin/python", "-m", module, *kept])


def run_note(note: str = "") -> str:
    """When, where and on what this run was made, for a BENCHMARKS.md section."""
    load = load_average()
    busy = f" (1-minute load average {load:.1f} at the end)" if load is not None else ""
    extra = f" {note.strip()}" if note.strip() else ""
    commit = revision()
    source = f", spade_memory at {commit}" if commit != "unknown" else ""
    return f"Run {today()} on {machine_note()}{busy}{source}.{extra}"


def today() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")


def write_json(
    benchmark: str, payload: Mapping[str, Any], *, directory: Path | None = None
) -> Path:
    """Write ``payload`` to ``benchmarks/results/<benchmark>-<UTC time>.json``."""
    folder = directory or RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    target = folder / f"{benchmark}-{stamp}.json"
    document = {
        "benchmark": benchmark,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_note(),
        "load_average_at_end": load_average(),
        "revision": revision(),
        "argv": sys.argv[1:],
        **payload,
    }
    target.write_text(json.dumps(document, ensure_ascii=False, indent=1), encoding="utf-8")
    return target
