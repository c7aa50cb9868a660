"""Turning a page's data into a response: HTML by a template (autoescaped), or JSON,
and the inspector's own static files, all with the security headers.

:func:`page` builds the context every page's template is rendered with, for an
agent's pages and for the agents page of ``spade-memory serve`` alike.
"""

from __future__ import annotations

import json
from functools import partial
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from .security import SECURITY_HEADERS, TOKEN_FIELD

__all__ = ["STATIC_FILES", "html", "json_body", "page", "static_file", "wants_json"]

STATIC_FILES: dict[str, str] = {
    "inspector.css": "text/css",
    "graph.js": "text/javascript",
    "inspector.js": "text/javascript",
}
"""The files under ``static/`` a page may load, with their content types."""

_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("spade_memory.web", "templates"),
    autoescape=True,  # every value is escaped: memories are untrusted text
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _merge_query(query: dict[str, str], **changes: object) -> str:
    """A page's query string with some parameters changed (for paging links)."""
    return urlencode({**query, **{name: str(value) for name, value in changes.items()}})


_ENVIRONMENT.filters["merge_query"] = _merge_query

_dumps = partial(json.dumps, ensure_ascii=False, default=str)


def wants_json(request: web.Request) -> bool:
    """Whether the caller asks for JSON: ``?format=json``, an ``Accept`` naming JSON
    before HTML, or a JSON body."""
    if request.query.get("format") == "json" or request.content_type == "application/json":
        return True
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept


def html(template: str, context: dict[str, Any], *, status: int = 200) -> web.Response:
    """``template`` rendered with ``context``."""
    text = _ENVIRONMENT.get_template(template).render(**context)
    return web.Response(
        text=text, status=status, content_type="text/html", headers=SECURITY_HEADERS
    )


def page(
    request: web.Request,
    template: str,
    data: dict[str, Any],
    *,
    active: str,
    static: str,
    base: str | None = None,
    home: tuple[str, str] | None = None,
    token: str = "",
    agent: str | None = None,
) -> web.Response:
    """A page: ``data`` as JSON when the caller asks for it (:func:`wants_json`), else
    ``template`` rendered with ``data`` and where the page stands.

    Args:
        request: the request the page answers (its query fills the paging links).
        template: the template under ``templates/``.
        data: what the page shows (its JSON).
        active: the menu entry to mark.
        static: the path of the inspector's static files.
        base: the path an agent's pages are under; ``None`` on the agents page.
        home: a link up (the SPADE agent page, the agents page), with its label.
        token: the token a change must carry; empty where nothing can be changed.
        agent: the JID of the agent the page is about.
    """
    if wants_json(request):
        return json_body(data)
    context = {
        "data": data,
        "base": base,
        "static": static,
        "home": home,
        "token": token,
        "token_field": TOKEN_FIELD,
        "active": active,
        "agent": agent,
        "query": dict(request.query),
    }
    return html(template, context)


def json_body(data: Any, *, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_dumps, headers=SECURITY_HEADERS)


async def static_file(request: web.Request) -> web.Response:
    """One of :data:`STATIC_FILES`, read from the package (nothing from elsewhere)."""
    name = request.match_info.get("name", "")
    content_type = STATIC_FILES.get(name)
    if content_type is None:
        raise web.HTTPNotFound(text=f"no static file {name!r}")
    body = resources.files("spade_memory.web").joinpath("static", name).read_bytes()
    headers = {**SECURITY_HEADERS, "Cache-Control": "max-age=300"}
    return web.Response(body=body, content_type=content_type, charset="utf-8", headers=headers)
