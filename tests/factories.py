"""Builders the tests share: memory configurations, filled memories, agent doubles,
plain XMPP clients, unique JIDs, and repository scripts run in a process of their own.

Imported as ``from factories import ...`` (the tests folder is on ``sys.path``); the
fixtures that use them live in ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from slixmpp import JID
from spade.agent import Agent
from spade.behaviour import CyclicBehaviour
from spade.message import Message

from spade_memory.config import MemoryConfig, StorageConfig
from spade_memory.manager import MemoryManager
from spade_memory.models import Memory

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

# The memory tools every agent gets, in the order they are registered.
MEMORY_TOOL_NAMES = (
    "store_memory",
    "search_memories",
    "list_memories",
    "remember_interaction_info",
    "forget_memory",
)


UNDO_ALIASES = ("DROP TABLE memory_aliases", "PRAGMA user_version = 13")
"""Statements taking a database of schema v14 back to v13 (before the uids a memory
stands for were kept)."""

UNDO_GIVEN = (
    *UNDO_ALIASES[:-1],
    "DROP TABLE memory_given",
    "ALTER TABLE derive_pending DROP COLUMN told_at",
    "PRAGMA user_version = 12",
)
"""Statements taking a database of schema v14 back to v12 (before the entities and
relations named for a memory were kept)."""

UNDO_CONTEXT_VECTORS = (*UNDO_GIVEN[:-1], "PRAGMA user_version = 10")
"""Statements taking a database of schema v14 back to v10 (before turns were embedded
with the turn before them: v11 and v12 changed no table)."""

UNDO_DERIVATION = (
    *UNDO_GIVEN[:-1],
    "DROP TABLE derive_pending",
    "PRAGMA user_version = 9",
)
"""Statements taking a database of schema v14 back to v9 (before background derivation)."""

UNDO_CONVERSATIONS = (
    *UNDO_DERIVATION[:-1],
    "DROP TABLE memory_sources",
    "DROP TABLE conversation_messages",
    "DROP TABLE conversations",
    "PRAGMA user_version = 8",
)
"""Statements taking a database of schema v14 back to v8 (before the conversation store)."""

UNDO_CHECKSUMS = (
    *UNDO_CONVERSATIONS[:-1],
    "DROP TABLE memory_checksums",
    "PRAGMA user_version = 7",
)
"""Statements taking a database of schema v14 back to v7 (before row checksums)."""

UNDO_CONTENT_KEYS = (
    *UNDO_CHECKSUMS[:-1],
    "DROP INDEX memories_by_content_key",
    "ALTER TABLE memories DROP COLUMN content_key",
    "PRAGMA user_version = 6",
)
"""Statements taking a database of schema v14 back to v6 (before content keys)."""

UNDO_SCOPES = (
    *UNDO_CONTENT_KEYS[:-1],
    "DROP INDEX memories_scope",
    "DROP INDEX memories_not_global",
    "DROP INDEX memories_by_owner",
    "DROP TABLE memory_readers",
    "ALTER TABLE memories DROP COLUMN visibility",
    "ALTER TABLE memories DROP COLUMN owner",
    "PRAGMA user_version = 5",
)
"""Statements taking a database of schema v14 back to v5 (before scopes)."""


def hashing_config(root: Path | None = None, **storage: Any) -> MemoryConfig:
    """A memory under ``root`` (in memory when None) with the offline hashing embedder.

    Keyword arguments are :class:`StorageConfig` fields.
    """
    extra: dict[str, Any] = {"storage": StorageConfig(**storage)} if storage else {}
    if root is None:
        return MemoryConfig(in_memory=True, embedder="hashing", **extra)
    return MemoryConfig(root=root, embedder="hashing", **extra)


async def fill(memory: MemoryManager, texts: Iterable[str], **fields: Any) -> list[Memory]:
    """Store each text as one memory in a single batch; ``fields`` apply to every one."""
    return await memory.store_many([{"content": text, **fields} for text in texts])


def held(
    work: Callable[[sqlite3.Connection], Any],
    where: str,
    started: threading.Event,
    go_on: threading.Event,
) -> Callable[[sqlite3.Connection], None]:
    """A write transaction's ``work`` that then stops until ``go_on``: inside its
    COMMIT (``where="commit"``, as a slow disk sync; the first step SQLite takes after
    the work is the COMMIT's) or at the end of the work (``"work"``)."""

    def stopped(conn: sqlite3.Connection) -> None:
        work(conn)

        def stop() -> int:
            conn.set_progress_handler(None, 1)
            started.set()
            go_on.wait(10)
            return 0

        if where == "commit":
            conn.set_progress_handler(stop, 1)
        else:
            stop()

    return stopped


def unique_name(name: str) -> str:
    """``name`` with a random suffix, so agents of one run never meet a stale account."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


class AgentDouble:
    """What a behaviour needs of an agent, without XMPP: a JID, a memory and a loop."""

    def __init__(self, manager: MemoryManager, jid: str) -> None:
        self.jid = JID(jid)
        self.memory = manager
        self.loop = asyncio.get_running_loop()
        self.presence = None
        self.web = None


def child_env(**extra: str) -> dict[str, str]:
    """This environment for a child Python: the repository importable, no XMPP override."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    for name in ("SPADE_MEMORY_XMPP_HOST", "SPADE_MEMORY_XMPP_PORT"):
        env.pop(name, None)
    env.update(extra)
    return env


def run_python(
    *args: str,
    cwd: Path,
    timeout: float = 90,
    prefix: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` (after ``prefix``, e.g. ``unshare``) in ``cwd``; output as text."""
    return subprocess.run(
        [*prefix, sys.executable, *args],
        cwd=cwd,
        env=child_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class _Inbox(CyclicBehaviour):
    """Keeps every message its agent receives."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[Message] = []
        self.arrived = asyncio.Event()

    async def run(self) -> None:
        msg = await self.receive(timeout=0.5)
        if msg is not None:
            self.messages.append(msg)
            self.arrived.set()


class _Once(CyclicBehaviour):
    def __init__(self, msg: Message) -> None:
        super().__init__()
        self.msg = msg

    async def run(self) -> None:
        await self.send(self.msg)
        self.kill()


class Client(Agent):  # type: ignore[misc]
    """A plain XMPP account (no memory, no LLM): sends messages, keeps what it receives."""

    async def setup(self) -> None:
        self.inbox = _Inbox()
        self.add_behaviour(self.inbox)

    async def _hook_plugin_after_connection(self, *args: Any, **kwargs: Any) -> None:
        # a ping is answered once the server has handled the session's first presence,
        # so that replies to this account's bare JID find it (as LLMAgent does)
        with contextlib.suppress(Exception):
            await self.client["xep_0199"].ping(timeout=10)

    async def send(self, msg: Message) -> None:
        """Send ``msg`` from this account."""
        once = _Once(msg)
        self.add_behaviour(once)
        await once.join(10)

    async def reply_on(self, thread: str, timeout: float = 10.0) -> Message:
        """The first message received on ``thread`` (waiting up to ``timeout`` seconds)."""
        return await self._first(lambda msg: msg.thread == thread, timeout)

    async def _first(self, wanted: Callable[[Message], bool], timeout: float) -> Message:
        async def wait() -> Message:
            while True:
                for msg in self.inbox.messages:
                    if wanted(msg):
                        self.inbox.messages.remove(msg)
                        return msg
                self.inbox.arrived.clear()
                await self.inbox.arrived.wait()

        return await asyncio.wait_for(wait(), timeout)

    async def say(
        self,
        to: str,
        body: str,
        *,
        thread: str | None = None,
        timeout: float = 10.0,
        **metadata: str,
    ) -> Message:
        """Send ``body`` to ``to`` (on ``thread``, else a fresh one) and return the reply.

        The reply is the message whose ``in-reply-to`` repeats this one's ``reply-with``.
        """
        key = uuid.uuid4().hex
        msg = Message(
            to=to, body=body, thread=thread or f"t-{key}", metadata={**metadata, "reply-with": key}
        )
        await self.send(msg)
        return await self._first(lambda m: m.get_metadata("in-reply-to") == key, timeout)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``spade-memory ARGV`` in this process: its exit status, stdout and stderr."""
    from spade_memory.cli import main

    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def run_cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """Run ``spade-memory ARGV --json``, which must succeed; its output, parsed."""
    status, out, err = run_cli(capsys, *argv, "--json")
    assert status == 0, err
    return json.loads(out)
