"""Subcommands on kept conversations: ``history`` (list, read, forget) and ``form``.

::

    spade-memory history JID                 the agent's conversations, the latest first
    spade-memory history JID CONV [--limit N] one conversation's messages, oldest first
    spade-memory history JID CONV --forget    forget it and what was formed only from it
    spade-memory form JID                     form every message not yet formed, now

``history`` takes ``--as JID``: only the conversations with that partner (it reads
and forgets its own conversations only). Reading changes nothing: no message is
formed by opening a memory to look (only ``form`` forms).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..identity import normalize_jid
from .common import (
    NotFound,
    Usage,
    embed_pending,
    open_memory,
    out,
    plural,
    print_json,
    run_command,
    say,
    short,
    table,
)

if TYPE_CHECKING:
    from ..formation.service import FormationReport
    from ..manager import MemoryManager
    from ..models import ConversationInfo

__all__ = ["form", "history"]


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _partner(args: argparse.Namespace) -> str | None:
    """The partner ``--as JID`` names; ``None`` without ``--as``."""
    jid = getattr(args, "as_jid", None)
    return None if jid is None else normalize_jid(jid)


async def _conversation(memory: MemoryManager, args: argparse.Namespace) -> ConversationInfo:
    """The conversation ``CONV`` names, as ``--as`` may see it.

    Raises:
        NotFound: it is not kept, or it is another partner's (the same message).
    """
    info = await memory.history.info(args.conversation)
    partner = _partner(args)
    if info is None or (partner is not None and info.peer != partner):
        raise NotFound(
            f"{memory.jid} keeps no conversation {args.conversation!r}"
            f"{'' if partner is None else f' with {partner}'} (see: spade-memory history "
            f"{memory.jid})"
        )
    return info


def history(args: argparse.Namespace) -> int:
    if args.forget:
        return _forget(args)
    if args.conversation is None:
        return _conversations(args)
    return _messages(args)


def _conversations(args: argparse.Namespace) -> int:
    async def work() -> int:
        async with open_memory(args) as memory:
            found = await memory.history.conversations(peer=_partner(args))
        if args.limit is not None:
            found = found[: args.limit]
        if args.json:
            print_json([asdict(info) for info in found])
            return 0
        rows = [
            (info.conversation_id, info.peer, info.messages, info.pending, _when(info.last_at))
            for info in found
        ]
        title = f"{plural(len(found), 'conversation')} of {args.jid}, the latest first"
        columns = ("conversation", "peer", "messages", "pending", "last (UTC)")
        out().print(table(title, columns, rows, wide="conversation"))
        return 0

    return run_command(work)


def _messages(args: argparse.Namespace) -> int:
    async def work() -> int:
        async with open_memory(args) as memory:
            info = await _conversation(memory, args)
            messages = await memory.history.messages(info.conversation_id, limit=args.limit)
        if args.json:
            print_json(
                {
                    "conversation": asdict(info),
                    "messages": [
                        {**asdict(m), "formed": m.id <= info.formed_through} for m in messages
                    ],
                }
            )
            return 0
        rows = [
            (
                m.id,
                _when(m.at),
                m.role,
                m.sender,
                "yes" if m.id <= info.formed_through else "no",
                short(m.text, 200),
            )
            for m in messages
        ]
        newest = "" if args.limit is None else f", the newest {args.limit}"
        title = (
            f"{plural(len(messages), 'message')} of {info.conversation_id} "
            f"({args.jid} with {info.peer}{newest}), oldest first"
        )
        columns = ("id", "time (UTC)", "role", "sender", "formed", "text")
        out().print(table(title, columns, rows, wide="text"))
        return 0

    return run_command(work)


def _forget(args: argparse.Namespace) -> int:
    async def work() -> int:
        if args.conversation is None:
            raise Usage("--forget needs the conversation: spade-memory history JID CONV --forget")
        async with open_memory(args) as memory:
            info = await _conversation(memory, args)
            before = (await memory.stats()).total
            removed = await memory.history.forget(info.conversation_id)
            memories = before - (await memory.stats()).total
        if args.json:
            print_json(
                {
                    "forgotten": info.conversation_id,
                    "messages": removed,
                    "memories": memories,
                }
            )
        else:
            say(
                f"forgot conversation {info.conversation_id} of {args.jid}: "
                f"{plural(removed, 'message')} and {plural(memories, 'memory')} formed only "
                "from them (older backups still hold them)"
            )
        return 0

    return run_command(work)


def form(args: argparse.Namespace) -> int:
    async def work() -> int:
        # counted in a look, which forms nothing (the memory opened to form
        # starts forming what is closed at once)
        async with open_memory(args) as memory:
            pending = await _pending(memory)
        if not pending:
            if args.json:
                print_json({"agent": args.jid, "pending_messages": 0, **asdict(_nothing())})
            else:
                say(f"{args.jid}: nothing to form (every kept message is formed)")
            return 0
        async with open_memory(args, embeds=True, forms=True) as memory:
            report = await memory.form_memories()
            left = await _pending(memory)
            await embed_pending(memory, show=not args.json)
        if args.json:
            print_json(
                {"agent": args.jid, "pending_messages": pending, **asdict(report), "left": left}
            )
            return 0
        say(f"{args.jid}: {plural(pending, 'message')} to form; {report_text(report)}")
        if left:
            say(f"{plural(left, 'message')} left pending (see: spade-memory history)")
        return 0

    return run_command(work)


async def _pending(memory: MemoryManager) -> int:
    """Kept messages not yet formed into memories."""
    return sum(info.pending for info in await memory.history.conversations())


def _nothing() -> FormationReport:
    from ..formation.service import FormationReport

    return FormationReport()


def report_text(report: FormationReport) -> str:
    """What one formation run did, in words."""
    return (
        f"{plural(report.windows, 'window')} formed ({report.by_llm} by an LLM, "
        f"the others by rules): {plural(report.memories, 'new memory', 'new memories')}, "
        f"{plural(report.reinforced, 'memory')} reinforced (told again), "
        f"{plural(report.discarded, 'window')} discarded (reset or forgotten meanwhile)"
    )
