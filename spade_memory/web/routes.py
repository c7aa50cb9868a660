"""The memory pages of one agent: the routes, their handlers and their edits.

The same handlers serve an agent's own web interface (under ``/spade/memory``) and
``spade-memory serve`` (under ``/agents/{agent}``): each asks a resolver which
memory a request is about. Every page is HTML, or JSON with ``?format=json`` (or
``Accept: application/json``); every change is a POST carrying the agent's token
(see :mod:`.security`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from ..errors import (
    ConfigError,
    InvalidToolInput,
    MemoryNotFound,
    ScopeDenied,
    StorageError,
    StoreClosedError,
)
from . import views
from .render import html, json_body, page, static_file, wants_json
from .security import Guard, read_form

if TYPE_CHECKING:
    from ..manager import MemoryManager

__all__ = ["Handler", "Inspected", "MemoryPages", "Resolve", "error_response"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Inspected:
    """The memory a request is about and where its pages are.

    Attributes:
        manager: the agent's open memory.
        token: the token a change of it must carry.
        base: the path its pages are under (``/spade/memory``, ``/agents/<stem>``).
        static: the path of the inspector's static files.
        home: a link up (the SPADE agent page, the fleet), with its label.
    """

    manager: MemoryManager
    token: str
    base: str
    static: str
    home: tuple[str, str] | None = None


Resolve = Callable[[web.Request], Awaitable[Inspected]]

_EDITABLE = ("content", "category", "context")
_NUMBERS = ("importance", "confidence")


def error_response(request: web.Request, status: int, message: str) -> web.Response:
    """An error as JSON or as a small page."""
    if wants_json(request):
        return json_body({"error": message}, status=status)
    return html("error.html", {"status": status, "message": message}, status=status)


def _answering(handler: Handler) -> Handler:
    """Map the memory's errors to HTTP answers (404, 400, 403, 503)."""

    @functools.wraps(handler)
    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except MemoryNotFound as exc:
            return error_response(request, 404, str(exc))
        except (InvalidToolInput, ConfigError) as exc:
            return error_response(request, 400, str(exc))
        except ScopeDenied as exc:
            return error_response(request, 403, str(exc))
        except StoreClosedError as exc:
            return error_response(request, 503, str(exc))
        except StorageError as exc:  # a memory lost or damaged, and what to do about it
            return error_response(request, 503, str(exc))

    return answer


