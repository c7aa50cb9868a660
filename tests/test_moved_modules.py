"""Modules that moved keep working from their old paths, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

MOVED = {
    "spade_memory.agents": ("spade_memory.spade", "LLMAgent"),
    "spade_memory.xmpp_server": ("spade_memory.testing.xmpp_server", "EmbeddedXMPPServer"),
    "spade_memory.sharing": ("spade_memory.spade.sharing", "SharingResponder"),
    "spade_memory.sharing.protocol": ("spade_memory.spade.sharing.protocol", "MemoryQuery"),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_and_gives_the_same_objects(old: str) -> None:
    new, name = MOVED[old]
    for loaded in [m for m in sys.modules if m == old or m.startswith(old + ".")]:
        del sys.modules[loaded]
    # an old package above it (spade_memory.sharing) warns too when first imported
    # here; pytest.warns would raise that other warning again, as an error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        importlib.import_module(old.rpartition(".")[0])
    with pytest.warns(DeprecationWarning, match=f"moved to {new}"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    assert set(module.__all__) <= set(importlib.import_module(new).__all__)
