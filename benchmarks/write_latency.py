"""Write latency with graph extraction against the document-only write.

A store is acknowledged once its SQLite transaction commits. With the graph
route, the memory's entities, relations and atoms are extracted first (jieba's
part-of-speech tagger for Chinese, patterns for both languages) and written in
the same transaction. This measures, per memory, on the same texts and the same
database settings:

- ``document``: tokenise the text and insert the memory and its keyword row
  (``BaseMemoryStore.insert`` without a graph: the write path before the graph);
- ``graph``: the same plus extraction and the graph rows (what ``store`` does);
- ``extract``: extraction alone, in process.

The ratio graph / document is given as the ratio of the two medians and as the
median of the ratios of each memory's two writes (made back to back, so that a
busy moment of a shared disk weighs on both alike).

English texts are LoCoMo dialog turns, Chinese ones CMRC 2018 paragraphs (both
read from the data folder). Each memory is one transaction, with ``synchronous``
FULL (the default: every acknowledged write survives a power loss) and NORMAL.
Embedding happens later, in the background, and is not part of either write.

Run from the repository root::

    .venv/bin/python -m benchmarks.write_latency
    .venv/bin/python -m benchmarks.write_latency --count 100 --write-md
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spade_memory.config import AtomConfig, StorageConfig
from spade_memory.storage.base import BaseMemoryStore, IndexedText, NewMemory
from spade_memory.text.atoms import memory_graph
from spade_memory.text.extraction import get_extractor
from spade_memory.text.tokenizer import Tokenizer, cut_cjk, get_tokenizer

from .data import load_cmrc, load_locomo, resolve_data_dir
from .metrics import markdown_table, percentile
from .relations import graph_section
from .report import command_line, run_note, update_markdown, write_json

__all__ = ["main", "measure", "texts"]

MODES = ("document", "graph")


def texts(data_dir: Path, count: int) -> dict[str, list[str]]:
    """``count`` English (LoCoMo turns) and Chinese (CMRC paragraphs) memory texts."""
    english = [
        turn.content
        for conversation in load_locomo(data_dir, limit=2)
        for session in conversation.sessions
        for turn in session.turns
    ][:count]
    chinese = [paragraph.text[:2000] for paragraph in load_cmrc(data_dir).paragraphs][:count]
    return {"en": english, "zh": chinese}


def _new(content: str, now: float) -> NewMemory:
    return NewMemory(
        uid=uuid.uuid4().hex,
        category="fact",
        content=content,
        context=None,
        confidence=1.0,
        importance=0.5,
        created_at=now,
    )


async def _write(
    store: BaseMemoryStore, content: str, mode: str, tokenizer: Tokenizer, atoms: AtomConfig
) -> float:
    """Seconds to acknowledge one write of ``content`` in ``mode``."""
    cut_cjk.cache_clear()  # no run cut by the other mode's write of the same text
    started = time.perf_counter()
    new = _new(content, time.time())
    text = IndexedText(" ".join(tokenizer.tokenize(content)))
    graph = None
    if mode == "graph":
        extraction = get_extractor().extract(content)
        graph = memory_graph(content, extraction, category="fact", importance=0.5, config=atoms)
    await store.insert(new, text, graph=graph)
    return time.perf_counter() - started


async def measure(
    items: Sequence[str], synchronous: str, rounds: int = 2
) -> dict[str, list[float]]:
    """Seconds to acknowledge each write of ``items``, per mode, each mode in a fresh database.

    The modes take turns memory by memory (the order swapped each time), so that a
    busy moment of the machine hits both alike.
    """
    tokenizer = get_tokenizer()
    atoms = AtomConfig()
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="write-latency-") as folder:
        stores = {
            mode: await BaseMemoryStore.open(
                Path(folder) / f"{mode}.db",
                agent="bench@localhost",
                storage=StorageConfig(synchronous=synchronous),  # type: ignore[arg-type]
            )
            for mode in MODES
        }
        try:
            for _ in range(rounds):
                for index, content in enumerate(items):
                    for mode in MODES if index % 2 else MODES[::-1]:
                        seconds[mode].append(
                            await _write(stores[mode], content, mode, tokenizer, atoms)
                        )
        finally:
            for store in stores.values():
                await store.aclose()
    return seconds


def extraction_seconds(items: Sequence[str]) -> list[float]:
    """Seconds to extract each text's graph and atoms (no database)."""
    extractor = get_extractor()
    atoms = AtomConfig()
    seconds = []
    cut_cjk.cache_clear()
    for content in items:
        started = time.perf_counter()
        memory_graph(
            content, extractor.extract(content), category="fact", importance=0.5, config=atoms
        )
        seconds.append(time.perf_counter() - started)
    return seconds


