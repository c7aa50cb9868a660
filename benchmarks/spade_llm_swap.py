"""A pytest plug-in that puts :class:`SpadeMemoryBackend` where spade_llm's SQLite backend is.

Loaded with ``-p benchmarks.spade_llm_swap`` by :mod:`benchmarks.spade_llm_suite`: it
swaps only the class ``SQLiteMemoryBackend`` (in the module that defines it and in
``AgentBaseMemory``'s module, which imported it by name) before the tests are
collected, so every test that builds spade_llm's default backend gets spade_memory's,
with its assertions untouched.
"""

from __future__ import annotations

from typing import Any

from spade_memory.integrations.spade_llm_backend import SpadeMemoryBackend
from spade_memory.integrations.spade_llm_tools import import_spade_llm

__all__ = ["SwappedBackend", "pytest_configure"]


class SwappedBackend(SpadeMemoryBackend):
    """spade_llm's constructor, ``SQLiteMemoryBackend(db_path)``, on spade_memory."""

    def __init__(self, db_path: str) -> None:
        super().__init__(db_path=db_path)


SwappedBackend.__name__ = SwappedBackend.__qualname__ = "SQLiteMemoryBackend"


def pytest_configure(config: Any) -> None:
    for name in ("spade_llm.memory.backends.sqlite", "spade_llm.memory.agent_base_memory"):
        module = import_spade_llm(name)
        module.SQLiteMemoryBackend = SwappedBackend
