"""A writer process for the crash tests: it stores, changes and forgets memories and
adds interaction notes, printing each acknowledgement as it happens, until the test
kills it with SIGKILL.

Run as ``python crash_child.py``: it imports everything once, then for each JSON
spec read from stdin forks one writer process (so each trial starts at once, not
after seconds of imports), waits for it and prints ``END exit <code>`` or ``END
killed <signal>``. The writer prints ``PID <pid>`` first. The spec holds ``root``, ``jid``,
``start`` (first sequence number), ``count`` (memory operations), ``seed``,
``snapshot_min_changes`` and ``pause``: ``null``, or ``{"file": "faiss" |
"interactions", "phase": "write" | "replace-before" | "replace-after", "nth": k}``
to stop dead (and wait to be killed) in the middle of the ``k``-th atomic write of
that file: half-way through writing the temporary file, just before ``os.replace``
or just after it.

Lines printed by a writer (each flushed at once):

- ``PID <pid>``: the writer started (SIGKILL this process);
- ``READY``: the memory is open;
- ``I M <op> store <seq>`` / ``I M <op> update <id> <seq>`` / ``I M <op> forget <id>``:
  a memory operation is about to start; ``A M <op> [<id>]``: it was acknowledged;
- ``I N <op> <conversation> <seq>`` / ``A N <op>``: the same for a note;
- ``P <file> <phase>``: paused where asked, waiting to be killed;
- ``DONE`` then ``CLOSED``: every operation finished, the memory closed.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rel_support import FileOps, crash_config, fork_run, memory_text, note_text

from spade_memory.manager import MemoryManager
from spade_memory.storage import files
from spade_memory.text.tokenizer import get_tokenizer


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class PausingFileOps(FileOps):
    """Stops the process in the middle of the ``nth`` atomic write of one file."""

    def __init__(self, kind: str, phase: str, nth: int) -> None:
        super().__init__()
        self.suffix = ".faiss" if kind == "faiss" else "_interactions.json"
        self.kind = kind
        self.phase = phase
        self.nth = nth
        self.count = 0

    def _target(self, path: str) -> bool:
        name = Path(path).name
        if name.endswith(".tmp"):  # the temporary file of an atomic write: ".<name>.<...>.tmp"
            return f"{self.suffix}." in name
        # the notes' journal too: a note is appended to it (a torn line when paused mid-write)
        return name.endswith((self.suffix, f"{self.suffix}.journal"))

    def _arrived(self) -> bool:
        with self.lock:
            self.count += 1
            return self.count == self.nth

    def _pause(self) -> None:
        emit(f"P {self.kind} {self.phase}")
        threading.Event().wait()  # until SIGKILL

    def hook(self, op: str, path: str, proceed: Callable[[], Any]) -> Any:
        if op != "replace" or not self._target(path):
            return proceed()
        if self.phase == "replace-before" and self._arrived():
            self._pause()
        result = proceed()
        if self.phase == "replace-after" and self._arrived():
            self._pause()
        return result

    def write(self, fd: int, data: Any) -> int:
        path = self.paths.get(fd, "")
        if self.phase == "write" and self._target(path) and self._arrived():
            view = memoryview(data)
            os.write(fd, view[: max(1, len(view) // 2)])
            self._pause()
        return super().write(fd, data)


async def main(spec: dict[str, Any]) -> None:
    emit(f"PID {os.getpid()}")
    pause = spec.get("pause")
    if pause:
        files.os = PausingFileOps(pause["file"], pause["phase"], int(pause["nth"]))
    config = crash_config(
        Path(spec["root"]),
        snapshot_min_changes=spec["snapshot_min_changes"],
        synchronous=spec["synchronous"],
    )
    rng = random.Random(spec["seed"])
    seq = int(spec["start"])
    count = int(spec["count"])
    manager = await MemoryManager.open(spec["jid"], config)
    emit("READY")
    mine: list[int] = []
    state = {"seq": seq}

    def next_seq() -> int:
        state["seq"] += 1
        return state["seq"]

    async def memories() -> None:
        for op in range(count):
            roll = rng.random()
            if roll < 0.08 and mine:
                memory_id = rng.choice(mine)
                number = next_seq()
                emit(f"I M {op} update {memory_id} {number}")
                await manager.update(memory_id, content=memory_text(number))
                emit(f"A M {op} {memory_id}")
            elif roll < 0.14 and mine:
                memory_id = mine.pop(rng.randrange(len(mine)))
                emit(f"I M {op} forget {memory_id}")
                await manager.forget(memory_id)
                emit(f"A M {op} {memory_id}")
            else:
                number = next_seq()
                emit(f"I M {op} store {number}")
                memory = await manager.store(memory_text(number), importance=0.5)
                mine.append(memory.id)
                emit(f"A M {op} {memory.id}")

    async def notes() -> None:
        for op in range(max(1, count // 6)):
            conversation = f"conv-{rng.randrange(4)}"
            number = next_seq()
            emit(f"I N {op} {conversation} {number}")
            await manager.add_note(conversation, note_text(number), author="bob@localhost")
            emit(f"A N {op}")

    await asyncio.gather(memories(), notes())
    emit("DONE")
    await manager.aclose()
    emit("CLOSED")


def serve() -> None:
    """Fork one writer per spec line; report how each ended."""
    get_tokenizer().tokenize("warm up the dictionaries before forking")
    emit("SERVING")
    for line in sys.stdin:
        pid = fork_run(main, json.loads(line))  # the writer
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            emit(f"END killed {os.WTERMSIG(status)}")
        else:
            emit(f"END exit {os.WEXITSTATUS(status)}")


if __name__ == "__main__":
    serve()
