"""A team whose coordinator stores the facts it is told and answers from memory.

A researcher and a planner (LLM agents) report facts to the coordinator; its LLM
stores each one with store_memory, with the reporter as the source. A client
agent then asks questions; the coordinator's LLM looks them up with
search_memories and answers from what it stored. The team shares what it tells
the coordinator (``ScopePolicy(mode="shared")``); by default what a partner tells
an agent is that partner's alone.

    python examples/team_coordinator.py                     # embedded XMPP server
    python examples/team_coordinator.py --xmpp-host example.org --xmpp-port 5222
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from spade_memory import MemoryConfig, ScopePolicy
from spade_memory.spade.llm_agent import LLMAgent
from spade_memory.testing.xmpp_server import xmpp_endpoint

REPORTS = [
    ("researcher", "remember that the customer survey closes on Friday"),
    ("researcher", "remember that 62% of customers want a mobile app"),
    ("planner", "remember that the release review is usually on Thursdays"),
    ("planner", "remember that Ana prefers morning meetings"),
]
QUESTIONS = [
    "what do you know about the survey?",
    "what do you know about the release review?",
    "what do you know about Ana?",
    "list your memories",
]


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="team-") as scratch:
        memory = MemoryConfig(
            root=args.root or Path(scratch),
            embedder="hashing",
            scope=ScopePolicy(mode="shared"),  # one memory for the whole team
        )
        async with xmpp_endpoint(args.xmpp_host, args.xmpp_port) as xmpp:
            team = {
                name: LLMAgent(xmpp.jid(name), args.password, memory=memory, port=xmpp.port)
                for name in ("coordinator", "researcher", "planner", "client")
            }
            for agent in team.values():
                await asyncio.wait_for(agent.start(auto_register=True), 30)
            coordinator = str(team["coordinator"].jid)
            try:
                for reporter, fact in REPORTS:
                    answer = await team[reporter].ask(coordinator, fact)
                    print(f"{reporter}: {fact}")
                    print(f"coordinator: {answer.body}")

                stored = await team["coordinator"].memory.list()
                print(f"coordinator stored {len(stored)} memories:")
                for item in reversed(stored):
                    source = f"from {item.source_sender}"
                    print(f"  #{item.id} [{item.category}] {item.content} ({source})")

                for question in QUESTIONS:
                    answer = await team["client"].ask(coordinator, question)
                    print(f"client: {question}")
                    print("coordinator: " + "\n  ".join(str(answer.body).splitlines()))
            finally:
                for agent in team.values():
                    await agent.stop()
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--xmpp-host", help="XMPP domain of a running server (default: embedded)")
    parser.add_argument("--xmpp-port", type=int, help="client port of that server")
    parser.add_argument("--password", default="secret", help="password of the agents' accounts")
    parser.add_argument("--root", type=Path, help="memory folder to keep (default: temporary)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
