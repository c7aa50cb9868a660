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
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rel_support import HEAVY, crash_config, memory_text, note_text, sized, token

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
TRIALS = sized(10, 50)
WRITES = sized(2_000, 10_000)
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
    returncode: int
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


async def run_child(spec: dict[str, object], kind: str, rng: random.Random, log: Path) -> ChildRun:
    """Start the child and SIGKILL it as ``kind`` says; return every line it printed."""
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CHILD),
            json.dumps(spec),
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
        assert proc.stdout is not None
        lines: list[str] = []
        count = spec["count"]
        assert isinstance(count, int)
        acks_wanted = rng.randint(1, count) if kind == "acks" else None
        deadline = asyncio.get_running_loop().time() + 60.0
        killed_at_time = rng.uniform(0.3, 4.0) if kind == "time" else None
        started = asyncio.get_running_loop().time()
        acks = 0
        try:
            while True:
                now = asyncio.get_running_loop().time()
                if now > deadline:
                    raise AssertionError(f"the crash child did not finish or pause: {lines[-3:]}")
                timeout = deadline - now
                if killed_at_time is not None:
                    timeout = max(0.0, started + killed_at_time - now)
                try:
                    raw = await asyncio.wait_for(proc.stdout.readline(), timeout)
                except TimeoutError:
                    if killed_at_time is not None:
                        proc.kill()
                        break
                    raise
                if not raw:
                    break
                line = raw.decode().rstrip("\n")
                lines.append(line)
                if line.startswith("A "):
                    acks += 1
                if line.startswith("P ") or (acks_wanted is not None and acks >= acks_wanted):
                    proc.kill()
                    break
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            rest = await proc.stdout.read()
            returncode = await proc.wait()
    lines.extend(rest.decode().splitlines())
    return ChildRun(lines, returncode, log.read_text(errors="replace"))


def _conversations(document: object) -> dict[str, list[str]]:
    assert isinstance(document, dict)
    conversations = document["conversations"]
    assert isinstance(conversations, dict)
    return {c: [n["content"] for n in notes] for c, notes in conversations.items()}


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
        for memory_id, content in stored.items():
            hits = await base.keyword_search([token_of(content)], limit=5)
            assert memory_id in [hit for hit, _ in hits], f"memory {memory_id} not found by keyword"
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
            ids = sorted(stored)
            vectors = indexer.embedder.embed_documents([stored[i] for i in ids])
            for row, memory_id in enumerate(ids):
                found, scores = indexer.index.search(vectors[row], 1, allowed_ids=[memory_id])
                assert found.tolist() == [memory_id]
                assert scores[0] == pytest.approx(1.0, abs=1e-4), (
                    f"the FAISS vector of memory {memory_id} is not the vector of its content"
                )

        # the interaction file parses and holds every acknowledged note, in order
        json_path = root / manager.identity.interactions_name
        on_disk = _conversations(json.loads(json_path.read_bytes()))
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
    paused = 0
    for trial in range(TRIALS):
        kind = KINDS[trial % len(KINDS)]
        pause = None
        if ":" in kind:
            file, phase = kind.split(":")
            pause = {
                "file": file,
                "phase": phase,
                "nth": rng.randint(1, 6 if file == "faiss" else 60),
            }
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
        run = await run_child(spec, kind.split(":")[0], rng, tmp_path / f"child-{trial}.log")
        assert run.returncode in (0, -9), f"the child failed:\n{run.stderr}"
        assert "Traceback" not in run.stderr, run.stderr
        assert "READY" in run.lines or not any(line.startswith("A ") for line in run.lines)
        paused += any(line.startswith("P ") for line in run.lines)
        apply_lines(expected, run.lines)
        await verify(root, expected)  # the next child starts from what is left
    assert expected.memories, "no memory was ever acknowledged"
    assert sum(len(n) for n in expected.notes.values()) > 0
    assert paused >= TRIALS // 3, "too few trials froze inside an atomic write"
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
