"""What keeps the memory pages from being used by another site: a per-agent token on
every change, a same-origin check, a host check against DNS rebinding, and headers
that forbid inline scripts and framing.

A page served to the operator carries the token (in its forms, and in a ``<meta>``
tag for scripts); a request that changes something must send it back (form field
``token`` or header ``X-Memory-Token``) and, when it comes from a browser, from a
page of the same origin (its ``Origin``, else its ``Referer``). Another site can
make a browser send a request but cannot read the page holding the token.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "SECURITY_HEADERS",
    "TOKEN_FIELD",
    "TOKEN_HEADER",
    "Guard",
    "is_loopback",
    "new_token",
    "read_form",
]

TOKEN_FIELD = "token"
TOKEN_HEADER = "X-Memory-Token"

SECURITY_HEADERS: dict[str, str] = {
    # no inline script, no script or style from elsewhere: stored text that slipped
    # through escaping could still not run
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


def new_token() -> str:
    """A fresh random token (32 bytes, URL-safe)."""
    return secrets.token_urlsafe(32)


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this
    machine's loopback."""
    if not host:
        return False
    name = host.strip("[]").lower()
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class Guard:
    """Checks requests to the pages of one server.

    Args:
        bound_host: the host the server listens on (read on each request: an agent's
            web server may start after its pages are added). While it is a loopback
            name or address (or not known yet), only requests whose ``Host`` is a
            loopback one are answered: a page of another site whose name was rebound
            to 127.0.0.1 is refused.
    """

    def __init__(self, bound_host: Callable[[], str | None]) -> None:
        self._bound_host = bound_host

    def check_host(self, request: web.Request) -> None:
        """Raises HTTPForbidden for a ``Host`` this server does not answer to."""
        bound = self._bound_host()
        if bound is not None and not is_loopback(bound):
            return  # told to listen beyond this machine
        host = _hostname(request.host)
        if not is_loopback(host):
            raise web.HTTPForbidden(text=f"this server answers to localhost only, not to {host!r}")

    async def check_change(self, request: web.Request, token: str) -> None:
        """Raises HTTPForbidden unless ``request`` may change the memory of ``token``.

        It must carry ``token`` (header or form field) and, if it names where it comes
        from (``Origin``, else ``Referer``), come from this server's origin.
        """
        self.check_host(request)
        here = f"{request.scheme}://{request.host}".lower()
        origin = request.headers.get("Origin")
        if origin is not None:
            if origin.lower() != here:
                raise web.HTTPForbidden(text="cross-origin request refused")
        else:
            referer = request.headers.get("Referer")
            if referer is not None:
                parts = urlsplit(referer)
                if f"{parts.scheme}://{parts.netloc}".lower() != here:
                    raise web.HTTPForbidden(text="cross-origin request refused")
        given = request.headers.get(TOKEN_HEADER)
        if given is None and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            form = await read_form(request)
            field = form.get(TOKEN_FIELD)
            given = field if isinstance(field, str) else None
        if not given or not hmac.compare_digest(
            given.encode("utf-8", "surrogateescape"), token.encode()
        ):
            raise web.HTTPForbidden(text="missing or wrong token: reload the page and try again")


async def read_form(request: web.Request) -> Mapping[str, Any]:
    """The request's form fields; an unreadable body (bytes that are not its charset,
    a charset that does not exist) is refused with 400, not a server error."""
    try:
        return await request.post()
    except (UnicodeDecodeError, LookupError) as exc:
        raise web.HTTPBadRequest(text=f"the form body cannot be read: {exc}") from None


def _hostname(host: str) -> str:
    """The name of a ``Host`` header, without its port."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
