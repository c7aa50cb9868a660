"""A child process for the history kill -9 tests: it keeps messages or forms memories
until the test kills it with SIGKILL.

Run as ``python history_child.py ROOT JID MODE START``:

- ``capture``: keeps messages ``START``, ``START + 1``, ... in one conversation,
  printing ``A <seq>`` the moment each ``history.append`` returns (acknowledged),
  at most ``PER_RUN`` of them, then ``DONE``, and waits to be killed;
- ``form``: opens the memory (its background formation starts on what is closed),
  prints ``READY``, runs ``form_memories()`` and prints ``DONE``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from spade_memory import FormationConfig, MemoryConfig, MemoryManager

PEER = "bob@example.org"
CONVERSATION = "conv-crash"
DAY = 1_700_049_600.0
PER_RUN = 150  # messages a capture child keeps at most (below the retention of 1,000)


def message_text(seq: int) -> str:
    """A text no other message holds (so a window formed twice shows as a copy)."""
    return f"I prefer the tea number {seq} with lemon"


def config(root: Path, *, form: bool) -> MemoryConfig:
    return MemoryConfig(root=root, embedder="hashing", formation=FormationConfig(form=form))


async def capture(root: Path, jid: str, start: int) -> None:
    async with await MemoryManager.open(jid, config(root, form=True)) as memory:
        print("READY", flush=True)
        seq = start
        while seq < start + PER_RUN:
            await memory.history.append(
                CONVERSATION,
                role="user" if seq % 2 == 0 else "assistant",
                sender=PEER if seq % 2 == 0 else jid,
                peer=PEER,
                text=message_text(seq),
                message_id=f"m{seq}",
                at=DAY + 30.0 * seq,
            )
            print(f"A {seq}", flush=True)
            seq += 1
        print("DONE", flush=True)
        await asyncio.Event().wait()  # until killed


async def form(root: Path, jid: str) -> None:
    async with await MemoryManager.open(jid, config(root, form=True)) as memory:
        print("READY", flush=True)
        await memory.form_memories()
        print("DONE", flush=True)


def main() -> None:
    root, jid, mode, start = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    asyncio.run(capture(root, jid, start) if mode == "capture" else form(root, jid))


if __name__ == "__main__":
    main()
