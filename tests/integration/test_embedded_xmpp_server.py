"""EmbeddedXMPPServer: loopback only, file database, clean stop, redelivery after restart."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from spade.agent import Agent
from spade.behaviour import CyclicBehaviour
from spade.container import Container
from spade.message import Message

from spade_memory.errors import StoreClosedError, XMPPServerError
from spade_memory.testing.xmpp_server import EmbeddedXMPPServer, free_port


class Inbox(CyclicBehaviour):
    """Puts every received message on the agent's queue."""

    async def run(self) -> None:
        msg = await self.receive(timeout=1)
        if msg is not None and not self.is_killed():
            await self.agent.inbox.put(msg)


class Receiver(Agent):
    async def setup(self) -> None:
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.add_behaviour(Inbox())


class Sender(Agent):
    async def setup(self) -> None:
        self.outbox = Inbox()
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.add_behaviour(self.outbox)

    async def say(self, to: str, body: str) -> None:
        msg = Message(to=to, body=body)
        msg.set_metadata("performative", "inform")
        await self.outbox.send(msg)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def test_starts_on_a_free_loopback_port_and_stops(tmp_path: Path) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    server = EmbeddedXMPPServer(folder=tmp_path / "xmpp")
    with pytest.raises(XMPPServerError, match="not started"):
        _ = server.port
    async with server:
        assert server.running
        assert listening(server.port)
        assert (tmp_path / "xmpp" / "xmpp_accounts.db").is_file()
        assert server.jid("alice") == "alice@localhost"
        listeners = server._server._client_listener.sockets
        assert {sock.getsockname()[0] for sock in listeners} == {"127.0.0.1"}
        assert {sig: signal.getsignal(sig) for sig in before} == before
    assert not server.running
    assert not listening(server.port)
    await server.aclose()
    with pytest.raises(StoreClosedError):
        await server.start()


async def test_one_server_per_process_and_busy_port_are_refused(tmp_path: Path) -> None:
    async with EmbeddedXMPPServer(folder=tmp_path / "one") as first:
        with pytest.raises(XMPPServerError, match="already runs"):
            await EmbeddedXMPPServer(folder=tmp_path / "two").start()
        assert first.running
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(XMPPServerError, match="in use"):
            await EmbeddedXMPPServer(folder=tmp_path / "three", port=port).start()
    async with EmbeddedXMPPServer(folder=tmp_path / "four", port=free_port()) as again:
        assert again.running


@contextlib.asynccontextmanager
async def two_agents(tmp_path: Path, sender_name: str) -> AsyncIterator[tuple[Any, ...]]:
    """An embedded server, a started receiver (bob) and sender, talking over the socket."""
    Container().reset()
    async with EmbeddedXMPPServer(folder=tmp_path / "xmpp") as server:
        tag = uuid.uuid4().hex[:8]
        receiver = Receiver(server.jid(f"bob-{tag}"), "pw", port=server.port)
        sender = Sender(server.jid(f"{sender_name}-{tag}"), "pw", port=server.port)
        try:
            await asyncio.wait_for(receiver.start(), 20)
            await asyncio.wait_for(sender.start(), 20)
            Container().unregister(str(receiver.jid))  # over the socket, not in-process
            yield server, tag, receiver, sender
        finally:
            await sender.stop()
            await receiver.stop()


async def test_agent_receives_again_after_it_restarts(tmp_path: Path) -> None:
    async with two_agents(tmp_path, "alice") as (_, _, receiver, sender):
        await sender.say(str(receiver.jid), "first")
        assert (await asyncio.wait_for(receiver.inbox.get(), 10)).body == "first"
        await receiver.stop()
        await asyncio.wait_for(receiver.start(), 20)
        Container().unregister(str(receiver.jid))
        await sender.say(str(receiver.jid), "second")
        assert (await asyncio.wait_for(receiver.inbox.get(), 10)).body == "second"


async def test_a_message_carries_the_jid_its_client_logged_in_with(tmp_path: Path) -> None:
    async with two_agents(tmp_path, "carol") as (server, tag, receiver, sender):
        stanza = Message(to=str(receiver.jid), body="I am alice").prepare(sender.client)
        stanza["from"] = server.jid(f"alice-{tag}") + "/forged"  # claims to be alice
        stanza.send()
        got = await asyncio.wait_for(receiver.inbox.get(), 10)
        assert got.body == "I am alice"
        assert got.sender.bare == sender.jid.bare  # carol, as she logged in
