"""Open and close many times: nothing is left behind.

Managers are opened, used and closed again and again (in memory and on disk), and
LLM agents are started and stopped on the embedded XMPP server. Afterwards there
must be no ``ResourceWarning``, no extra thread, no extra open file descriptor and
no task still pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rel_support import sized
from spade.container import Container

from spade_memory.config import MemoryConfig
from spade_memory.errors import StoreClosedError
from spade_memory.manager import MemoryManager
from spade_memory.spade.llm_agent import LLMAgent
from spade_memory.testing.scripted_llm import ScriptedLLM
from spade_memory.testing.xmpp_server import EmbeddedXMPPServer

# Every test here repeats its cycle hundreds of times: seconds each.
pytestmark = pytest.mark.slow

MEMORY_CYCLES = sized(1_000, 5_000)
FILE_CYCLES = sized(200, 1_000)
AGENT_CYCLES = 20


@dataclass(frozen=True)
class Usage:
    threads: frozenset[int]
    descriptors: frozenset[str]
    tasks: int


def usage() -> Usage:
    """What the process holds: threads (bar asyncio's worker pool), fds, pending tasks."""
    gc.collect()
    threads = frozenset(
        t.ident or 0 for t in threading.enumerate() if not t.name.startswith("asyncio_")
    )
    descriptors = frozenset(
        f"{fd}->{_target(fd)}" for fd in os.listdir("/proc/self/fd") if _target(fd) is not None
    )
    # slixmpp keeps one filter task per client after it disconnects (its own leftover,
    # not this package's); every other task counts.
    tasks = [t for t in asyncio.all_tasks() if _name(t) != "XMLStream.run_filters"]
    return Usage(threads, descriptors, len(tasks))


def _name(task: asyncio.Task[object]) -> str:
    return getattr(task.get_coro(), "__qualname__", "")


def _target(fd: str) -> str | None:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/self/fd/{fd}")
    return None


@contextlib.contextmanager
def no_resource_warnings() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield caught
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == [], leaks[:3]


async def cycle(times: int, one: Callable[[int], Awaitable[None]], *, warm_up: int = -1) -> None:
    """``one(0)`` to ``one(times - 1)`` leave the process holding what it held before.

    ``one(warm_up)`` runs first and does what the cycles do, so what is made once for
    the process (the tokenizer, the embedding pools, first files) counts as before.
    """
    await one(warm_up)
    with warnings.catch_warnings():  # what earlier tests left behind is not these cycles'
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    with no_resource_warnings():
        before = usage()
        for index in range(times):
            await one(index)
        after = usage()
        # A stopped agent's behaviours end within their receive timeout; a closed
        # connection's thread ends right after its close returns.
        for _ in range(60):
            if after.tasks <= before.tasks and after.threads <= before.threads:
                break
            await asyncio.sleep(0.05)
            after = usage()
    # fewer is no leak: a thread of the warm-up may end only during the cycles
    assert after.threads <= before.threads, "threads were left running"
    assert after.descriptors == before.descriptors, (
        f"file descriptors were left open: {sorted(after.descriptors - before.descriptors)[:5]}"
    )
    # fewer is no leak: a task of the warm-up cycle may end only during the cycles
    assert after.tasks <= before.tasks, "tasks were left pending"


async def use(manager: MemoryManager, index: int) -> None:
    memory = await manager.store(f"cycle {index} stored this")
    await manager.search("cycle stored", limit=3)
    await manager.add_note("conv", f"cycle {index}")
    if index % 2:
        await manager.forget(memory.id)
    await manager.flush()


async def test_in_memory_open_close_cycles() -> None:
    config = MemoryConfig(in_memory=True, embedder="hashing")

    async def one(index: int) -> None:
        manager = await MemoryManager.open(f"cycler{index % 7}@localhost", config)
        if index % 10 == 0:
            await use(manager, index)
        await manager.aclose()
        with pytest.raises(StoreClosedError):
            await manager.store("after close")

    await cycle(MEMORY_CYCLES, one, warm_up=-10)  # -10 % 10 == 0: it uses its memory


async def test_file_open_close_cycles(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path / "memory", embedder="hashing")

    async def one(index: int) -> None:
        async with await MemoryManager.open(f"cycler{index % 5}@localhost", config) as manager:
            if index % 4 == 0:
                await use(manager, index)

    await cycle(FILE_CYCLES, one, warm_up=-4)  # uses cycler1's memory: cycler0's notes hold
    async with await MemoryManager.open("cycler0@localhost", config) as manager:
        assert len(await manager.notes("conv")) == len(range(0, FILE_CYCLES, 20))


async def test_failed_opens_leave_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    config = MemoryConfig(root=root, embedder="hashing")
    async with await MemoryManager.open("owner@localhost", config) as memory:
        await memory.add_note("conv", "creates the interaction file")
    (root / "backup").mkdir(exist_ok=True)
    json_path = next(root.glob("owner_*_interactions.json"))
    json_path.write_text("{ damaged")

    async def one(index: int) -> None:
        with contextlib.suppress(Exception):
            await MemoryManager.open("owner@localhost", config)  # damaged: refused
        json_path.write_text("{ damaged")  # damaged again for the next round

    await cycle(50, one)


async def test_agent_start_stop_cycles(tmp_path: Path) -> None:
    Container().reset()
    async with EmbeddedXMPPServer(folder=tmp_path / "xmpp") as server:
        config = MemoryConfig(root=tmp_path / "memory", embedder="hashing")
        llm = ScriptedLLM()
        name = f"cycler-{uuid.uuid4().hex[:8]}"

        async def one(index: int) -> None:
            agent = LLMAgent(server.jid(name), "secret", llm=llm, memory=config, port=server.port)
            await asyncio.wait_for(agent.start(auto_register=True), 30)
            await agent.memory.store(f"started {index}")
            await agent.stop()
            with pytest.raises(StoreClosedError):
                _ = agent.memory

        await cycle(AGENT_CYCLES, one)
        await llm.aclose()
