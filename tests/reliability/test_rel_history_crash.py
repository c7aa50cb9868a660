"""Kill -9 during capture and formation of conversations: no acknowledged message is
lost, no window is formed twice, none is left unformed.

A child process (``history_child.py``) keeps messages, printing each one the moment
``history.append`` returns, or forms memories from many pending windows (in the
background as the memory opens, and with ``form_memories()``). The test kills it
with SIGKILL at random moments, round after round on the same memory root, then
opens the memory again and checks what it holds.
"""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from history_child import CONVERSATION, DAY, PEER, config, message_text

from spade_memory.identity import AgentIdentity
from spade_memory.manager import MemoryManager

CHILD = Path(__file__).with_name("history_child.py")
JID = "keeper@localhost"
ROUNDS = 5

pytestmark = pytest.mark.slow


class Child:
    """A child process whose stdout lines are collected as they come."""

    def __init__(self, root: Path, mode: str, start: int = 0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), str(root), JID, mode, str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=CHILD.parent,
        )
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._done = threading.Event()
        self.ready_at = self.done_at = 0.0  # time.monotonic() of READY and DONE
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("READY"):
                self.ready_at = time.monotonic()
                self._ready.set()
            elif line.startswith("DONE"):
                self.done_at = time.monotonic()
                self._done.set()

    def wait_ready(self) -> None:
        if not self._ready.wait(60):
            self.process.kill()
            self.kill()
            raise AssertionError(f"the child did not start: {self.lines}")

    def wait_done(self) -> None:
        if not self._done.wait(120):
            self.kill()
            raise AssertionError(f"the child did not finish: {self.lines}")
        self.process.wait(30)
        self._reader.join(30)
        assert self.process.stdout is not None
        self.process.stdout.close()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._reader.join(30)
        assert self.process.stdout is not None
        self.process.stdout.close()


def acknowledged(lines: list[str]) -> list[int]:
    return [int(line.split()[1]) for line in lines if line.startswith("A ")]


def database(root: Path) -> Path:
    return root / AgentIdentity.of(JID).database_name


async def test_kill_9_during_capture_loses_no_acknowledged_message(tmp_path: Path) -> None:
    rng = random.Random(16)
    acked: list[int] = []
    start = 0
    for _ in range(ROUNDS):
        child = Child(tmp_path, "capture", start)
        child.wait_ready()
        time.sleep(rng.uniform(0.0, 0.4))
        child.kill()
        assert child.process.returncode == -signal.SIGKILL
        seen = acknowledged(child.lines)
        acked += seen
        start = (seen[-1] + 1) if seen else start
    assert acked, "no message was acknowledged before the kills"
    async with await MemoryManager.open(JID, config(tmp_path, form=False)) as memory:
        kept = {m.message_id: m for m in await memory.history.messages(CONVERSATION)}
        for seq in acked:
            message = kept.get(f"m{seq}")
            assert message is not None, f"acknowledged message {seq} was lost"
            assert message.text == message_text(seq) and message.at == DAY + 30.0 * seq
        # nothing was kept that no child began to keep, and nothing twice
        assert set(kept) <= {f"m{seq}" for seq in range(start + 1)}
        assert len(kept) == len(await memory.history.messages(CONVERSATION))
    with sqlite3.connect(database(tmp_path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def forming_seconds(root: Path, scratch: Path) -> float:
    """How long a child takes, from READY to DONE, to form what ``root`` has pending,
    on a copy of it: the kills fall within that time, on a fast machine or a slow one
    (a fixed delay outlasted the whole formation once machines got faster)."""
    shutil.copytree(root, scratch)
    child = Child(scratch, "form")
    child.wait_done()
    return child.done_at - child.ready_at


async def test_kill_9_during_formation_forms_every_window_once(tmp_path: Path) -> None:
    count = 400  # 200 rounds: 20 windows of 10 rounds
    root = tmp_path / "memory"
    async with await MemoryManager.open(JID, config(root, form=False)) as memory:
        for seq in range(count):
            await memory.history.append(
                CONVERSATION,
                role="user" if seq % 2 == 0 else "assistant",
                sender=PEER if seq % 2 == 0 else JID,
                peer=PEER,
                text=message_text(seq),
                message_id=f"m{seq}",
                at=DAY + 30.0 * seq,
            )
    seconds = forming_seconds(root, tmp_path / "calibration")
    rng = random.Random(61)
    left: list[int] = []  # messages still pending after each kill
    for _ in range(ROUNDS):
        child = Child(root, "form")
        child.wait_ready()
        time.sleep(rng.uniform(0.0, seconds))
        child.kill()
        async with await MemoryManager.open(JID, config(root, form=False)) as memory:
            info = await memory.history.info(CONVERSATION)
            assert info is not None
            left.append(info.pending)
        if not info.pending:
            break
    assert any(0 < pending < count for pending in left), f"no kill fell mid-way: {left}"
    async with await MemoryManager.open(JID, config(root, form=True)) as memory:
        await memory.form_memories()
        info = await memory.history.info(CONVERSATION)
        messages = await memory.history.messages(CONVERSATION)
        assert info is not None and info.pending == 0
        assert len(messages) == count and info.formed_through == messages[-1].id
        memories = (await memory.export())["memories"]
        sources = await memory.history.source_ids([m["id"] for m in memories])
    # formed twice, a window would give copies (texts are unique) or reinforce them
    contents = [m["content"] for m in memories]
    assert len(contents) == len(set(contents)), "a memory was formed twice"
    assert all(m["access_count"] == 0 for m in memories), "a formed memory was told again"
    formed_from = {message for ids in sources.values() for message in ids}
    assert {m.id for m in messages if m.role == "user"} <= formed_from
    with sqlite3.connect(database(root)) as db:
        told_again = db.execute("SELECT count(*) FROM memory_sources WHERE formed = 0").fetchone()
        assert told_again == (0,), "a window was formed again (its memories told again)"
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
