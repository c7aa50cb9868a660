"""Two agents learn about each other through remember_interaction_info.

Alice and Bob are LLM agents with a memory each. Each tells the other something
about itself; the other's LLM keeps it as a note on their conversation
(remember_interaction_info). In later turns the note is recalled into the prompt,
so each answers with what it learnt about the other.

    python examples/two_agents_learn.py                     # embedded XMPP server
    python examples/two_agents_learn.py --xmpp-host example.org --xmpp-port 5222

With a host (or $SPADE_MEMORY_XMPP_HOST / $SPADE_MEMORY_XMPP_PORT) the same code
runs against a real XMPP server; the accounts are registered in-band or, if they
exist, logged into with --password.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from spade_memory import MemoryConfig, conversation_id_for
from spade_memory.spade.llm_agent import LLMAgent
from spade_memory.testing.xmpp_server import xmpp_endpoint


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="two-agents-") as scratch:
        root = args.root or Path(scratch)
        memory = MemoryConfig(root=root, embedder="hashing")
        async with xmpp_endpoint(args.xmpp_host, args.xmpp_port) as xmpp:
            alice = LLMAgent(xmpp.jid("alice"), args.password, memory=memory, port=xmpp.port)
            bob = LLMAgent(xmpp.jid("bob"), args.password, memory=memory, port=xmpp.port)
            await asyncio.wait_for(alice.start(auto_register=True), 30)
            await asyncio.wait_for(bob.start(auto_register=True), 30)
            try:
                for speaker, listener, text in [
                    (alice, bob, "note that Alice is a data scientist who likes tea"),
                    (bob, alice, "note that Bob runs the Lisbon office"),
                ]:
                    answer = await speaker.ask(str(listener.jid), text)
                    print(f"{speaker.name} -> {listener.name}: {text}")
                    print(f"{listener.name} -> {speaker.name}: {answer.body}")

                pair = conversation_id_for(alice.jid, bob.jid)
                for agent in (alice, bob):
                    notes = [note.content for note in await agent.memory.notes(pair)]
                    print(f"{agent.name}'s notes about this conversation: {notes}")

                question = await alice.ask(str(bob.jid), "hi Bob, who likes tea?")
                print(f"bob recalls: {question.body}")
                question = await bob.ask(str(alice.jid), "hi Alice, who runs the Lisbon office?")
                print(f"alice recalls: {question.body}")
            finally:
                await alice.stop()
                await bob.stop()
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
