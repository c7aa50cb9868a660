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
from pathlib import Path

import pytest

from tests.retrieval.recorded_corpus import VARIANTS, assert_matches_record, record

_RECORDED = json.loads(
    (Path(__file__).parent / "data" / "recorded_search.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
async def test_search_results_match_the_record(tmp_path: Path, variant: str) -> None:
    assert_matches_record(await record(tmp_path, variant), _RECORDED[variant], variant)


def test_a_changed_score_is_told_from_float32_noise() -> None:
    assert_matches_record({"s": (0.5).hex()}, {"s": (0.5 + 1e-9).hex()})
    with pytest.raises(AssertionError):
        assert_matches_record({"s": (0.5).hex()}, {"s": (0.5001).hex()})
    with pytest.raises(AssertionError):
        assert_matches_record([{"id": 1}], [{"id": 2}])