class MemoryPages:
    """The pages of an agent's memory.

    Args:
        resolve: the memory a request is about (raises an HTTP error when none).
        guard: the host, origin and token checks of the server.
    """

    def __init__(self, resolve: Resolve, guard: Guard) -> None:
        self._resolve = resolve
        self._guard = guard

    def routes(self, prefix: str) -> list[tuple[str, str, Handler]]:
        """``(method, path, handler)`` of every page under ``prefix`` (no trailing slash)."""
        gets: list[tuple[str, Handler]] = [
            ("/", self.overview),
            ("/search", self.search),
            ("/memories", self.memories),
            ("/memories/{id:[0-9]{1,19}}", self.memory),
            ("/conversations", self.conversations),
            ("/conversation", self.conversation),
            ("/maintenance", self.maintenance),
            ("/graph", self.graph),
            ("/graph/nodes/{id:[0-9]{1,19}}", self.node),
        ]
        posts: list[tuple[str, Handler]] = [
            ("/memories/{id:[0-9]{1,19}}/update", self.update),
            ("/memories/{id:[0-9]{1,19}}/pin", self.pin),
            ("/memories/{id:[0-9]{1,19}}/forget", self.forget),
            ("/memories/{id:[0-9]{1,19}}/archive", self.archive),
            ("/memories/{id:[0-9]{1,19}}/restore", self.restore),
        ]
        found = [("GET", prefix + path, _answering(handler)) for path, handler in gets]
        found.append(("GET", prefix + "/static/{name}", self.static))
        found += [("POST", prefix + path, _answering(handler)) for path, handler in posts]
        return found

    async def _open(self, request: web.Request) -> Inspected:
        self._guard.check_host(request)
        return await self._resolve(request)

    async def static(self, request: web.Request) -> web.Response:
        """A static file of the pages, to the hosts the pages answer to."""
        self._guard.check_host(request)
        return await static_file(request)

    @staticmethod
    def _page(
        request: web.Request,
        inspected: Inspected,
        template: str,
        data: dict[str, Any],
        active: str,
    ) -> web.Response:
        return page(
            request,
            template,
            data,
            active=active,
            static=inspected.static,
            base=inspected.base,
            home=inspected.home,
            token=inspected.token,
            agent=inspected.manager.jid,
        )

    # -- pages -----------------------------------------------------------------------

    async def overview(self, request: web.Request) -> web.Response:
        inspected = await self._open(request)
        data = await views.overview_view(inspected.manager)
        if wants_json(request):  # where scripts find the token their changes carry
            data["token"] = inspected.token
        return self._page(request, inspected, "overview.html", data, "overview")

    async def search(self, request: web.Request) -> web.Response:
        inspected = await self._open(request)
        data = await views.search_view(inspected.manager, request.query)
        return self._page(request, inspected, "search.html", data, "search")

    async def memories(self, request: web.Request) -> web.Response:
        inspected = await self._open(request)
        data = await views.list_view(inspected.manager, request.query)
        return self._page(request, inspected, "memories.html", data, "memories")

    async def memory(self, request: web.Request) -> web.Response:
        inspected = await self._open(request)
        data = await views.memory_view(inspected.manager, int(request.match_info["id"]))
        return self._page(request, inspected, "memory.html", data, "memories")

    async def conversations(self, request: web.Request) -> web.Response:
        inspected = await self._open(request)
        data = await views.conversations_view(inspected.manager)
        return self._page(request, inspected, "conversations.html", data, "conversations")

    async def conversation(self, request: web.Request) -> web.Response:
        inspected = await self._open(request)
        data = await views.conversation_view(inspected.manager, request.query)
        return self._page(request, inspected, "conversation.html", data, "conversations")

    async def maintenance(self, request: web.Request) -> web.Response:
        inspected = await self._open(request)
        data = await views.maintenance_view(inspected.manager)
        return self._page(request, inspected, "maintenance.html", data, "maintenance")

    async def graph(self, request: web.Request) -> web.Response:
        inspected = await self._open(request)
        data = await views.graph_view(inspected.manager, request.query)
        return self._page(request, inspected, "graph.html", data, "graph")

    async def node(self, request: web.Request) -> web.Response:
        inspected = await self._open(request)
        data = await views.node_view(inspected.manager, int(request.match_info["id"]))
        return self._page(request, inspected, "node.html", data, "graph")

    # -- changes -----------------------------------------------------------------------

    async def _change(self, request: web.Request) -> tuple[Inspected, int, Mapping[str, Any]]:
        """The memory a POST changes, its id and its fields, once the request is allowed."""
        inspected = await self._open(request)
        await self._guard.check_change(request, inspected.token)
        fields: Mapping[str, Any]
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except (ValueError, LookupError):  # not JSON, not its charset, no such charset
                raise InvalidToolInput("the body is not JSON") from None
            if not isinstance(body, dict):
                raise InvalidToolInput("the body must be a JSON object")
            fields = body
        else:
            fields = await read_form(request)
        return inspected, int(request.match_info["id"]), fields

    @staticmethod
    def _done(
        request: web.Request, inspected: Inspected, data: dict[str, Any], to: str
    ) -> web.Response:
        """The change's result as JSON, or a redirect (303) to the page ``to``."""
        if wants_json(request):
            return json_body(data)
        raise web.HTTPSeeOther(inspected.base + to)

    async def update(self, request: web.Request) -> web.Response:
        inspected, memory_id, fields = await self._change(request)
        manager = inspected.manager
        current = await manager.get(memory_id)
        changes: dict[str, Any] = {}
        for name in _EDITABLE:
            if name in fields:
                text = _text(name, fields[name])
                if text != (getattr(current, name) or ""):
                    changes[name] = text
        for name in _NUMBERS:
            if name in fields and str(fields[name]).strip() != "":
                number = _number(name, fields[name])
                if number != getattr(current, name):
                    changes[name] = number
        memory = await manager.update(memory_id, **changes) if changes else current
        data = {"memory": views.memory_dict(memory), "changed": sorted(changes)}
        return self._done(request, inspected, data, f"/memories/{memory_id}")

    async def pin(self, request: web.Request) -> web.Response:
        inspected, memory_id, fields = await self._change(request)
        importance = _number("importance", fields.get("importance", 1.0))
        memory = await inspected.manager.update(memory_id, importance=importance)
        data = {"memory": views.memory_dict(memory), "changed": ["importance"]}
        return self._done(request, inspected, data, f"/memories/{memory_id}")

    async def forget(self, request: web.Request) -> web.Response:
        inspected, memory_id, _ = await self._change(request)
        memory = await inspected.manager.get(memory_id)
        await inspected.manager.forget(memory.id)
        data = {"forgotten": memory.id, "uid": memory.uid}
        back = "/memories?" + urlencode({"status": memory.status})
        return self._done(request, inspected, data, back)

    async def archive(self, request: web.Request) -> web.Response:
        inspected, memory_id, _ = await self._change(request)
        memory = await inspected.manager.archive(memory_id)
        data = {"memory": views.memory_dict(memory)}
        return self._done(request, inspected, data, f"/memories/{memory_id}")

    async def restore(self, request: web.Request) -> web.Response:
        inspected, memory_id, _ = await self._change(request)
        memory = await inspected.manager.restore_archived(memory_id)
        data = {"memory": views.memory_dict(memory)}
        return self._done(request, inspected, data, f"/memories/{memory_id}")


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidToolInput(f"{name} must be text")
    return value.replace("\r\n", "\n")


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidToolInput(f"{name} must be a number between 0 and 1, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # 10**400 is no float
        shown = value if not isinstance(value, int) else f"an integer of {len(str(value))} digits"
        raise InvalidToolInput(f"{name} must be a number between 0 and 1, got {shown!r}") from None
    if not 0.0 <= number <= 1.0:
        raise InvalidToolInput(f"{name} must be a number between 0 and 1, got {number}")
    return number
