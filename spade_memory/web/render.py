"""Turning a page's data into a response: HTML by a template (autoescaped), or JSON,
and the inspector's own static files, all with the security headers.
"""

from __future__ import annotations

import json
from functools import partial
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from .security import SECURITY_HEADERS

__all__ = ["STATIC_FILES", "html", "json_body", "static_file", "wants_json"]

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
