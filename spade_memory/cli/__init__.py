"""The ``spade-memory`` command.

Each subcommand lives in its own module and registers here with a function that
adds its arguments and a function that runs it and returns the exit status::

    spade-memory demo [--root DIR] [--in-memory] [--llm-url URL --model NAME]
    spade-memory ls | stats | search | show | export | import | check | rebuild |
                 backup | restore | forget | history | form | serve
                                             (see spade_memory.cli.subcommands)
    spade-memory import-spade-llm DIR        (see spade_memory.cli.spade_llm_import)

This module is an application: it prints. The library never does.
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .subcommands import SUBCOMMANDS

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, one-line help, argument setup and runner."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    from ..spade.demo import add_arguments

    add_arguments(parser)


def _run_demo(args: argparse.Namespace) -> int:
    import asyncio

    from ..spade.demo import options_from, run_demo

    return asyncio.run(run_demo(options_from(args)))


def _import_spade_llm_arguments(parser: argparse.ArgumentParser) -> None:
    from .spade_llm_import import add_arguments

    add_arguments(parser)


def _run_import_spade_llm(args: argparse.Namespace) -> int:
    from .spade_llm_import import import_spade_llm_command

    return import_spade_llm_command(args)


COMMANDS: list[Command] = [
    Command(
        name="demo",
        help="three LLM agents learn over XMPP, restart, and recall what they learnt",
        add_arguments=_demo_arguments,
        run=_run_demo,
    ),
    *(Command(name, text, add, run) for name, text, add, run in SUBCOMMANDS),
    Command(
        name="import-spade-llm",
        help="add spade_llm's memory files (DIR: *_base_memory.db, *_interactions.json)",
        add_arguments=_import_spade_llm_arguments,
        run=_run_import_spade_llm,
    ),
]


def build_parser(*, only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand of :data:`COMMANDS`.

    Args:
        only: set up the arguments of this subcommand alone (the others are
            listed with their help but take no arguments): what :func:`main`
            does, so that a command does not import what another needs to
            describe its options (``demo``'s come from the SPADE demo).
    """
    parser = argparse.ArgumentParser(
        prog="spade-memory", description="Long-term memory for SPADE agents."
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug)"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.help)
        if only is None or only == command.name:
            command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


def _command_in(argv: Sequence[str]) -> str:
    """The subcommand named in ``argv``: its first word that is not an option (the
    options before a subcommand, ``-v`` and ``-h``, take no values), or ``""``."""
    return next((word for word in argv if not word.startswith("-")), "")


def _encodable_output() -> None:
    """On a console whose encoding lacks a character of a memory (an ASCII or Latin-1
    terminal), print an escape for it instead of failing with a traceback."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``spade-memory`` with ``argv`` (default: the process arguments)."""
    words = sys.argv[1:] if argv is None else list(argv)
    _encodable_output()
    parser = build_parser(only=_command_in(words))
    args = parser.parse_args(words)
    if args.command is None:
        parser.print_help()
        return 2
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        status: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    return status
