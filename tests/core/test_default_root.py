"""The per-user data folder used when no memory root is given."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import platformdirs
import pytest

from spade_memory import config
from spade_memory.config import MemoryConfig, default_root
from spade_memory.errors import ConfigError


@pytest.fixture
def no_root_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPADE_MEMORY_ROOT", raising=False)


def test_the_environment_variable_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPADE_MEMORY_ROOT", str(tmp_path / "chosen"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_root() == tmp_path / "chosen"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SPADE_MEMORY_ROOT", "~/mine")
    assert default_root() == tmp_path / "mine"


@pytest.mark.usefixtures("no_root_variable")
def test_without_it_the_folder_is_platformdirs_user_data_dir(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[object, ...]] = []

    def user_data_dir(*args: object, **kwargs: object) -> str:
        asked.append((*args, *sorted(kwargs.items())))
        return "/somewhere/for/this/user"

    monkeypatch.setattr(config.platformdirs, "user_data_dir", user_data_dir)
    assert default_root() == Path("/somewhere/for/this/user")
    assert asked == [("spade_memory", ("appauthor", False))]


@pytest.mark.usefixtures("no_root_variable")
def test_it_is_what_platformdirs_gives_on_this_platform() -> None:
    expected = Path(platformdirs.user_data_dir("spade_memory", appauthor=False))
    assert default_root() == expected
    assert MemoryConfig().resolved_root() == expected.resolve()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux folders")
@pytest.mark.usefixtures("no_root_variable")
def test_on_linux_it_is_the_folder_it_always_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert default_root() == tmp_path / "home" / ".local" / "share" / "spade_memory"
    monkeypatch.setenv("XDG_DATA_HOME", "")
    assert default_root() == tmp_path / "home" / ".local" / "share" / "spade_memory"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_root() == tmp_path / "xdg" / "spade_memory"


@pytest.mark.usefixtures("no_root_variable")
def test_nothing_is_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    default_root()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("root", ["", "   ", "\t\n"])
def test_an_empty_root_is_refused_not_taken_as_the_working_directory(root: str) -> None:
    with pytest.raises(ConfigError, match=r"MemoryConfig.root must name a folder.*None for"):
        MemoryConfig(root=root)
    with pytest.raises(ConfigError, match="must name a folder"):
        dataclasses.replace(MemoryConfig(in_memory=True), root=root)


def test_an_empty_or_blank_variable_counts_as_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config.platformdirs, "user_data_dir", lambda *a, **k: str(tmp_path))
    for value in ("", "  "):
        monkeypatch.setenv("SPADE_MEMORY_ROOT", value)
        assert default_root() == tmp_path
        assert MemoryConfig().resolved_root() == tmp_path.resolve()
