"""Credentials written into an endpoint's URL (``http://user:password@host/v1``).

Some servers sit behind a proxy that wants HTTP Basic authentication, and the
simplest way to say so is in the URL. The URL is shown in errors and logs and kept
in the fingerprint of an embedder's vectors, so the credentials are taken out of
it here and sent as an ``Authorization`` header instead.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["split_credentials"]


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
