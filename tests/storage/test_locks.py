"""Lock files: cross-platform (no fcntl needed), exclusive, taken only where promised."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from spade_memory.errors import StorageError
from spade_memory.identity import AgentIdentity
from spade_memory.storage import files
from spade_memory.storage.registry import LOCK_NAME, Registry

ROOT = Path(__file__).resolve().parent.parent.parent

# The whole life of a memory on disk, in a Python without fcntl (as on Windows).
NO_FCNTL = textwrap.dedent(
    """
    import asyncio, sys
    sys.modules["fcntl"] = None  # import fcntl raises ImportError from here on
    root = sys.argv[1]

    import spade_memory
    from spade_memory import MemoryConfig, MemoryManager

    async def main() -> None:
        config = MemoryConfig(root=root, embedder=None)
        async with await MemoryManager.open("win@example.org", config) as memory:
            stored = await memory.store("the build server is called hopper")
            await memory.add_note("c1", "asked about the build server")
        async with await MemoryManager.open("win@example.org", config) as memory:
            found = await memory.search("hopper")
            assert [r.memory.id for r in found] == [stored.id], found
            notes = await memory.notes("c1")
            assert [n.content for n in notes] == ["asked about the build server"], notes
        assert sys.modules["fcntl"] is None
        print("ok")

    asyncio.run(main())
    """
)


def test_import_and_a_store_and_note_round_trip_work_without_fcntl(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", NO_FCNTL, str(tmp_path / "memory")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == "ok"
    names = os.listdir(tmp_path / "memory")
    assert any(name.endswith("_interactions.json") for name in names), names


def test_the_lock_is_exclusive_between_threads(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    inside: list[int] = []
    most = 0
    guard = threading.Lock()

    def work() -> None:
        nonlocal most
        for _ in range(20):
            with files.exclusive_lock(lock):
                with guard:
                    inside.append(1)
                    most = max(most, len(inside))
                time.sleep(0.0005)
                with guard:
                    inside.pop()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert most == 1


def test_a_held_lock_makes_the_next_taker_wait(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    taken = threading.Event()
    with files.exclusive_lock(lock):
        thread = threading.Thread(target=lambda: _take(lock, taken))
        thread.start()
        assert not taken.wait(0.2)  # blocked while held
    assert taken.wait(10)  # and taken once released
    thread.join(timeout=10)


def _take(lock: Path, taken: threading.Event) -> None:
    with files.exclusive_lock(lock):
        taken.set()


def test_the_lock_file_is_created_private_and_left_in_place(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with files.exclusive_lock(lock):
        assert lock.exists()
    if os.name == "posix":
        assert lock.exists()  # waiters of other processes share one inode
        assert lock.stat().st_mode & 0o077 == 0


def test_a_symlinked_lock_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    lock = tmp_path / "x.lock"
    lock.symlink_to(target)
    with pytest.raises(StorageError, match="symbolic link"), files.exclusive_lock(lock):
        pass  # pragma: no cover - never entered
    assert target.read_text() == "keep"


def test_a_lock_that_cannot_be_opened_raises_storage_error(tmp_path: Path) -> None:
    (tmp_path / "x.lock").mkdir()
    with (
        pytest.raises(StorageError, match=r"could not open the registry lock .*x\.lock"),
        files.exclusive_lock(tmp_path / "x.lock", what="the registry lock"),
    ):
        pass  # pragma: no cover - never entered


def test_a_new_registration_takes_the_registry_lock(tmp_path: Path) -> None:
    registry = Registry(tmp_path)
    identity = AgentIdentity.of("lock@example.org")
    assert not (tmp_path / LOCK_NAME).exists()
    assert not registry.registered(identity)  # reading takes no lock
    assert not (tmp_path / LOCK_NAME).exists()
    registry.register(identity)
    assert (tmp_path / LOCK_NAME).exists()
