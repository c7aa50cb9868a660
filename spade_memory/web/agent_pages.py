"""The memory pages in a SPADE agent's own web interface.

SPADE's ``WebApp`` (``agent.web``) serves an agent's pages once
``agent.web.start(hostname=..., port=...)`` runs; :func:`add_memory_pages` adds the
memory's pages to it (under ``/spade/memory``) and a "Memory" entry to its menu.
Nothing is served unless the agent's web interface is started.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..errors import StoreClosedError
from .routes import Inspected, MemoryPages
from .security import Guard, new_token

__all__ = ["MENU_ENTRY", "PREFIX", "AgentPages", "add_memory_pages"]

logger = logging.getLogger(__name__)

PREFIX = "/spade/memory"
"""Where an agent's memory pages are, in its web interface."""

MENU_ENTRY = "Memory"


class AgentPages:
    """The memory pages of one agent.

    Args:
        agent: the SPADE agent (its ``web`` is a ``spade.web.WebApp``).
        memory: the agent's memory when open (raises ``StoreClosedError`` when not).
    """

    def __init__(self, agent: Any, memory: Callable[[], Any]) -> None:
        self._agent = agent
        self._memory = memory
        self.token = new_token()
        """The token every change through these pages must carry (new for each agent
        object; shown in the pages themselves)."""
        self.pages = MemoryPages(self._resolve, Guard(lambda: agent.web.hostname))

    async def _resolve(self, request: web.Request) -> Inspected:
        try:
            manager = self._memory()
        except StoreClosedError as exc:
            raise web.HTTPServiceUnavailable(text=str(exc)) from None
        return Inspected(
            manager=manager,
            token=self.token,
            base=PREFIX,
            static=PREFIX + "/static",
            home=("/spade", "SPADE"),
        )

    def attach(self) -> bool:
        """Add the routes and the menu entry to the agent's ``WebApp``; ``False`` when
        its server already runs (routes can no longer be added: start it after the
        agent, or create the agent before starting its web interface)."""
        webapp = self._agent.web
        if webapp.app.frozen:
            logger.warning(
                "the web interface of %s already runs: its Memory pages are not added",
                self._agent.jid,
            )
            return False
        for method, path, handler in self.pages.routes(PREFIX):
            if method == "GET":
                webapp.add_get(path, handler, template=None, raw=True)
            else:
                webapp.add_post(path, handler, template=None, raw=True)
        webapp.add_menu_entry(MENU_ENTRY, PREFIX + "/", "fa fa-brain")
        return True


def add_memory_pages(agent: Any, memory: Callable[[], Any]) -> AgentPages | None:
    """Add the memory pages to ``agent``'s web interface; ``None`` when it has none
    or it already runs."""
    if getattr(agent, "web", None) is None:
        return None
    pages = AgentPages(agent, memory)
    return pages if pages.attach() else None
