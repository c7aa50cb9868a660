"""A memory left open never keeps its process alive, and loses nothing it acknowledged.

Child processes open a memory, store, and leave without closing it: by an uncaught
exception, by ``sys.exit(3)`` and by returning from ``asyncio.run``. Each must exit
promptly with its own exit code, the stored memory must be there when the memory is
opened again, and in in-memory mode nothing may be printed. In process: the
connections' threads are daemons, a manager collected unclosed warns and is closed,
and the end of ``asyncio.run`` closes a manager left open.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from spade_memory.config import MemoryConfig
from spade_memory.manager import MemoryManager

AGENT = "alice@localhost"
TEXT = "The staging password rotates every 30 days"
EXIT_WITHIN = 60.0  # seconds; a hung process is killed by then (it exits in about two)

CHILD = """
import asyncio, sys
from spade_memory import MemoryConfig, MemoryManager

how, root, text = sys.argv[1], sys.argv[2], sys.argv[3]

async def main():
    if root == "-":
        config = MemoryConfig(in_memory=True, embedder="hashing")
    else:
        config = MemoryConfig(root=root, embedder="hashing")
    if how == "backend":
        from spade_llm.memory.backends.base import MemoryEntry
        from spade_memory.integrations.spade_llm_backend import SpadeMemoryBackend
        backend = SpadeMemoryBackend(jid="alice@localhost", config=config)
        await backend.initialize()
        await backend.store_memory(
            MemoryEntry(agent_id="alice@localhost", category="fact", content=text)
        )
        return
    memory = await MemoryManager.open("alice@localhost", config)
    await memory.store(text)
    await memory.search(text)
    if how == "raise":
        raise RuntimeError("left by an uncaught exception")
    if how == "exit":
        sys.exit(3)

asyncio.run(main())
"""


def run_child(how: str, root: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-c", CHILD, how, root, TEXT],
            capture_output=True,
            text=True,
            timeout=EXIT_WITHIN,
        )
    except subprocess.TimeoutExpired as exc:  # pragma: no cover - the failure itself
        pytest.fail(f"the process left with {how!r} did not exit: {exc}")


async def stored_contents(root: Path) -> list[str]:
    config = MemoryConfig(root=root, embedder="hashing")
    async with await MemoryManager.open(AGENT, config) as memory:
        return [memory_.content for memory_ in await memory.list(limit=10)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "code"), [("raise", 1), ("exit", 3), ("return", 0), ("backend", 0)]
)
async def test_a_file_memory_left_open_exits_and_keeps_its_store(
    tmp_path: Path, how: str, code: int
) -> None:
    done = run_child(how, str(tmp_path))
    assert done.returncode == code, done.stderr
    assert "Event loop is closed" not in done.stderr
    assert await stored_contents(tmp_path) == [TEXT]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["return", "backend"])
def test_an_in_memory_memory_left_open_exits_silently(tmp_path: Path, how: str) -> None:
    done = run_child(how, "-")
    assert (done.returncode, done.stderr) == (0, "")
    assert list(tmp_path.iterdir()) == []


def memory_threads() -> set[threading.Thread]:
    """Threads bar the main one and asyncio's executor (joined by ``asyncio.run``)."""
    return {
        t
        for t in threading.enumerate()
        if t is not threading.main_thread() and not t.name.startswith("asyncio_")
    }


async def test_the_threads_of_an_open_memory_never_keep_the_process_alive(
    tmp_path: Path,
) -> None:
    before = memory_threads()
    config = MemoryConfig(root=tmp_path, embedder="hashing")
    async with await MemoryManager.open(AGENT, config) as memory:
        await memory.store(TEXT)
        started = memory_threads() - before
        assert started
        assert all(thread.daemon for thread in started), started


def test_the_end_of_asyncio_run_closes_a_memory_left_open(tmp_path: Path) -> None:
    opened: list[MemoryManager] = []

    async def main() -> None:
        memory = await MemoryManager.open(AGENT, MemoryConfig(root=tmp_path, embedder="hashing"))
        opened.append(memory)
        await memory.store(TEXT)

    with pytest.warns(ResourceWarning, match="left open when its event loop ended"):
        asyncio.run(main())
    assert opened[0].closed
    # Closed properly: the write-ahead log was checkpointed and removed.
    assert [path.name for path in tmp_path.glob("*-wal")] == []
    assert asyncio.run(stored_contents(tmp_path)) == [TEXT]


def closing() -> bool:
    """Whether a task other than the current one still runs (a close under way: the
    memory is ``closed`` from its start)."""
    return bool(asyncio.all_tasks() - {asyncio.current_task()})


async def test_a_memory_collected_unclosed_warns_and_is_closed(tmp_path: Path) -> None:
    memory = await MemoryManager.open(AGENT, MemoryConfig(in_memory=True, embedder="hashing"))
    await memory.store(TEXT)
    engine = memory.engine
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del memory
        gc.collect()
        for _ in range(200):  # asyncio closes it on the loop, after collection
            if engine.closed and not closing():
                break
            await asyncio.sleep(0.01)
    assert engine.closed
    assert not closing(), "the close did not finish"
    assert any(
        issubclass(w.category, ResourceWarning) and "deleted before being closed" in str(w.message)
        for w in caught
    ), [str(w.message) for w in caught]


def test_a_close_cut_short_by_the_end_of_the_loop_still_closes_the_connections(
    tmp_path: Path,
) -> None:
    before = memory_threads()

    async def main() -> None:
        memory = await MemoryManager.open(AGENT, MemoryConfig(root=tmp_path, embedder="hashing"))
        await memory.store(TEXT)
        close = asyncio.create_task(memory.aclose())
        await asyncio.sleep(0)
        assert not close.done()  # under way (finishing the pending work): cancelled now

    asyncio.run(main())
    started = memory_threads() - before
    for thread in started:
        thread.join(10)
    assert [thread.name for thread in started if thread.is_alive()] == [], (
        "a connection was left open (its thread still runs)"
    )
    assert list((tmp_path / ".open").iterdir()) == [], "the open marker was left held"
    assert asyncio.run(stored_contents(tmp_path)) == [TEXT]
