"""No acknowledged write is lost when the process dies (SIGKILL) at any point.

A child process (``crash_child.py``) stores, changes and forgets memories and adds
interaction notes, printing each acknowledgement the moment it returns. The test
kills it at random points: after a random number of acknowledgements, after a
random time, or frozen in the middle of an atomic write of the FAISS snapshot or
of the interaction file (half the temporary file written, just before
``os.replace``, just after it). The trials run one after another on the same
memory root, so each child also opens what the previous one left behind.

After each kill the memory is opened again and must hold every acknowledged
memory (findable by keyword, its content matching its id) and note, nothing that
was never asked for, vectors equal to the stored ones after ``flush()``, and a
database that passes ``PRAGMA integrity_check``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from rel_support import HEAVY, crash_config, memory_text, note_text, notes_in_files, sized, token

from spade_memory.manager import MemoryManager

CHILD = Path(__file__).with_name("crash_child.py")
JID = "crash@localhost"
KINDS = (
    "acks",
    "faiss:replace-before",
    "interactions:write",
    "time",
    "faiss:write",
    "interactions:replace-after",
    "acks",
    "faiss:replace-after",
    "interactions:replace-before",
    "acks",
)
# SPADE_MEMORY_CRASH_TRIALS / _WRITES override the sizes (a partial heavy run).
TRIALS = int(os.environ.get("SPADE_MEMORY_CRASH_TRIALS", sized(10, 50)))
WRITES = int(os.environ.get("SPADE_MEMORY_CRASH_WRITES", sized(2_000, 10_000)))
SYNCHRONOUS = "FULL" if HEAVY else "NORMAL"
SNAPSHOT_MIN_CHANGES = 48


@dataclass
class Expected:
    """What the memory must hold, from the acknowledgements seen so far."""

    memories: dict[int, str] = field(default_factory=dict)  # id -> content
    forgotten: set[int] = field(default_factory=set)
    notes: dict[str, list[str]] = field(default_factory=dict)
    # operations begun but not acknowledged when the child died (at most one each)
    maybe_store: str | None = None
    maybe_update: tuple[int, str] | None = None
    maybe_forget: int | None = None
    maybe_note: tuple[str, str] | None = None

    def unresolved(self) -> None:
        self.maybe_store = self.maybe_update = self.maybe_forget = self.maybe_note = None


@dataclass
class ChildRun:
    lines: list[str]
    end: str  # "END exit <code>" or "END killed <signal>"
    stderr: str


def apply_lines(expected: Expected, lines: list[str]) -> None:
    """Replay a child's intents and acknowledgements into ``expected``."""
    begun: dict[tuple[str, str], list[str]] = {}
    for line in lines:
        parts = line.split()
        if not parts or parts[0] not in ("I", "A"):
            continue
        key = (parts[1], parts[2])
        if parts[0] == "I":
            begun[key] = parts[3:]
            continue
        intent = begun.pop(key)
        if parts[1] == "N":
            conversation, number = intent[0], int(intent[1])
            expected.notes.setdefault(conversation, []).append(note_text(number))
        elif intent[0] == "store":
            expected.memories[int(parts[3])] = memory_text(int(intent[1]))
        elif intent[0] == "update":
            expected.memories[int(intent[1])] = memory_text(int(intent[2]))
        else:
            memory_id = int(intent[1])
            expected.memories.pop(memory_id)
            expected.forgotten.add(memory_id)
    for (stream, _), intent in begun.items():
        if stream == "N":
            expected.maybe_note = (intent[0], note_text(int(intent[1])))
        elif intent[0] == "store":
            expected.maybe_store = memory_text(int(intent[1]))
        elif intent[0] == "update":
            expected.maybe_update = (int(intent[1]), memory_text(int(intent[2])))
        else:
            expected.maybe_forget = int(intent[1])


