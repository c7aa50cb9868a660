"""Temporary files of interrupted atomic writes: found with one listing per folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from spade_memory.storage import files


def test_the_folder_is_listed_once_for_every_name_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"agent{i}_interactions.json" for i in range(5)]
    for name in names:
        (tmp_path / f".{name}.4242.1.tmp").write_bytes(b"half a write")
    unrelated = tmp_path / ".other.json.1.2.tmp"
    unrelated.write_bytes(b"not ours")
    listings: list[Any] = []
    scandir = os.scandir

    def counted(path: Any) -> Any:
        listings.append(path)
        return scandir(path)

    monkeypatch.setattr(files.os, "scandir", counted)
    for name in names:
        files.remove_stale_temps(tmp_path, name)
        assert not (tmp_path / f".{name}.4242.1.tmp").exists()
    assert len(listings) == 1
    assert unrelated.exists()
    # A name whose leftovers are gone already costs nothing and removes nothing else.
    files.remove_stale_temps(tmp_path, names[0])
    assert len(listings) == 1 and unrelated.exists()
