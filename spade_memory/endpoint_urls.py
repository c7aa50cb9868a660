"""Endpoint URLs and names: credentials written in a URL, and ``openai:MODEL@URL``.

Some servers sit behind a proxy that wants HTTP Basic authentication, and the
simplest way to say so is in the URL (``http://user:password@host/v1``). The URL
is shown in errors and logs and kept in the fingerprint of an embedder's vectors,
so the credentials are taken out of it here (and sent as an ``Authorization``
header instead), and left out of any text that shows a URL or an endpoint name.
"""

from __future__ import annotations

import base64
import re
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["endpoint_parts", "split_credentials", "without_credentials"]

# the model ends at the first "@" before http(s):// (the URL may hold user:password@)
_NAME = re.compile(r"openai:(\S+?)@(https?://\S+)")
_USERINFO = re.compile(r"//[^/@\s]*@")


def split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its user and password, and the ``Authorization`` header value
    (``Basic ...``) they make, or ``None`` when it names none."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    token = f"{unquote(user)}:{unquote(password)}".encode()
    bare = urlunsplit(parts._replace(netloc=host))
    return bare, "Basic " + base64.b64encode(token).decode("ascii")


def without_credentials(text: str) -> str:
    """``text`` (a URL, an endpoint name) with any ``user:password@`` of a URL left out."""
    return _USERINFO.sub("//...@", text)


def endpoint_parts(name: str) -> tuple[str, str] | None:
    """``(model, url)`` of a name ``openai:MODEL@URL``, or ``None`` if it is not one."""
    match = _NAME.fullmatch(name)
    return None if match is None else (match[1], match[2])