class Writers:
    """``crash_child.py`` as a fork server: one writer process per trial, started at once."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self._proc = proc
        self._log = log

    @classmethod
    async def start(cls, log: Path) -> Writers:
        with log.open("wb") as stderr:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(CHILD),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
            )
        writers = cls(proc, log)
        assert (await writers._line(120.0)) == "SERVING", log.read_text(errors="replace")
        return writers

    async def _line(self, timeout: float) -> str:
        assert self._proc.stdout is not None
        raw = await asyncio.wait_for(self._proc.stdout.readline(), timeout)
        assert raw, f"the fork server died:\n{self._log.read_text(errors='replace')[-3000:]}"
        return raw.decode().rstrip("\n")

    async def run(self, spec: dict[str, object], kind: str, rng: random.Random) -> ChildRun:
        """Run one writer and SIGKILL it as ``kind`` says; every line it printed."""
        assert self._proc.stdin is not None
        loop = asyncio.get_running_loop()
        errors_before = self._log.stat().st_size
        self._proc.stdin.write(json.dumps(spec).encode() + b"\n")
        await self._proc.stdin.drain()
        count = spec["count"]
        assert isinstance(count, int)
        acks_wanted = rng.randint(1, count) if kind == "acks" else None
        lines: list[str] = []
        # A writer acknowledges at least 20 writes a second, even on a loaded machine
        # with synchronous=FULL, before it is killed.
        deadline = loop.time() + 120.0 + count / 20
        try:
            end = await self._follow(lines, kind, rng, acks_wanted, deadline)
        except BaseException:
            if lines and lines[0].startswith("PID "):  # no writer is left running
                _kill(int(lines[0].split()[1]))
            raise
        with self._log.open("rb") as handle:
            handle.seek(errors_before)
            stderr = handle.read().decode(errors="replace")
        return ChildRun(lines, end, stderr)

    async def _follow(
        self,
        lines: list[str],
        kind: str,
        rng: random.Random,
        acks_wanted: int | None,
        deadline: float,
    ) -> str:
        """Read the writer's lines into ``lines``, killing it as ``kind`` says; its end line."""
        loop = asyncio.get_running_loop()
        pid: int | None = None
        kill_at: float | None = None
        killed = False
        acks = 0
        while True:
            now = loop.time()
            timeout = deadline - now
            if kill_at is not None and not killed:
                timeout = max(0.0, min(timeout, kill_at - now))
            try:
                line = await self._line(timeout)
            except TimeoutError:
                assert kill_at is not None and not killed and pid is not None, lines[-3:]
                killed = _kill(pid)
                continue
            if line.startswith("END "):
                return line
            lines.append(line)
            if line.startswith("PID "):
                pid = int(line.split()[1])
                if kind == "time":
                    kill_at = loop.time() + rng.uniform(0.05, 3.0)
            elif line.startswith("A "):
                acks += 1
            wanted = acks_wanted is not None and acks >= acks_wanted
            if not killed and pid is not None and (line.startswith("P ") or wanted):
                killed = _kill(pid)

    async def aclose(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            await asyncio.wait_for(self._proc.wait(), 30)
        finally:
            if self._proc.returncode is None:
                self._proc.kill()
                await self._proc.wait()


def _kill(pid: int) -> bool:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


def _is_subsequence(needles: list[str], haystack: list[str]) -> bool:
    it: Iterator[str] = iter(haystack)
    return all(any(item == candidate for candidate in it) for item in needles)


async def verify(root: Path, expected: Expected) -> None:
    """Open the memory as a new process would and check it against ``expected``."""
    config = crash_config(root, snapshot_min_changes=SNAPSHOT_MIN_CHANGES, synchronous=SYNCHRONOUS)
    async with await MemoryManager.open(JID, config) as manager:
        base = manager.base_store
        assert await base.integrity_check() == ["ok"]
        stored = {memory.id: memory.content async for memory in base.iter_all()}

        # every acknowledged memory, with the content it was acknowledged with
        for memory_id, content in expected.memories.items():
            if expected.maybe_forget == memory_id and memory_id not in stored:
                continue
            assert memory_id in stored, f"acknowledged memory {memory_id} was lost"
            allowed = {content}
            if expected.maybe_update is not None and expected.maybe_update[0] == memory_id:
                allowed.add(expected.maybe_update[1])
            assert stored[memory_id] in allowed, f"memory {memory_id} holds the wrong content"
        # nothing that was never asked for; nothing acknowledged as forgotten
        known = set(expected.memories)
        for memory_id, content in stored.items():
            assert memory_id not in expected.forgotten, f"forgotten memory {memory_id} is back"
            if memory_id in known:
                continue
            assert content == expected.maybe_store, f"memory {memory_id} was never stored"
            expected.memories[memory_id] = content  # the unacknowledged store did commit
        if expected.maybe_update is not None and expected.maybe_update[0] in stored:
            expected.memories[expected.maybe_update[0]] = stored[expected.maybe_update[0]]
        if expected.maybe_forget is not None and expected.maybe_forget not in stored:
            expected.memories.pop(expected.maybe_forget, None)
            expected.forgotten.add(expected.maybe_forget)

        # every memory found by its keyword, and searches return matching content
        ids = sorted(stored)
        for start in range(0, len(ids), 200):  # 200 keywords per query, each its own memory
            chunk = ids[start : start + 200]
            hits = await base.keyword_search([token_of(stored[i]) for i in chunk], limit=1000)
            missing = set(chunk) - {hit for hit, _ in hits}
            assert not missing, f"memories not found by keyword: {sorted(missing)[:5]}"
        sample = random.Random(len(stored)).sample(sorted(stored), min(40, len(stored)))
        for memory_id in sample:
            results = await manager.search(token_of(stored[memory_id]), limit=5)
            assert memory_id in [r.memory.id for r in results]
            for result in results:
                assert result.memory.content == stored[result.memory.id]

        # after flush every memory has a vector, and FAISS holds exactly those vectors
        await manager.flush()
        indexer = manager.indexer
        assert indexer is not None
        fingerprint = indexer.embedder.fingerprint
        assert await base.count_pending_embeddings(fingerprint) == 0
        embedded = set((await base.embedding_ids(fingerprint)).tolist())
        assert embedded == set(stored)
        assert set(indexer.index.ids().tolist()) == embedded
        if stored:
            vectors = indexer.embedder.embed_documents([stored[i] for i in ids])
            for row, memory_id in enumerate(ids):
                # the FAISS vector kept under this id is the one of this very content
                # (searched among this id alone: at 32 dimensions two contents can
                # hash to one vector, so the nearest overall may be another memory)
                own = np.asarray([memory_id], dtype=np.int64)
                found, scores = indexer.index.search(vectors[row], 1, allowed_ids=own)
                assert list(found) == [memory_id], f"memory {memory_id} has no FAISS vector"
                assert scores[0] == pytest.approx(1.0, abs=1e-4), (
                    f"the FAISS vector of memory {memory_id} belongs to another content"
                )

        # the interaction file parses and holds every acknowledged note, in order
        json_path = root / manager.identity.interactions_name
        # The first note creates the file: a writer killed before it leaves none.
        on_disk = notes_in_files(json_path, manager.jid) if json_path.exists() else {}
        for conversation, notes in expected.notes.items():
            assert _is_subsequence(notes, on_disk.get(conversation, [])), (
                f"acknowledged notes of {conversation} were lost"
            )
        for conversation, notes in on_disk.items():
            known_notes = set(expected.notes.get(conversation, []))
            for note in notes:
                if note in known_notes:
                    continue
                assert expected.maybe_note == (conversation, note), f"note {note!r} never added"
                expected.notes.setdefault(conversation, []).append(note)
            assert [n.content for n in await manager.notes(conversation)] == notes
    expected.unresolved()


def token_of(content: str) -> str:
    return content.split()[1]


def test_memory_text_tokens_are_unique() -> None:
    assert token_of(memory_text(12)) == token(12)
    assert len({memory_text(i) for i in range(1000)}) == 1000


@pytest.mark.slow
async def test_no_acknowledged_write_is_lost_on_sigkill(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    rng = random.Random(20250101)
    expected = Expected()
    paused = killed = acks = recoveries = 0
    started = time.perf_counter()
    writers = await Writers.start(tmp_path / "writers.log")
    try:
        for trial in range(TRIALS):
            kind = KINDS[trial % len(KINDS)]
            pause = None
            if ":" in kind:
                file, phase = kind.split(":")
                nth = rng.randint(1, 6 if file == "faiss" else 60)
                pause = {"file": file, "phase": phase, "nth": nth}
            spec = {
                "root": str(root),
                "jid": JID,
                "start": trial * 10_000_000,
                "count": WRITES,
                "seed": rng.randrange(2**32),
                "snapshot_min_changes": SNAPSHOT_MIN_CHANGES,
                "synchronous": SYNCHRONOUS,
                "pause": pause,
            }
            run = await writers.run(spec, kind.split(":")[0], rng)
            assert run.end in ("END exit 0", "END killed 9"), f"the writer failed:\n{run.stderr}"
            assert "Traceback" not in run.stderr, run.stderr
            paused += any(line.startswith("P ") for line in run.lines)
            killed += run.end == "END killed 9"
            acks += sum(line.startswith("A ") for line in run.lines)
            apply_lines(expected, run.lines)
            await verify(root, expected)  # the next writer starts from what is left
            recoveries += 1
            print(  # with -s, a long heavy run reports as it goes
                f"crash trial {trial + 1}/{TRIALS} {kind}: {run.end}, "
                f"{sum(line.startswith('A ') for line in run.lines)} acknowledged, "
                f"{len(expected.memories)} memories verified, "
                f"{time.perf_counter() - started:.0f}s",
                flush=True,
            )
        # A crash's temporary files are removed by the next process to open the folder
        # (this one listed it at its first open, before the later crashes): one more
        # writer, with nothing to write, opens it and closes it.
        last = await writers.run({**spec, "count": 0, "pause": None}, "none", rng)
        assert last.end == "END exit 0", f"the last writer failed:\n{last.stderr}"
    finally:
        await writers.aclose()
    assert expected.memories, "no memory was ever acknowledged"
    assert sum(len(n) for n in expected.notes.values()) > 0
    assert paused >= TRIALS // 3, "too few trials froze inside an atomic write"
    notes = sum(len(n) for n in expected.notes.values())
    print(
        f"\ncrash: trials={TRIALS} writes_per_trial={WRITES} synchronous={SYNCHRONOUS} "
        f"kills={killed} frozen_in_atomic_write={paused} acknowledged_writes={acks} "
        f"memories_checked={len(expected.memories)} notes_checked={notes} "
        f"forgotten_checked={len(expected.forgotten)} recoveries={recoveries} "
        f"wall={time.perf_counter() - started:.0f}s"
    )
    leftovers = [p.name for p in root.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == [], f"temporary files left behind: {leftovers}"


def test_apply_lines_tracks_unacknowledged_operations() -> None:
    expected = Expected()
    apply_lines(
        expected,
        [
            "READY",
            "I M 0 store 1",
            "A M 0 1",
            "I N 0 conv-1 2",
            "A N 0",
            "I M 1 update 1 3",
            "A M 1 1",
            "I M 2 store 4",
            "I N 1 conv-2 5",
        ],
    )
    assert expected.memories == {1: memory_text(3)}
    assert expected.notes == {"conv-1": [note_text(2)]}
    assert expected.maybe_store == memory_text(4)
    assert expected.maybe_note == ("conv-2", note_text(5))
