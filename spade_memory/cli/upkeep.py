"""Subcommands that maintain a memory: ``check``, ``rebuild``, ``backup``, ``restore``."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from ..identity import AgentIdentity
from .common import (
    NotFound,
    memory_root,
    open_memory,
    out,
    print_json,
    progress_bar,
    run_command,
    say,
    table,
)

__all__ = ["backup", "check", "rebuild", "restore"]


def check(args: argparse.Namespace) -> int:
    from ..maintenance.consistency import CHECK_KINDS

    async def work() -> int:
        async with open_memory(args) as memory:
            await memory.flush()  # vectors still pending are not a problem
            async with progress_bar("checking") as progress:
                report = await memory.maintenance.check(
                    repair=args.repair, deep=not args.quick, progress=progress
                )
            if args.repair and report.problems:
                await memory.flush()
        failed = report.remaining if args.repair else report.problems
        if args.json:
            print_json(report.to_dict())
        else:
            rows = [
                (kind, CHECK_KINDS.get(kind, ""), count, report.fixed.get(kind, 0))
                for kind, count in report.found.items()
            ]
            if report.clean:
                say(f"{args.jid}: consistent")
            else:
                columns = ("kind", "what", "found", "fixed")
                title = f"{args.jid}: {report.problems} problems"
                out().print(table(title, columns, rows, wide="what"))
            for message in report.messages:
                say(f"integrity: {message}")
            if failed and not args.repair:
                say("run again with --repair to mend them")
        return 1 if failed else 0

    return run_command(work)


def rebuild(args: argparse.Namespace) -> int:
    async def work() -> int:
        results = []
        async with open_memory(args) as memory:
            async with progress_bar(f"rebuilding {args.what}") as progress:
                results = await memory.maintenance.rebuild(args.what, progress=progress)
            await memory.flush()
        if args.json:
            print_json([result.to_dict() for result in results])
            return 0
        rows = [(r.what, r.processed, r.replayed, r.resumed, r.generation) for r in results]
        columns = ("rebuilt", "memories", "replayed", "resumed", "generation")
        out().print(table(f"{args.jid}: rebuilt", columns, rows))
        return 0

    return run_command(work)


def backup(args: argparse.Namespace) -> int:
    async def work() -> int:
        from ..maintenance.backup import list_backups

        if args.list:
            root = memory_root(args)
            backups = list_backups(root, stem=AgentIdentity.of(args.jid).stem)
            if args.json:
                print_json([info.to_dict() for info in backups])
            else:
                rows = [(b.path.name, b.kind, b.size) for b in backups]
                out().print(table(f"backups of {args.jid}", ("file", "kind", "bytes"), rows))
            return 0
        async with open_memory(args) as memory:
            path = await memory.backup()
        if args.json:
            print_json({"path": str(path)})
        else:
            say(str(path))
        return 0

    return run_command(work)


def restore(args: argparse.Namespace) -> int:
    async def work() -> int:
        from ..maintenance.backup import BACKUP_FOLDER, restore_backup

        root = memory_root(args)
        identity = AgentIdentity.of(args.jid)
        backup = Path(args.backup).expanduser()
        if not backup.is_file() and (root / BACKUP_FOLDER / args.backup).is_file():
            backup = root / BACKUP_FOLDER / args.backup
        if not backup.is_file():
            raise NotFound(f"there is no backup file {args.backup}")
        saved = await asyncio.to_thread(restore_backup, root, identity.jid, backup)
        if args.json:
            print_json({"restored": str(backup.resolve()), "previous": str(saved)})
        else:
            say(f"restored {identity.jid} from {backup}; the previous memory: {saved}")
        return 0

    return run_command(work)
