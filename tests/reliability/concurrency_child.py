"""Worker processes for the multi-process concurrency test.

Run as ``python concurrency_child.py '<json list of specs>'``. Each spec holds
``root``, ``agents`` (the JIDs that process alone uses), ``shared`` (a JID every
process uses at once), ``ops`` per agent, ``seed``, ``start`` (first sequence
number) and ``latencies`` (a file for the operation timings).

It imports everything, prints ``{"state": "WAITING"}``, waits for a line on stdin,
then forks one worker process per spec, so that every worker opens its memories at
the same moment. Workers print one JSON object per line: ``{"ack": "store", "jid",
"id", "seq"}``, ``{"ack": "forget", "jid", "id"}``, ``{"ack": "note", "jid",
"conversation", "seq"}`` and ``{"error": ...}`` for any exception that reached a
caller. Last comes ``{"exits": [<status of each worker>]}`` (0 when it succeeded).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from rel_support import fork_run, memory_text, note_text, token

from spade_memory.config import MemoryConfig
from spade_memory.manager import MemoryManager


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


async def work(
    manager: MemoryManager,
    rng: random.Random,
    ops: int,
    counter: list[int],
    latencies: dict[str, list[float]],
) -> None:
    mine: list[int] = []
    for _ in range(ops):
        roll = rng.random()
        counter[0] += 1
        seq = counter[0]
        if roll < 0.4 or not mine:
            op = "store"
        elif roll < 0.6:
            op = "search"
        elif roll < 0.7:
            op = "list"
        elif roll < 0.8:
            op = "forget"
        else:
            op = "note"
        started = time.perf_counter()
        try:
            if op == "store":
                memory = await manager.store(memory_text(seq))
                mine.append(memory.id)
                emit({"ack": "store", "jid": manager.jid, "id": memory.id, "seq": seq})
            elif op == "search":
                await manager.search(token(rng.randrange(1, seq + 1)), limit=5)
            elif op == "list":
                await manager.list(limit=10)
            elif op == "forget":
                memory_id = mine.pop(rng.randrange(len(mine)))
                await manager.forget(memory_id)
                emit({"ack": "forget", "jid": manager.jid, "id": memory_id})
            else:
                conversation = f"conv-{rng.randrange(3)}"
                await manager.add_note(conversation, note_text(seq))
                emit({"ack": "note", "jid": manager.jid, "conversation": conversation, "seq": seq})
        except Exception as exc:
            emit({"error": f"{type(exc).__name__}: {exc}", "op": op})
            continue
        latencies.setdefault(op, []).append(time.perf_counter() - started)


async def main(spec: dict[str, Any]) -> None:
    config = MemoryConfig(root=Path(spec["root"]), embedder="hashing")
    jids = [*spec["agents"], spec["shared"]]
    managers = await asyncio.gather(*(MemoryManager.open(jid, config) for jid in jids))
    rng = random.Random(spec["seed"])
    counter = [int(spec["start"])]
    latencies: dict[str, list[float]] = {}
    try:
        await asyncio.gather(
            *(
                work(manager, random.Random(rng.random()), spec["ops"], counter, latencies)
                for manager in managers
            )
        )
        for manager in managers:
            await manager.flush()
    finally:
        for manager in managers:
            await manager.aclose()
    Path(spec["latencies"]).write_text(json.dumps(latencies))


def serve(specs: list[dict[str, Any]]) -> None:
    emit({"state": "WAITING"})
    sys.stdin.readline()
    pids = []
    for spec in specs:
        pids.append(fork_run(main, spec))
    emit({"exits": [os.waitpid(pid, 0)[1] for pid in pids]})


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