def _ms(values: Sequence[float], pct: float | None = None) -> str:
    value = statistics.fmean(values) if pct is None else percentile(values, pct)
    return f"{1000 * value:.2f}"


async def run(corpus: dict[str, list[str]]) -> dict[str, Any]:
    """Every measurement: ``{language: {synchronous: {mode: seconds}}, extract: ...}``."""
    get_tokenizer().warm_up()
    get_extractor().extract("热身：张伟在北京工作。Warm up.")
    results: dict[str, Any] = {}
    for language, items in corpus.items():
        results[language] = {"extract": extraction_seconds(items)}
        for synchronous in ("FULL", "NORMAL"):
            for mode, values in (await measure(items, synchronous)).items():
                results[language][f"{synchronous}/{mode}"] = values
    return results


def table(results: dict[str, Any], corpus: dict[str, list[str]]) -> str:
    rows = []
    for language, found in results.items():
        chars = statistics.fmean(len(t) for t in corpus[language])
        rows.append(
            [
                f"{language} (mean {chars:.0f} chars)",
                "extraction alone",
                _ms(found["extract"], 50),
                _ms(found["extract"], 95),
                _ms(found["extract"]),
                "",
                "",
            ]
        )
        for synchronous in ("FULL", "NORMAL"):
            document = found[f"{synchronous}/document"]
            graph = found[f"{synchronous}/graph"]
            ratio = statistics.median(graph) / statistics.median(document)
            paired = paired_ratio(graph, document)
            for mode, values in (("document", document), ("graph", graph)):
                rows.append(
                    [
                        "",
                        f"{mode}, synchronous={synchronous}",
                        _ms(values, 50),
                        _ms(values, 95),
                        _ms(values),
                        f"{ratio:.2f}×" if mode == "graph" else "",
                        f"{paired:.2f}×" if mode == "graph" else "",
                    ]
                )
    return markdown_table(
        [
            "texts",
            "write",
            "p50 ms",
            "p95 ms",
            "mean ms",
            "graph / document (p50)",
            "graph / document (median of pairs)",
        ],
        rows,
    )


def paired_ratio(graph: Sequence[float], document: Sequence[float]) -> float:
    """The median over memories of graph / document, each pair written back to back.

    The two writes of a pair run one right after the other, so a slow moment of a
    shared disk (a sync taking ten times longer for a second) slows both; the
    ratio of the two medians mixes such moments of one mode with quiet ones of
    the other.
    """
    return statistics.median(g / d for g, d in zip(graph, document, strict=True) if d > 0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.write_latency",
        description=__doc__.split("\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "--data", help="data folder (default: $SPADE_MEMORY_DATA or ../shared/data)"
    )
    parser.add_argument("--count", type=int, default=200, help="memories per language")
    parser.add_argument("--write-md", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--note", default="", help="a remark added to the BENCHMARKS.md run line")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    corpus = texts(resolve_data_dir(args.data), args.count)
    results = asyncio.run(run(corpus))
    text = table(results, corpus)
    print(text)
    markdown = "\n".join(
        [
            "### Write latency",
            "",
            f"Command: `{command_line('benchmarks.write_latency', argv)}`",
            "",
            f"{run_note(args.note)} Each memory is one transaction, written twice per mode "
            "into a fresh database on disk per mode, the modes taking turns memory by memory. "
            "`document` is the write without a graph, `graph` adds extraction and the graph "
            "rows in the same transaction.",
            "",
            text,
        ]
    )
    path = write_json(
        "write-latency",
        {
            "counts": {k: len(v) for k, v in corpus.items()},
            "seconds": results,
            "markdown": markdown,
        },
    )
    print(f"\nresults: {path}")
    if args.write_md:  # the write latency is a part of the Graph route section
        update_markdown("graph", graph_section(), heading="Graph route")
    return 0


if __name__ == "__main__":
    sys.exit(main())
