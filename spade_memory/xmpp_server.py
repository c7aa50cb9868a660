"""Deprecated: ``spade_memory.xmpp_server`` moved.

It is now :mod:`spade_memory.testing.xmpp_server`; import from there, or from ``spade_memory``.
This alias warns, and goes away in a later version.
"""

from __future__ import annotations

import warnings

from spade_memory.testing.xmpp_server import (
    EmbeddedXMPPServer,
)

__all__ = [
    "EmbeddedXMPPServer",
]

warnings.warn(
    f"{__name__} moved to spade_memory.testing.xmpp_server; import it from there",
    DeprecationWarning,
    stacklevel=2,
)
