"""Searches over a fixed corpus give exactly the results recorded in ``data/``.

The record was made before the search was split into stages; any change in an
order, an id, a text or a weight shows here, and any change in a score beyond the
last bits of float32 vector arithmetic (which differs between FAISS and BLAS
builds). To re-record on purpose, run
:func:`tests.retrieval.recorded_corpus.record` for each variant and write its
output to ``data/recorded_search.json``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.retrieval.recorded_corpus import VARIANTS, record

_RECORDED = json.loads(
    (Path(__file__).parent / "data" / "recorded_search.json").read_text(encoding="utf-8")
)



def _close(got: Any, want: Any, where: str = "") -> None:
    """``got`` equals ``want``, hex floats within a relative 1e-6 of each other."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), where
        for key in want:
            _close(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            _close(a, b, f"{where}[{index}]")
    elif isinstance(want, str) and want.startswith(("0x", "-0x")) and isinstance(got, str):
        a, b = float.fromhex(got), float.fromhex(want)
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12), f"{where}: {a!r} != {b!r}"
    else:
        assert got == want, where


@pytest.mark.parametrize("variant", sorted(VARIANTS))
async def test_search_results_match_the_record(tmp_path: Path, variant: str) -> None:
    _close(await record(tmp_path, variant), _RECORDED[variant], variant)


def test_close_tells_a_changed_score_from_float32_noise() -> None:
    _close({"s": (0.5).hex()}, {"s": (0.5 + 1e-9).hex()})
    with pytest.raises(AssertionError):
        _close({"s": (0.5).hex()}, {"s": (0.5001).hex()})
    with pytest.raises(AssertionError):
        _close([{"id": 1}], [{"id": 2}])
