"""Many agents at once: no "database is locked" reaches a caller, no acknowledgement is lost.

In one process, ``AGENTS`` managers on one memory root run mixed operations (store,
search, list, forget, notes) side by side with ``asyncio.gather``, some cut short
by timeouts. Then four processes share one root, each with its own agents, and all
four also open the SAME agent at the same moment. Afterwards every acknowledged
memory and note is there, nothing forgotten came back, and every database passes
``PRAGMA integrity_check``. Operation latencies (p50/p99) are printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sqlite3
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rel_support import memory_text, note_text, sized, token

from spade_memory.config import MemoryConfig, StorageConfig
from spade_memory.errors import StorageCorrupted, StorageError
from spade_memory.identity import AgentIdentity
from spade_memory.manager import MemoryManager

AGENTS = 100
OPS = sized(100, 1_000)
PROCESSES = 4
PROCESS_AGENTS = sized(5, 25)
PROCESS_OPS = sized(60, 400)
CHILD = Path(__file__).with_name("concurrency_child.py")


@dataclass
class Ledger:
    """What each agent was told: acknowledged memories, forgets and notes."""

    memories: dict[str, dict[int, str]] = field(default_factory=dict)
    forgotten: dict[str, set[int]] = field(default_factory=dict)
    notes: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    maybe: dict[str, set[str]] = field(default_factory=dict)  # stores cut short by a timeout
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def stored(self, jid: str, memory_id: int, content: str) -> None:
        self.memories.setdefault(jid, {})[memory_id] = content

    def forgot(self, jid: str, memory_id: int) -> None:
        self.memories[jid].pop(memory_id)
        self.forgotten.setdefault(jid, set()).add(memory_id)

    def noted(self, jid: str, conversation: str, content: str) -> None:
        self.notes.setdefault(jid, {}).setdefault(conversation, []).append(content)

    def timed(self, op: str, seconds: float) -> None:
        self.latencies.setdefault(op, []).append(seconds)


def percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return p50 * 1000, p99 * 1000


def report(title: str, latencies: dict[str, list[float]]) -> None:
    print(f"\n{title}: latency per operation, milliseconds")
    every = [v for values in latencies.values() for v in values]
    for op in [*sorted(latencies), "all"]:
        values = every if op == "all" else latencies[op]
        p50, p99 = percentiles(values)
        print(f"  {op:<7} n={len(values):>6}  p50={p50:8.2f}  p99={p99:8.2f}")


async def verify(root: Path, ledger: Ledger, jids: list[str]) -> None:
    """Open every agent again and compare it with what it was told."""
    config = MemoryConfig(root=root, embedder="hashing")
    for jid in jids:
        async with await MemoryManager.open(jid, config) as manager:
            assert await manager.base_store.integrity_check() == ["ok"], jid
            stored = {m.id: m.content async for m in manager.base_store.iter_all()}
            for memory_id, content in ledger.memories.get(jid, {}).items():
                assert stored.get(memory_id) == content, f"{jid}: memory {memory_id} lost"
            back = ledger.forgotten.get(jid, set()) & set(stored)
            assert not back, f"{jid}: forgotten memories came back: {sorted(back)}"
            known = set(ledger.memories.get(jid, {}).values()) | ledger.maybe.get(jid, set())
            unknown = [c for c in stored.values() if c not in known]
            assert not unknown, f"{jid}: memories nobody stored: {unknown[:3]}"
            for conversation, notes in ledger.notes.get(jid, {}).items():
                held = [n.content for n in await manager.notes(conversation)]
                missing = [n for n in notes if n not in held]
                assert not missing, f"{jid}: {len(missing)} acknowledged notes lost"


# -- one process, many agents ---------------------------------------------------------------


async def agent_work(manager: MemoryManager, rng: random.Random, ledger: Ledger, base: int) -> None:
    jid = manager.jid
    mine: list[int] = []
    for step in range(OPS):
        seq = base + step
        roll = rng.random()
        op = "store" if roll < 0.4 or not mine else "search" if roll < 0.6 else "list"
        if 0.7 <= roll < 0.8 and mine:
            op = "forget"
        elif roll >= 0.8:
            op = "note"
        cut_short = rng.random() < 0.03  # a caller's timeout cancels the call midway
        started = time.perf_counter()
        try:
            if op == "store":
                call = manager.store(memory_text(seq))
                if cut_short:
                    ledger.maybe.setdefault(jid, set()).add(memory_text(seq))
                    try:
                        memory = await asyncio.wait_for(call, rng.uniform(0, 0.004))
                    except TimeoutError:
                        continue
                else:
                    memory = await call
                mine.append(memory.id)
                ledger.stored(jid, memory.id, memory.content)
            elif op == "search":
                query = token(base + rng.randrange(step + 1))
                if cut_short:
                    try:
                        await asyncio.wait_for(manager.search(query), 0.001)
                    except TimeoutError:
                        continue
                else:
                    results = await manager.search(query, limit=5)
                    assert all(r.memory.content.startswith("record ") for r in results)
            elif op == "list":
                await manager.list(limit=10)
            elif op == "forget":
                memory_id = mine.pop(rng.randrange(len(mine)))
                await manager.forget(memory_id)
                ledger.forgot(jid, memory_id)
            else:
                conversation = f"conv-{rng.randrange(3)}"
                await manager.add_note(conversation, note_text(seq))
                ledger.noted(jid, conversation, note_text(seq))
        except Exception as exc:
            ledger.errors.append(f"{jid} {op}: {type(exc).__name__}: {exc}")
            continue
        ledger.timed(op, time.perf_counter() - started)


@pytest.mark.slow
async def test_many_agents_in_one_process(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    config = MemoryConfig(root=root, embedder="hashing")
    jids = [f"agent{i:03d}@localhost" for i in range(AGENTS)]
    managers = await asyncio.gather(*(MemoryManager.open(jid, config) for jid in jids))
    ledger = Ledger()
    rng = random.Random(5)
    try:
        await asyncio.gather(
            *(
                agent_work(manager, random.Random(rng.random()), ledger, 1_000_000 * index)
                for index, manager in enumerate(managers)
            )
        )
        await asyncio.gather(*(manager.flush() for manager in managers))
    finally:
        await asyncio.gather(*(manager.aclose() for manager in managers))
    report(f"{AGENTS} agents x {OPS} operations, one process", ledger.latencies)
    locked = [e for e in ledger.errors if "locked" in e]
    assert not locked, f"'database is locked' reached callers: {locked[:3]}"
    assert not ledger.errors, ledger.errors[:5]
    assert sum(len(v) for v in ledger.memories.values()) > AGENTS
    await verify(root, ledger, jids)


# -- several processes, one root, one shared agent -------------------------------------------


async def run_processes(root: Path, tmp_path: Path) -> tuple[Ledger, list[str]]:
    shared = "shared@localhost"
    specs = [
        {
            "root": str(root),
            "agents": [f"p{p}a{i}@localhost" for i in range(PROCESS_AGENTS)],
            "shared": shared,
            "ops": PROCESS_OPS,
            "seed": p,
            "start": (p + 1) * 10_000_000,
            "latencies": str(tmp_path / f"latencies-{p}.json"),
        }
        for p in range(PROCESSES)
    ]
    log_path = tmp_path / "workers.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CHILD),
            json.dumps(specs),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 120)
        assert json.loads(line) == {"state": "WAITING"}, log_path.read_text(errors="replace")
        stdout, _ = await asyncio.wait_for(proc.communicate(b"go\n"), 240)  # all open at once
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    errors = log_path.read_text(errors="replace")
    assert proc.returncode == 0 and "Traceback" not in errors, errors[-3000:]
    ledger = Ledger()
    exits = None
    for line in stdout.decode().splitlines():
        record = json.loads(line)
        if "error" in record:
            ledger.errors.append(str(record))
        elif record.get("ack") == "store":
            ledger.stored(record["jid"], record["id"], memory_text(record["seq"]))
        elif record.get("ack") == "forget":
            ledger.forgot(record["jid"], record["id"])
        elif record.get("ack") == "note":
            ledger.noted(record["jid"], record["conversation"], note_text(record["seq"]))
        elif "exits" in record:
            exits = record["exits"]
    assert exits == [0] * PROCESSES, f"workers failed: {exits}\n{errors[-3000:]}"
    for spec in specs:
        for op, values in json.loads(Path(str(spec["latencies"])).read_text()).items():
            ledger.latencies.setdefault(op, []).extend(values)
    jids = [jid for spec in specs for jid in spec["agents"]] + [shared]  # type: ignore[union-attr]
    return ledger, jids


@pytest.mark.slow
async def test_processes_share_a_root_and_an_agent(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    ledger, jids = await run_processes(root, tmp_path)
    report(f"{PROCESSES} processes sharing a root", ledger.latencies)
    locked = [e for e in ledger.errors if "locked" in e]
    assert not locked, f"'database is locked' reached callers: {locked[:3]}"
    assert not ledger.errors, ledger.errors[:5]
    assert len(ledger.memories["shared@localhost"]) > PROCESSES
    assert not list(root.glob("*.corrupt-*")), "a healthy file was quarantined"
    await verify(root, ledger, jids)


# -- a lock is not damage ------------------------------------------------------------------


async def test_a_locked_database_is_reported_not_quarantined(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    config = MemoryConfig(root=root, embedder=None, storage=StorageConfig(busy_timeout_ms=100))
    async with await MemoryManager.open("held@localhost", config) as manager:
        await manager.store("kept safe")
    path = root / AgentIdentity.of("held@localhost").database_name
    holder = sqlite3.connect(path, isolation_level=None)  # another program holds it
    try:
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("INSERT INTO meta (key, value) VALUES ('held', '1')")
        with pytest.raises(StorageError) as caught:
            await MemoryManager.open("held@localhost", config)
        assert not isinstance(caught.value, StorageCorrupted)
        assert "locked" in str(caught.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert path.exists() and not list(root.glob("*.corrupt-*")), "a locked file was quarantined"
    async with await MemoryManager.open("held@localhost", config) as manager:
        assert [m.content for m in await manager.list()] == ["kept safe"]


async def test_access_statistics_wait_out_a_lock_held_by_another_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "memory"
    config = MemoryConfig(root=root, embedder=None, storage=StorageConfig(busy_timeout_ms=50))
    async with await MemoryManager.open("busy@localhost", config) as manager:
        stored = await manager.store("the lighthouse keeper logs the tides")
        assert [r.memory.id for r in await manager.search("lighthouse tides")] == [stored.id]
        path = root / AgentIdentity.of("busy@localhost").database_name
        timer = manager._touch_task  # the coalescing timer the search started
        assert timer is not None
        timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await timer
        holder = sqlite3.connect(path, isolation_level=None)  # another process writes
        try:
            holder.execute("BEGIN IMMEDIATE")
            await manager._write_touches()  # what the coalescing timer runs
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert "Traceback" not in caplog.text and "locked" in caplog.text
        written = await manager.engine.base.get(stored.id)
        assert written is not None and written.access_count == 0  # not written yet
        assert (await manager.get(stored.id)).access_count == 1  # but counted
        retry = manager._touch_task  # a retry is scheduled, not left to the next search
        assert retry is not None and not retry.done()
        await manager.flush()  # writes the access kept meanwhile
        assert (await manager.get(stored.id)).access_count == 1


# -- one agent opened twice at once (two processes, or two managers of one process) ------------


async def test_two_managers_of_one_new_agent_open_at_once(tmp_path: Path) -> None:
    for round_ in range(8):
        config = MemoryConfig(root=tmp_path / f"memory-{round_}", embedder=None)
        first, second = await asyncio.gather(
            MemoryManager.open("twin@localhost", config),
            MemoryManager.open("twin@localhost", config),
        )
        try:
            a = await first.store("stored by the first")
            b = await second.store("stored by the second")
            assert {m.id for m in await first.list()} == {a.id, b.id}
        finally:
            await first.aclose()
            await second.aclose()


async def test_two_managers_of_one_agent_never_overwrite_each_others_notes(
    tmp_path: Path,
) -> None:
    config = MemoryConfig(root=tmp_path / "memory", embedder=None)
    first = await MemoryManager.open("twin@localhost", config)
    second = await MemoryManager.open("twin@localhost", config)
    written: list[str] = []
    try:
        for seq in range(10):
            writer = first if seq % 2 else second
            await writer.add_note("conv", note_text(seq))
            written.append(note_text(seq))
        await asyncio.gather(
            *(m.add_note("conv", note_text(100 + i)) for i, m in enumerate([first, second] * 5))
        )
        written += [note_text(100 + i) for i in range(10)]
        # each sees the other's notes once it writes again
        await first.add_note("conv", "last")
        assert sorted(n.content for n in await first.notes("conv")) == sorted([*written, "last"])
    finally:
        await first.aclose()
        await second.aclose()
    async with await MemoryManager.open("twin@localhost", config) as manager:
        assert sorted(n.content for n in await manager.notes("conv")) == sorted([*written, "last"])
