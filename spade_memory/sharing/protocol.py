"""Deprecated: ``spade_memory.sharing.protocol`` moved.

It is now :mod:`spade_memory.spade.sharing.protocol`; import from there, or from ``spade_memory``.
This alias warns, and goes away in a later version.
"""

from __future__ import annotations

from .._moved import reexport

reexport(globals(), "spade_memory.spade.sharing.protocol")
