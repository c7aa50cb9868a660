"""A spade_llm agent whose memory is spade_memory: its memory tools and its MemoryBackend.

An ``LLMAgent`` of spade_llm (``pip install "spade-memory[spade-llm]"``) gets
spade_memory's tools (``store_memory``, ``search_memories``, ...); a user agent
asks it over XMPP to remember a fact and then asks about it in other words.
Afterwards spade_llm's own ``AgentBaseMemory``, on ``SpadeMemoryBackend``, reads
the same memory. The LLM is an OpenAI-format server: by default a small scripted
one started here, so the example needs no setup and no network.

    python examples/spade_llm_agent.py                     # embedded XMPP, scripted LLM
    python examples/spade_llm_agent.py --base-url http://localhost:11434/v1 --model qwen2.5
    python examples/spade_llm_agent.py --xmpp-host example.org --xmpp-port 5222
"""

from __future__ import annotations

import os

# LiteLLM (under spade_llm) fetches a price list from the network unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import re
import sys
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from spade.agent import Agent
from spade.behaviour import CyclicBehaviour
from spade.message import Message

from spade_memory import MemoryConfig, MemoryManager
from spade_memory.integrations.spade_llm import SpadeMemoryBackend, spade_llm_tools
from spade_memory.testing.xmpp_server import xmpp_endpoint

QUESTIONS = [
    "remember that the staging database password rotates every 30 days",
    "what do you know about database password rotation?",
]
SYSTEM_PROMPT = (
    "You are an operations assistant with a long-term memory. Store lasting facts with "
    "store_memory; before answering a question, look in your memory with search_memories."
)


class ScriptedLLM:
    """An OpenAI-format chat-completions server that answers with real tool calls.

    "remember that X" becomes ``store_memory``; "what do you know about X" becomes
    ``search_memories``; a tool result is answered with its text.
    """

    def __init__(self) -> None:
        self.requests = 0

    async def complete(self, request: web.Request) -> web.Response:
        self.requests += 1
        last = (await request.json())["messages"][-1]
        text = str(last.get("content") or "")
        message: dict[str, Any] = {"role": "assistant", "content": None}
        remember = re.match(r"(?i)\s*remember that (.+)", text)
        question = re.match(r"(?i)\s*what do you know about (.+?)\??\s*$", text)
        if last["role"] == "tool":
            lines = text.splitlines()
            message["content"] = f"I recall: {lines[1]}" if len(lines) > 1 else text
        elif remember:
            message["tool_calls"] = [
                self._call("store_memory", {"category": "fact", "content": remember[1]})
            ]
        elif question:
            message["tool_calls"] = [self._call("search_memories", {"query": question[1]})]
        else:
            message["content"] = "Tell me what to remember, or ask what I know."
        finish = "tool_calls" if "tool_calls" in message else "stop"
        return web.json_response(
            {
                "id": f"chatcmpl-{self.requests}",
                "object": "chat.completion",
                "created": 0,
                "model": "scripted",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    def _call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"call_{self.requests}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }


@asynccontextmanager
async def scripted_llm_server() -> AsyncIterator[tuple[str, ScriptedLLM]]:
    """Serve :class:`ScriptedLLM` on a free loopback port; yields its base URL."""
    llm = ScriptedLLM()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", llm.complete)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/v1", llm
    finally:
        await runner.cleanup()


class User(Agent):
    """Sends questions to the assistant over XMPP and waits for its answers."""

    class Inbox(CyclicBehaviour):
        async def run(self) -> None:
            message = await self.receive(timeout=1)
            if message is not None:
                await self.agent.answers.put(message)

    async def setup(self) -> None:
        self.answers: asyncio.Queue[Message] = asyncio.Queue()
        self.inbox = self.Inbox()
        self.add_behaviour(self.inbox)

    async def ask(self, to: str, text: str, timeout: float = 60) -> str:
        message = Message(to=to, body=text, thread=uuid.uuid4().hex)
        message.set_metadata("message_type", "llm")  # what spade_llm's LLMAgent listens to
        await self.inbox.send(message)
        answer = await asyncio.wait_for(self.answers.get(), timeout)
        return str(answer.body)


async def main(args: argparse.Namespace) -> int:
    # LiteLLM re-serialises every response with pydantic, which warns about its own models.
    warnings.filterwarnings("ignore", message="Pydantic serializer warnings", category=UserWarning)
    from spade_llm.agent import LLMAgent
    from spade_llm.memory import AgentBaseMemory
    from spade_llm.providers import LLMProvider

    async with (
        xmpp_endpoint(args.xmpp_host, args.xmpp_port) as xmpp,
        scripted_llm_server() as (
            scripted_url,
            scripted,
        ),
    ):
        with tempfile.TemporaryDirectory(prefix="spade-llm-memory-") as scratch:
            memory = MemoryConfig(in_memory=True) if args.in_memory else MemoryConfig(root=scratch)
            jid = xmpp.jid("assistant")
            async with await MemoryManager.open(jid, memory) as manager:
                provider = LLMProvider(
                    model=f"openai/{args.model}",
                    base_url=args.base_url or scripted_url,
                    api_key=args.api_key,
                    timeout=args.timeout,
                )
                assistant = LLMAgent(
                    jid,
                    args.password,
                    provider=provider,
                    system_prompt=SYSTEM_PROMPT,
                    tools=spade_llm_tools(manager),  # use 1: spade_memory's tools
                )
                user = User(xmpp.jid("user"), args.password)
                for agent in (assistant, user):
                    agent.xmpp_port = xmpp.port
                    await asyncio.wait_for(agent.start(auto_register=True), 30)
                try:
                    for question in QUESTIONS:
                        print(f"user: {question}")
                        answer = await user.ask(jid, question, timeout=args.timeout)
                        print(f"assistant: {answer}")
                finally:
                    await user.stop()
                    await assistant.stop()

                # use 2: spade_llm's AgentBaseMemory, kept and searched by spade_memory
                base = AgentBaseMemory(jid, backend=SpadeMemoryBackend(manager))
                query = "how often does the password change?"
                hits = await base.search_memories(query, limit=1)
                print(f"AgentBaseMemory.search_memories({query!r}):")
                for hit in hits:
                    print(f"  - [{hit.category}] {hit.content} (id {hit.id})")
                await base.cleanup()
                print(f"memories stored: {(await manager.stats()).total}")
        if not args.base_url:
            print(f"scripted LLM requests: {scripted.requests}")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="OpenAI-format endpoint (default: a scripted one)")
    parser.add_argument("--model", default="scripted", help="model name at that endpoint")
    parser.add_argument("--api-key", default="none", help="API key of that endpoint")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per LLM request")
    parser.add_argument("--in-memory", action="store_true", help="keep the memory in RAM only")
    parser.add_argument("--xmpp-host", help="XMPP domain of a running server (default: embedded)")
    parser.add_argument("--xmpp-port", type=int, help="client port of that server")
    parser.add_argument("--password", default="secret", help="password of the agents' accounts")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
