"""In-memory mode writes no file anywhere; a file memory keeps jieba's cache under its root.

Child processes run with ``TMPDIR``, ``HOME`` and the working directory set to empty
folders of their own, and store and search Chinese text (which loads jieba's
dictionary, whose 9 MB cache jieba would save in the temporary folder).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a child process each, loading jieba and the embedder

CHILD = """
import asyncio, sys
from spade_memory import MemoryConfig, MemoryManager

root = sys.argv[1]

async def main():
    config = MemoryConfig(in_memory=True) if root == "-" else MemoryConfig(root=root)
    async with await MemoryManager.open("alice@localhost", config) as memory:
        await memory.store("王小红住在北京，她在阿里巴巴工作")
        hits = await memory.search("王小红在哪里工作")
        assert hits and "阿里巴巴" in hits[0].memory.content, hits

asyncio.run(main())
"""


def run_isolated(tmp_path: Path, root: str) -> dict[str, Path]:
    """Run the child with empty temporary, home and working folders; returns them."""
    folders = {name: tmp_path / name for name in ("tmp", "home", "cwd")}
    for folder in folders.values():
        folder.mkdir()
    env = {
        **os.environ,
        "TMPDIR": str(folders["tmp"]),
        "HOME": str(folders["home"]),
        "XDG_CACHE_HOME": str(folders["home"] / ".cache"),
        "XDG_DATA_HOME": str(folders["home"] / ".local" / "share"),
    }
    env.pop("SPADE_MEMORY_ROOT", None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, root],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=folders["cwd"],
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return folders


def files_under(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def test_in_memory_mode_writes_nothing_anywhere(tmp_path: Path) -> None:
    folders = run_isolated(tmp_path, "-")
    assert {name: files_under(folder) for name, folder in folders.items()} == {
        "tmp": [],
        "home": [],
        "cwd": [],
    }


def test_a_file_memory_keeps_jiebas_cache_under_its_root(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    folders = run_isolated(tmp_path, str(root))
    assert files_under(folders["tmp"]) == []
    assert files_under(folders["cwd"]) == []
    caches = list((root / "cache").glob("jieba-*.cache"))
    assert len(caches) == 1 and caches[0].stat().st_size > 1_000_000
