"""spade_llm's own memory tests, run against :class:`SpadeMemoryBackend`.

spade_llm's repository holds ``tests/test_memory`` (tests of ``AgentBaseMemory``, its
backends and its tools). This runner copies those tests from a spade_llm checkout
into a temporary folder at run time (nothing of them is kept in this project), and
runs them with pytest and the plug-in :mod:`benchmarks.spade_llm_swap`, which only
swaps spade_llm's SQLite backend class for spade_memory's::

    git clone https://github.com/sosanzma/spade_llm
    python -m benchmarks.spade_llm_suite --source spade_llm [-- -k sqlite]

``--source`` is the checkout (a work tree, or a bare git directory whose ``HEAD`` is
read). ``--no-swap`` runs the same tests on spade_llm's own backend. Arguments after
``--`` go to pytest. The exit status is pytest's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path

from .data import repo_root

__all__ = ["copy_tests", "main", "run_suite"]

_TESTS = "tests/test_memory"
_PYTEST_INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"


def copy_tests(source: Path, target: Path) -> Path:
    """Copy spade_llm's ``tests/test_memory`` from ``source`` into ``target``.

    Raises:
        FileNotFoundError: ``source`` holds no ``tests/test_memory``.
    """
    tree = source / _TESTS
    if tree.is_dir():
        shutil.copytree(tree, target / _TESTS)
    else:
        archive = subprocess.run(
            ["git", "-C", str(source), "archive", "HEAD", _TESTS],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise FileNotFoundError(
                f"{source} is neither a spade_llm checkout nor its git directory "
                f"(no {_TESTS}): {archive.stderr.decode(errors='replace').strip()}"
            )
        with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
            tar.extractall(target, filter="data")
    (target / "tests" / "__init__.py").touch()
    (target / "pytest.ini").write_text(_PYTEST_INI, encoding="utf-8")
    return target / _TESTS


def run_suite(source: Path, *, swap: bool = True, pytest_args: Sequence[str] = ()) -> int:
    """Run spade_llm's memory tests from ``source``; returns pytest's exit status."""
    with tempfile.TemporaryDirectory(prefix="spade_llm_suite_") as folder:
        work = Path(folder)
        tests = copy_tests(source, work)
        command = [sys.executable, "-m", "pytest", str(tests), "-q", "-p", "no:cacheprovider"]
        if swap:
            command += ["-p", "benchmarks.spade_llm_swap"]
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(repo_root()), environment.get("PYTHONPATH")])
        )
        environment.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        return subprocess.run(
            [*command, *pytest_args], cwd=work, env=environment, check=False
        ).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="a spade_llm checkout")
    parser.add_argument("--no-swap", action="store_true", help="keep spade_llm's backend")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    return run_suite(args.source, swap=not args.no_swap, pytest_args=args.pytest_args)


if __name__ == "__main__":
    raise SystemExit(main())
