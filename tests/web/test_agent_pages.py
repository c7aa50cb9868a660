"""The Memory pages in a SPADE agent's own web interface: an agent with MemoryMixin on
the embedded XMPP server, its web interface started with ``agent.web.start``."""

from __future__ import annotations

import re
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from factories import hashing_config, unique_name
from spade.agent import Agent

from spade_memory.spade.mixin import MemoryMixin
from spade_memory.testing.xmpp_server import EmbeddedXMPPServer
from spade_memory.web.agent_pages import PREFIX

Starter = Callable[[Any], Awaitable[Any]]

# SPADE's web interface sets up aiohttp_jinja2, whose middleware keys requests by a
# string: aiohttp warns on every request SPADE's app serves (its own pages and ours)
pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")


class Keeper(MemoryMixin, Agent):
    async def setup(self) -> None:
        self.kept = await self.memory.store("Erin Park keeps the <b>spare</b> keys")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_an_agent_serves_its_memory_page(
    xmpp: EmbeddedXMPPServer, start: Starter, tmp_path: Path
) -> None:
    agent = Keeper(
        xmpp.jid(unique_name("keeper")), "pw", port=xmpp.port, memory=hashing_config(tmp_path)
    )
    assert agent.memory_pages is not None
    await start(agent)
    port = free_port()
    await agent.web.start(hostname="127.0.0.1", port=port)
    url = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/spade") as spade_page:
            assert spade_page.status == 200
            assert f'href="{PREFIX}/"' in await spade_page.text()  # the menu entry
        async with http.get(f"{url}{PREFIX}/") as page:
            assert page.status == 200
            text = await page.text()
        assert str(agent.memory.jid) in text
        assert "Erin Park keeps the &lt;b&gt;spare&lt;/b&gt; keys" in text
        token = re.search(r'name="memory-token" content="([^"]+)"', text)
        assert token is not None and token.group(1) == agent.memory_pages.token
        target = f"{url}{PREFIX}/memories/{agent.kept.id}"
        async with http.get(target, params={"format": "json"}) as one:
            assert (await one.json())["memory"]["id"] == agent.kept.id
        async with http.post(f"{target}/forget", data={"token": "nope"}) as refused:
            assert refused.status == 403
        assert (await agent.memory.get(agent.kept.id)).id == agent.kept.id
        async with http.post(
            f"{target}/forget",
            data={"token": token.group(1)},
            headers={"Origin": url},
            allow_redirects=False,
        ) as done:
            assert done.status == 303
        async with http.get(target) as gone:
            assert gone.status == 404
        assert await agent.memory.list() == []
