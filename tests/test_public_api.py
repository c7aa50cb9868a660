"""The public surface: a sorted, importable ``__all__`` and a typed package."""

from __future__ import annotations

from pathlib import Path

import spade_memory


def test_all_is_sorted_and_importable() -> None:
    names = spade_memory.__all__
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(spade_memory, name) is not None


def test_every_error_derives_from_one_base() -> None:
    from spade_memory import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), spade_memory.SpadeMemoryError)


def test_package_is_typed() -> None:
    assert (Path(spade_memory.__file__).parent / "py.typed").exists()
