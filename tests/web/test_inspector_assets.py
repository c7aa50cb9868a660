"""The inspector's templates and static files ship in the package and load nothing
from elsewhere (it works offline)."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from spade_memory.web.render import STATIC_FILES

REPO = Path(__file__).resolve().parent.parent.parent
WEB = REPO / "spade_memory" / "web"


def _assets() -> list[Path]:
    return sorted(p for folder in ("templates", "static") for p in (WEB / folder).iterdir())


def test_every_asset_is_package_data() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
    patterns = project["tool"]["setuptools"]["package-data"]["spade_memory"]
    for path in _assets():
        inside = path.relative_to(REPO / "spade_memory").as_posix()
        assert any(fnmatch(inside, pattern) for pattern in patterns), inside


def test_the_static_files_served_are_those_shipped() -> None:
    assert set(STATIC_FILES) == {p.name for p in (WEB / "static").iterdir()}


def test_nothing_is_loaded_from_elsewhere() -> None:
    remote = re.compile(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", re.IGNORECASE)
    for path in _assets():
        text = path.read_text("utf-8")
        assert not remote.search(text), path.name
        assert "innerHTML" not in text, path.name  # memory text goes in as text only
