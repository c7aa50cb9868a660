"""CMRC 2018 paragraph retrieval: does a Chinese question find its own paragraph?

Every paragraph of the CMRC 2018 trial set is one memory of a single agent
(stored through the public API, the paragraph id in metadata); every question
is a search with ``limit=10``. A hit is the question's own paragraph.

Run from the repository root::

    .venv/bin/python -m benchmarks.cmrc
    .venv/bin/python -m benchmarks.cmrc --systems keyword --paragraphs 50

Paragraph vectors are kept in the on-disk embedding cache of the LoCoMo benchmark
(``benchmarks/results/.cache`` or ``$SPADE_MEMORY_BENCH_CACHE``); index times of a
run that used it are reported as ``cached``: ``--no-cache`` gives fresh-index times.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .data import CmrcData, load_cmrc, resolve_data_dir
from .harness import (
    SPADE_MEMORY_SYSTEMS,
    EmbedderName,
    System,
    build_memory,
    default_cache_dir,
    parse_overrides,
    query_memory,
    warm_up,
)
from .metrics import Aggregate, aggregate, markdown_table, percentile, score_question
from .report import (
    command_line,
    configure_logging,
    run_note,
    update_markdown,
    write_json,
)

__all__ = ["CmrcRun", "cmrc_batches", "main", "run_cmrc"]

logger = logging.getLogger("benchmarks.cmrc")

ALL_SYSTEMS = tuple(SPADE_MEMORY_SYSTEMS)
LIMIT = 10
BATCH = 64


class CmrcRun:
    """One system's results: aggregate metrics and timings."""

    def __init__(
        self,
        system: System,
        summary: Aggregate,
        index_seconds: float,
        query_seconds: Sequence[float],
        shared_with: str | None,
        cached: bool = False,
    ) -> None:
        self.system = system
        self.summary = summary
        self.index_seconds = index_seconds
        self.query_seconds = list(query_seconds)
        self.shared_with = shared_with
        self.cached = cached

    @property
    def p50_ms(self) -> float:
        return 1000 * percentile(self.query_seconds, 50) if self.query_seconds else 0.0


def cmrc_batches(data: CmrcData, *, size: int = BATCH) -> list[list[dict[str, Any]]]:
    """``store_many`` batches: one memory per paragraph, ``size`` paragraphs a batch."""
    items = [
        {"content": p.text, "metadata": {"paragraph_id": p.id, "title": p.title}}
        for p in data.paragraphs
    ]
    return [items[start : start + size] for start in range(0, len(items), size)]


async def run_cmrc(
    data: CmrcData,
    systems: Sequence[System],
    *,
    base_overrides: Mapping[str, Any],
    cache: Path | None = None,
) -> list[CmrcRun]:
    """Build the memory once per embedder, then search every question with each system.

    ``cache`` is a folder for the document embedding cache (``None``: none).
    """
    queries = [question.text for question in data.questions]
    gold = [question.paragraph_id for question in data.questions]
    runs: list[CmrcRun] = []
    with tempfile.TemporaryDirectory(prefix="cmrc-bench-") as folder:
        built: dict[EmbedderName | None, tuple[Path, float, str]] = {}
        for system in systems:
            shared_with = None
            if system.embedder in built:
                root, seconds, shared_with = built[system.embedder]
            else:
                warm_up(system.embedder)
                root = Path(folder) / (system.embedder or "keyword")
                seconds = await build_memory(root, system.embedder, cmrc_batches(data), cache=cache)
                built[system.embedder] = (root, seconds, system.name)
                logger.info(
                    "%d paragraphs indexed for %s in %.1f s",
                    len(data.paragraphs),
                    system.name,
                    seconds,
                )
            run = await query_memory(
                root,
                system,
                queries,
                key="paragraph_id",
                limit=LIMIT,
                base_overrides=base_overrides,
            )
            scores = [
                score_question(ranking, [answer], group="cmrc")
                for ranking, answer in zip(run.rankings, gold, strict=True)
            ]
            cached = cache is not None and system.embedder is not None
            runs.append(
                CmrcRun(system, aggregate(scores), seconds, run.seconds, shared_with, cached)
            )
    return runs


def table(runs: Sequence[CmrcRun]) -> str:
    """hit@1, hit@5, hit@10, MRR@10, index time and median query time per system."""
    return markdown_table(
        ["system", "hit@1", "hit@5", "hit@10", "MRR@10", "index s", "query p50 ms"],
        [
            [
                run.system.name,
                run.summary.hit1,
                run.summary.hit5,
                run.summary.hit10,
                run.summary.mrr10,
                ("cached" if run.cached else f"{run.index_seconds:.1f}")
                + (f" (shared with {run.shared_with})" if run.shared_with else ""),
                f"{run.p50_ms:.1f}",
            ]
            for run in runs
        ],
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cmrc")
    parser.add_argument(
        "--data", help="data folder (default: $SPADE_MEMORY_DATA or ../shared/data)"
    )
    parser.add_argument("--paragraphs", type=int, help="only the first N paragraphs")
    parser.add_argument(
        "--systems",
        default=",".join(ALL_SYSTEMS),
        help=f"comma-separated of {', '.join(ALL_SYSTEMS)}",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a RetrievalConfig override for every system (repeatable)",
    )
    parser.add_argument(
        "--cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep paragraph vectors in an on-disk cache (default: on; --no-cache gives "
        "fresh-index times)",
    )
    parser.add_argument("--write-md", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--note", default="", help="a sentence added to the BENCHMARKS.md section")
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    configure_logging(args.verbose)
    names = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = sorted(set(names) - set(ALL_SYSTEMS))
    if unknown:
        raise SystemExit(f"unknown system(s) {unknown}; choose from {', '.join(ALL_SYSTEMS)}")
    try:
        base_overrides = parse_overrides(args.config)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    data = load_cmrc(resolve_data_dir(args.data), limit=args.paragraphs)
    systems = [SPADE_MEMORY_SYSTEMS[name] for name in names]
    cache = default_cache_dir() if args.cache else None
    runs = asyncio.run(run_cmrc(data, systems, base_overrides=base_overrides, cache=cache))
    facts = f"{len(data.paragraphs)} paragraphs, {len(data.questions)} questions."
    text = table(runs)
    print(f"{facts}\n\n{text}")
    path = write_json(
        "cmrc",
        {
            "overrides": base_overrides,
            "facts": facts,
            "systems": {
                run.system.name: {
                    "description": run.system.description,
                    "index_seconds": run.index_seconds,
                    "index_shared_with": run.shared_with,
                    "index_cached": run.cached,
                    "query_p50_ms": run.p50_ms,
                    "summary": run.summary.as_dict(),
                }
                for run in runs
            },
        },
    )
    print(f"\nresults: {path}")
    if args.write_md:
        body = "\n".join(
            [
                f"Command: `{command_line('benchmarks.cmrc', argv)}`",
                "",
                f"{run_note(args.note)} {facts} "
                "A hit is the question's own paragraph; index time is store + embedding, "
                "measured without the embedding cache (`cached`: the run reused cached "
                "paragraph vectors, so no fresh-index time).",
                "",
                text,
            ]
        )
        update_markdown("cmrc", body, heading="CMRC 2018 paragraph retrieval (Chinese)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
