"""The cost of conversation memory: keeping a message, and forming a window of them.

    python -m benchmarks.perf_formation                 # 500 appends; 30 windows at 10k
    python -m benchmarks.perf_formation --quick         # 100 appends; 5 windows at 1k
    python -m benchmarks.perf_formation --embedder hashing

*Append*: ``history.append`` of one message, awaited until durably committed, in a
file-backed memory with the default ``StorageConfig``; partner and agent messages
alternate, with formation on as configured by default (a window of 10 rounds is
formed in the background when it closes, as in an agent).

*Formation*: ``form_memories()`` of a conversation holding exactly one pending
window of 10 rounds (20 messages: the partner's and the agent's answers), in a
memory already holding ``--sizes`` memories. Each repetition uses a new
conversation, so each forms a fresh window. Windows are kept from closing in the
background (``window_rounds`` above 10), so ``form_memories()`` forms the whole
window. The time is rules, graph extraction and the one window transaction;
embedding happens in the background afterwards and is waited for between
repetitions, untimed. The embedder (``none`` by default: keywords only) is stated
in the output.

*Reference*: in the same memory, right after each formation, ``store_many`` of the
window's 20 turns as ``"Speaker: text"`` memories (what an agent storing every turn
itself would write). Formation writes about as many memories in one transaction,
so the ratio of the two shows what forming adds; on a shared machine, compare that
ratio rather than the milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

from .perf_common import (
    JID,
    TextGenerator,
    add_common_arguments,
    markdown_table,
    memory_config,
    percentile,
    scratch_dir,
    sizes_from,
    write_json,
)

__all__ = ["main", "measure_append", "measure_formation", "window_lines"]

SIZES = (10_000,)
QUICK_SIZES = (1_000,)
ROUNDS = 10
PARTNER = "alice@bench.example"
_STATEMENTS = (
    "I prefer green tea in the morning.",
    "My name is Alice and I work at the museum.",
    "I am planning to visit Lisbon next spring.",
    "I usually go running on Sundays.",
)


def window_lines(texts: TextGenerator, start: int) -> list[tuple[str, str]]:
    """``(role, text)`` of one window: ``ROUNDS`` rounds, partner then agent, some of the
    partner's lines saying something about the partner (as statements)."""
    lines = texts.texts(2 * ROUNDS, start=start)
    out: list[tuple[str, str]] = []
    for number in range(ROUNDS):
        said = lines[2 * number].split(": ", 1)[-1]
        if number % 3 == 0:
            said = f"{_STATEMENTS[(start + number) % len(_STATEMENTS)]} {said}"
        out.append(("user", said))
        out.append(("assistant", lines[2 * number + 1].split(": ", 1)[-1]))
    return out


def _embedder(name: str) -> Any:
    return None if name == "none" else name


def _ms(values: list[float]) -> dict[str, float]:
    ms = [1000.0 * value for value in values]
    return {
        "count": float(len(ms)),
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "max_ms": max(ms),
    }


async def measure_append(root: Path, *, appends: int, embedder: str) -> dict[str, float]:
    """p50/p95 of ``history.append`` in a fresh file-backed memory."""
    from spade_memory import MemoryManager

    texts = TextGenerator(seed=31)
    lines = texts.texts(appends + 10)
    seconds: list[float] = []
    config = memory_config(root, embedder=_embedder(embedder))
    async with await MemoryManager.open(JID, config) as manager:
        for number, line in enumerate(lines):
            user = number % 2 == 0
            started = time.perf_counter()
            await manager.history.append(
                "bench-conversation",
                role="user" if user else "assistant",
                sender=PARTNER if user else JID,
                text=line,
                peer=PARTNER,
            )
            if number >= 10:  # the first ones warm up the connection and caches
                seconds.append(time.perf_counter() - started)
        await manager.flush()
    return _ms(seconds)


async def _prefill(root: Path, size: int, embedder: str) -> float:
    from spade_memory import MemoryManager

    texts = TextGenerator(seed=11)
    started = time.perf_counter()
    async with await MemoryManager.open(
        JID, memory_config(root, embedder=_embedder(embedder))
    ) as manager:
        for offset in range(0, size, 5_000):
            batch = texts.texts(min(5_000, size - offset), start=offset)
            await manager.store_many({"content": line} for line in batch)
        await manager.flush()
    return time.perf_counter() - started


