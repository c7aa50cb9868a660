"""A process killed (SIGKILL) between acknowledging stores and deriving their graphs
loses nothing: the next open derives every acknowledged memory, once."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from factories import child_env

from spade_memory.config import MemoryConfig, StorageConfig
from spade_memory.manager import MemoryManager

JID = "crash@localhost"

_CHILD = textwrap.dedent(
    """
    import asyncio, sys, threading
    from pathlib import Path
    from spade_memory.config import MemoryConfig, StorageConfig
    from spade_memory.manager import MemoryManager

    async def main() -> None:
        config = MemoryConfig(
            root=Path(sys.argv[1]), embedder=None,
            storage=StorageConfig(derive_in_background=True, derive_batch_size=16),
        )
        memory = await MemoryManager.open("crash@localhost", config)
        await memory.maintenance.wait()
        stored = await memory.store_many(
            [{"content": f"Gina moved to Town{n} in spring."} for n in range(1500)]
        )
        single = await memory.store("Gina lives in Lyon.")
        print("ACK", stored[0].id, single.id, flush=True)
        threading.Event().wait()  # until SIGKILL

    asyncio.run(main())
    """
)


def _database(root: Path) -> Path:
    found = list(root.glob("*_base_memory.db"))
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("delay", [0.0, 0.4])
async def test_kill_between_ack_and_derivation_loses_nothing(tmp_path: Path, delay: float) -> None:
    root = tmp_path / "memory"
    root.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(root)],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.to_thread(child.stdout.readline)
        assert line.startswith("ACK"), (line, child.stderr.read() if child.stderr else "")
        if delay:
            await asyncio.sleep(delay)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=60)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    assert child.returncode == -signal.SIGKILL
    first, last = (int(part) for part in line.split()[1:])
    with sqlite3.connect(_database(root)) as db:
        left = int(db.execute("SELECT count(*) FROM derive_pending").fetchone()[0])
    if not delay:
        assert left > 0  # killed before the pipeline caught up
    config = MemoryConfig(root=root, embedder=None, storage=StorageConfig())
    async with await MemoryManager.open(JID, config) as memory:
        await memory.flush()
        assert await memory._engine.base.count_pending_derivations() == 0
        rows = await memory._engine.base.fetchall("SELECT id FROM memories ORDER BY id")
        ids = [int(row[0]) for row in rows]
        assert ids == list(range(first, last + 1))  # every acknowledged store
        counts = await memory._engine.atoms.counts_by_status()
        assert sum(counts.values()) == len(ids)  # one atom each: none lost, none twice
        assert (await memory.atoms(last))[0].text == "Gina lives in Lyon."
        assert (await memory.check(deep=True)).clean
