"""``spade-memory serve``: the memory pages of every agent of a memory root.

The fleet page lists the agents (their files' sizes, memory counts and last
activity, read without opening them) and searches one or all of them; each agent's
pages are those of its own web interface, under ``/agents/<stem>``. An agent's
memory is opened on its first page and stays open until the server stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..errors import InvalidToolInput, StorageError
from ..limits import LIMITS
from ..storage.agent_listing import list_agents
from ..storage.registry import Registry
from . import views
from .render import page
from .routes import Inspected, MemoryPages, error_response
from .security import Guard, new_token

if TYPE_CHECKING:
    from ..manager import MemoryManager

__all__ = ["Fleet", "Opener"]

logger = logging.getLogger(__name__)

Opener = Callable[[Path, str], Awaitable["MemoryManager"]]
"""Opens the memory of an agent (its JID) under a root."""


class Fleet:
    """The pages of every agent of a memory root.

    Args:
        root: the memory root.
        open_memory: opens one agent's memory (the command chooses its embedder).
        host: the host the server listens on (a loopback one: only requests naming
            a loopback host are answered).
    """

    def __init__(self, root: Path, open_memory: Opener, *, host: str) -> None:
        self._root = root
        self._registry = Registry(root)
        self._open_memory = open_memory
        self._guard = Guard(lambda: host)
        self._managers: dict[str, MemoryManager] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._tokens: dict[str, str] = {}
        self._pages = MemoryPages(self._resolve, self._guard)

    def agents(self) -> dict[str, str]:
        """``{stem: JID}`` of the root's agents, read as the registry is now, so an
        agent created while the server runs is listed and served at once (the registry
        decodes its file again only when it changed)."""
        return self._registry.agents()

    async def manager(self, stem: str) -> MemoryManager:
        """The open memory of the agent ``stem`` (opened on first use).

        Raises:
            HTTPNotFound: the root has no such agent.
        """
        jid = self.agents().get(stem)
        if jid is None:
            raise web.HTTPNotFound(text=f"{self._root} holds no agent {stem!r}")
        lock = self._opening.setdefault(stem, asyncio.Lock())
        async with lock:
            manager = self._managers.get(stem)
            if manager is None or manager.closed:
                manager = await self._open_memory(self._root, jid)
                self._managers[stem] = manager
        return manager

    def token(self, stem: str) -> str:
        return self._tokens.setdefault(stem, new_token())

    async def _resolve(self, request: web.Request) -> Inspected:
        stem = request.match_info["agent"]
        manager = await self.manager(stem)
        return Inspected(
            manager=manager,
            token=self.token(stem),
            base=f"/agents/{stem}",
            static="/static",
            home=("/", "All agents"),
        )

    def app(self) -> web.Application:
        """The aiohttp application (its cleanup closes the memories it opened)."""
        app = web.Application()
        app.router.add_get("/", self.index)
        app.router.add_get("/search", self.search)
        app.router.add_get("/static/{name}", self._pages.static)
        for method, path, handler in self._pages.routes("/agents/{agent}"):
            app.router.add_route(method, path, handler)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _app: web.Application) -> None:
        managers, self._managers = list(self._managers.values()), {}
        for manager in managers:
            if not manager.closed:
                await manager.aclose()

    def _rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for listing in list_agents(self._root, self.agents()):
            last = listing.last_activity
            rows.append(
                {
                    **listing.as_dict(),
                    "last_activity_text": None
                    if last is None
                    else datetime.fromtimestamp(last, UTC).strftime("%Y-%m-%d %H:%M:%S"),
                    "open": listing.stem in self._managers,
                }
            )
        return rows

    async def index(self, request: web.Request) -> web.Response:
        self._guard.check_host(request)
        rows = await asyncio.to_thread(self._rows)
        data = {"root": str(self._root), "agents": rows}
        return page(request, "fleet.html", data, active="fleet", static="/static")

    async def search(self, request: web.Request) -> web.Response:
        """Search one agent (``agent=<stem>``) or all, with explanations."""
        self._guard.check_host(request)
        query = request.query
        text = query.get("q", "").strip()
        chosen = query.get("agent", "").strip()
        agents = self.agents()
        if chosen and chosen not in agents:
            return error_response(request, 404, f"{self._root} holds no agent {chosen!r}")
        stems = [chosen] if chosen else sorted(agents, key=lambda stem: agents[stem])
        found: list[dict[str, Any]] = []
        skipped: list[dict[str, str]] = []
        limit = LIMITS.search_limit
        try:
            if text:
                for stem in stems:
                    try:
                        manager = await self.manager(stem)
                    except StorageError as exc:  # lost or damaged: the others are searched
                        skipped.append({"agent": agents[stem], "reason": str(exc)})
                        continue
                    data = await views.search_view(manager, query)
                    limit = int(data["limit"])  # of the whole page, not of each agent
                    found.extend(
                        {**result, "agent": manager.jid, "stem": stem} for result in data["results"]
                    )
        except InvalidToolInput as exc:
            return error_response(request, 400, str(exc))
        found.sort(key=lambda result: -float(result["score"]))
        data = {
            "query": text,
            "agent": chosen or None,
            "agents": [{"stem": stem, "jid": jid} for stem, jid in agents.items()],
            "results": found[:limit],
            "skipped": skipped,
        }
        return page(request, "fleet_search.html", data, active="fleet", static="/static")
