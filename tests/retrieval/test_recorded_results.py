"""Searches over a fixed corpus give exactly the results recorded in ``data/``.

The record was made before the search was split into stages; any change in a
score, an explanation or an order shows here. To re-record on purpose, run
:func:`tests.retrieval.recorded_corpus.record` for each variant and write its
output to ``data/recorded_search.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.retrieval.recorded_corpus import VARIANTS, record

_RECORDED = json.loads(
    (Path(__file__).parent / "data" / "recorded_search.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
async def test_search_results_match_the_record(tmp_path: Path, variant: str) -> None:
    assert await record(tmp_path, variant) == _RECORDED[variant]
