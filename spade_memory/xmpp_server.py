"""Deprecated: ``spade_memory.xmpp_server`` moved.

It is now :mod:`spade_memory.testing.xmpp_server`; import from there, or from ``spade_memory``.
This alias warns, and goes away in a later version.
"""

from __future__ import annotations

from ._moved import reexport

reexport(globals(), "spade_memory.testing.xmpp_server")