async def measure_formation(
    root: Path, *, size: int, windows: int, embedder: str
) -> dict[str, Any]:
    """p50/p95 of ``form_memories()`` over ``windows`` fresh 10-round windows at ``size``."""
    from spade_memory import FormationConfig, MemoryManager
    from spade_memory.config import MemoryConfig

    prefill_s = await _prefill(root, size, embedder)
    base = memory_config(root, embedder=_embedder(embedder))
    config = MemoryConfig(
        root=base.root,
        embedder=base.embedder,
        retrieval=base.retrieval,
        storage=base.storage,
        formation=FormationConfig(window_rounds=ROUNDS + 1, episodes="all"),
    )
    texts = TextGenerator(seed=47)
    seconds: list[float] = []
    reference: list[float] = []
    formed: list[int] = []
    async with await MemoryManager.open(JID, config) as manager:
        for number in range(windows + 1):  # the first one warms up
            conversation = f"window-{number}"
            at = time.time() - 3600.0
            for offset, (role, text) in enumerate(window_lines(texts, 100 * number)):
                await manager.history.append(
                    conversation,
                    role="user" if role == "user" else "assistant",
                    sender=PARTNER if role == "user" else JID,
                    text=text,
                    at=at + 5.0 * offset,
                    peer=PARTNER,
                )
            started = time.perf_counter()
            report = await manager.form_memories()
            elapsed = time.perf_counter() - started
            await manager.flush()
            if report.windows != 1:
                raise RuntimeError(f"expected one window formed, got {report.windows}")
            turns = [
                {
                    "content": f"{'Alice' if role == 'user' else 'Bench'}: {text}",
                    "source_conversation": f"stored-{number}",
                }
                for role, text in window_lines(texts, 100 * number + 50)
            ]
            started = time.perf_counter()
            await manager.store_many(turns)
            stored = time.perf_counter() - started
            await manager.flush()
            if number:
                seconds.append(elapsed)
                reference.append(stored)
                formed.append(report.memories + report.reinforced)
        total = (await manager.stats()).total
    return {
        "size": size,
        "prefill_s": prefill_s,
        "memories_after": total,
        "memories_per_window": sum(formed) / len(formed),
        **_ms(seconds),
        "reference": _ms(reference),
        "ratio_p50": percentile(seconds, 50) / percentile(reference, 50),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.perf_formation",
        description=__doc__.split("\n")[0] if __doc__ else None,
    )
    add_common_arguments(parser, sizes=SIZES, quick=QUICK_SIZES)
    parser.add_argument("--appends", type=int, default=None, help="appends (default 500)")
    parser.add_argument("--windows", type=int, default=None, help="windows formed (default 30)")
    parser.add_argument(
        "--embedder",
        default="none",
        choices=("none", "hashing"),
        help="the memory's embedder (default none: keywords only)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    appends = args.appends or (100 if args.quick else 500)
    windows = args.windows or (5 if args.quick else 30)
    with scratch_dir(args.dir, "perf-append") as root:
        append = asyncio.run(measure_append(root, appends=appends, embedder=args.embedder))
    formation: list[dict[str, Any]] = []
    for size in sizes_from(args):
        with scratch_dir(args.dir, "perf-formation") as root:
            formation.append(
                asyncio.run(
                    measure_formation(root, size=size, windows=windows, embedder=args.embedder)
                )
            )
    print(f"## Conversation memory cost (embedder={args.embedder})\n")
    print(
        markdown_table(
            ["operation", "memories", "count", "p50 ms", "p95 ms", "max ms", "target p50"],
            [
                [
                    "history.append (one message)",
                    "–",
                    int(append["count"]),
                    append["p50_ms"],
                    append["p95_ms"],
                    append["max_ms"],
                    "≤ 5 ms",
                ],
                *(
                    [
                        f"form_memories() of one {ROUNDS}-round window",
                        f["size"],
                        int(f["count"]),
                        f["p50_ms"],
                        f["p95_ms"],
                        f["max_ms"],
                        f"≤ 50 ms ({f['ratio_p50']:.2f}× the reference)",
                    ]
                    for f in formation
                ),
                *(
                    [
                        f"reference: store_many of the window's {2 * ROUNDS} turns",
                        f["size"],
                        int(f["reference"]["count"]),
                        f["reference"]["p50_ms"],
                        f["reference"]["p95_ms"],
                        f["reference"]["max_ms"],
                        "",
                    ]
                    for f in formation
                ),
            ],
        )
    )
    for f in formation:
        print(
            f"\n{f['size']} memories: prefill {f['prefill_s']:.1f} s; "
            f"{f['memories_per_window']:.1f} memories formed per window",
            file=sys.stderr,
        )
    write_json(args.json, {"embedder": args.embedder, "append": append, "formation": formation})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
