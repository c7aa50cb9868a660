"""Three agents share memory over XMPP, each only as far as its owner allows.

The librarian lets the analyst query its facts, keeps its private notes to itself,
and lets no one else ask anything. The analyst asks the librarian's memory (as
its LLM would, with the ask_agent_memory tool); a visitor asks and is refused.
Then the librarian shares one memory with the analyst, which stores it with the
librarian as its source because it accepts memories from the librarian.

    python examples/shared_memory.py                     # embedded XMPP server
    python examples/shared_memory.py --xmpp-host example.org --xmpp-port 5222
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from spade_memory import MemoryConfig
from spade_memory.config import DEFAULT_CATEGORIES, SharingConfig
from spade_memory.errors import SharingError
from spade_memory.spade.llm_agent import LLMAgent
from spade_memory.testing.xmpp_server import xmpp_endpoint
from spade_memory.tools import ToolContext

CATEGORIES = (*DEFAULT_CATEGORIES, "private")
FACTS = [
    ("fact", "The Lisbon office opens on 3 March"),
    ("fact", "The Lisbon office has 40 desks"),
    ("private", "The Lisbon office budget is confidential"),
]


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="shared-") as scratch:
        root = args.root or Path(scratch)
        async with xmpp_endpoint(args.xmpp_host, args.xmpp_port) as xmpp:
            jids = {name: xmpp.jid(name) for name in ("librarian", "analyst", "visitor")}
            sharing = {
                "librarian": SharingConfig(allow={"fact": [jids["analyst"]]}),
                "analyst": SharingConfig(accept_from=frozenset({jids["librarian"]})),
                "visitor": SharingConfig(),
            }
            team = {
                name: LLMAgent(
                    jids[name],
                    args.password,
                    port=xmpp.port,
                    memory=MemoryConfig(
                        root=root, embedder="hashing", categories=CATEGORIES, sharing=sharing[name]
                    ),
                )
                for name in jids
            }
            for agent in team.values():
                await asyncio.wait_for(agent.start(auto_register=True), 30)
            librarian, analyst, visitor = team["librarian"], team["analyst"], team["visitor"]
            try:
                stored = [
                    await librarian.memory.store(text, category=category)
                    for category, text in FACTS
                ]
                print(f"librarian stored {len(stored)} memories (one private)")

                ask = next(t for t in analyst.memory_tools if t.name == "ask_agent_memory")
                result = await ask.call(
                    {"agent": jids["librarian"], "query": "Lisbon office"},
                    ToolContext(analyst.memory),
                )
                print("analyst asks the librarian's memory about the Lisbon office:")
                for line in result.text.splitlines()[1:]:
                    print("  " + line.split(" (id ")[0])

                try:
                    await visitor.sharing.ask(jids["librarian"], "Lisbon office")
                except SharingError as exc:
                    print(f"visitor asks too: {exc}")

                shared_id = await librarian.sharing.share(jids["analyst"], stored[1].id)
                copy = await analyst.memory.get(shared_id)
                print(f"analyst now remembers: {copy.content} (from {copy.source_sender})")
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
