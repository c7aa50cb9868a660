"""Old import paths of modules that moved: each re-exports its new module, and warns."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import MutableMapping
from typing import Any

__all__ = ["reexport"]


def reexport(namespace: MutableMapping[str, Any], new: str) -> None:
    """Fill the old module's ``namespace`` with the public names of module ``new``.

    Warns (``DeprecationWarning``, pointing at the importer) that the old path moved.
    """
    module = importlib.import_module(new)
    names = list(module.__all__)
    namespace.update({name: getattr(module, name) for name in names})
    namespace["__all__"] = names
    warnings.warn(
        f"{namespace['__name__']} moved to {new}; import it from there",
        DeprecationWarning,
        stacklevel=3,
    )
