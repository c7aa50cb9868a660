"""Ephemeral agents: memory in RAM only, nothing on disk, gone when they stop.

Two scouts run with ``MemoryConfig(in_memory=True)``. They store and recall facts
while they run; after they stop and start again their memory is empty, and the
memory folder they were given was never created.

    python examples/ephemeral_agents.py                     # embedded XMPP server
    python examples/ephemeral_agents.py --xmpp-host example.org --xmpp-port 5222
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from spade_memory import MemoryConfig
from spade_memory.spade.llm_agent import LLMAgent
from spade_memory.testing.xmpp_server import xmpp_endpoint


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="ephemeral-") as scratch:
        root = Path(scratch) / "memory"  # given, but never written in in-memory mode
        memory = MemoryConfig(in_memory=True, root=root, embedder="hashing")
        async with xmpp_endpoint(args.xmpp_host, args.xmpp_port) as xmpp:
            scout = LLMAgent(xmpp.jid("scout"), args.password, memory=memory, port=xmpp.port)
            base = LLMAgent(xmpp.jid("base"), args.password, memory=memory, port=xmpp.port)
            for agent in (scout, base):
                await asyncio.wait_for(agent.start(auto_register=True), 30)
            to = str(scout.jid)
            try:
                answer = await base.ask(to, "remember that the north bridge is closed")
                print(f"scout: {answer.body}")
                answer = await base.ask(to, "what do you know about the north bridge?")
                print("scout (while running): " + " ".join(str(answer.body).split()))
                print(f"scout memories while running: {len(await scout.memory.list())}")

                await scout.stop()
                await asyncio.wait_for(scout.start(auto_register=True), 30)
                print(f"scout memories after restart: {len(await scout.memory.list())}")
                answer = await base.ask(to, "what do you know about the north bridge?")
                print(f"scout (after restart): {answer.body}")
            finally:
                await scout.stop()
                await base.stop()
        files = list(root.rglob("*")) if root.exists() else []
        print(f"memory folder exists: {root.exists()}; files on disk: {len(files)}")
        return 0 if not root.exists() else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--xmpp-host", help="XMPP domain of a running server (default: embedded)")
    parser.add_argument("--xmpp-port", type=int, help="client port of that server")
    parser.add_argument("--password", default="secret", help="password of the agents' accounts")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
