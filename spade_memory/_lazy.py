"""Public names of a package imported on first use (PEP 562), from a table of their modules."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["on_first_use"]


def on_first_use(
    namespace: MutableMapping[str, Any], sources: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's ``__getattr__`` and ``__dir__`` for the names in ``sources``.

    ``sources`` maps each name to its module, relative to the package whose
    ``namespace`` (its ``globals()``) is given. A name is imported when first read,
    then kept in the namespace, so it is looked up once.
    """
    package = namespace["__name__"]

    def getattr_(name: str) -> Any:
        module = sources.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return getattr_, dir_
