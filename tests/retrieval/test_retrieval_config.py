"""RetrievalConfig holds the knobs a user sets; RetrievalTuning the benchmark-fitted ones."""

from __future__ import annotations

import dataclasses

import pytest

from spade_memory import RetrievalConfig, RetrievalTuning
from spade_memory.config import RETRIEVAL_KNOBS, TUNING_KNOBS
from spade_memory.errors import ConfigError


def test_the_fitted_knobs_live_in_tuning_only() -> None:
    own = {f.name for f in dataclasses.fields(RetrievalConfig)}
    assert {f.name for f in dataclasses.fields(RetrievalTuning)} == TUNING_KNOBS
    assert not own & TUNING_KNOBS
    assert {"rerank_depth", "graph_speaker_score", "mmr_duplicate_threshold"} <= TUNING_KNOBS
    assert {"mmr_lambda", "fusion_mode", "route_timeout_seconds", "tuning"} <= own
    assert len(RETRIEVAL_KNOBS) == len(own) - 1 + len(TUNING_KNOBS)


def test_from_knobs_splits_flat_names() -> None:
    config = RetrievalConfig.from_knobs({"mmr_lambda": 1.0, "rerank_depth": 20})
    assert config == RetrievalConfig(mmr_lambda=1.0, tuning=RetrievalTuning(rerank_depth=20))
    assert RetrievalConfig.from_knobs({}) == RetrievalConfig()
    assert config.knob("rerank_depth") == 20 and config.knob("mmr_lambda") == 1.0


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"no_such_knob": 1}, "unknown retrieval knobs: no_such_knob"),
        ({"rerank_depth": 0}, "rerank_depth"),
        ({"tuning": RetrievalTuning(), "vector_fill": True}, "not both"),
    ],
)
def test_from_knobs_refuses(knobs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RetrievalConfig.from_knobs(knobs)


def test_replace_reaches_a_tuning_knob_through_its_own_class() -> None:
    config = RetrievalConfig()
    tuned = dataclasses.replace(
        config, tuning=dataclasses.replace(config.tuning, neighbour_reply_weight=0.5)
    )
    assert tuned.tuning.neighbour_reply_weight == 0.5
    assert tuned.tuning.rerank_depth == config.tuning.rerank_depth
    with pytest.raises(ConfigError, match="tuning must be a RetrievalTuning"):
        RetrievalConfig(tuning={"rerank_depth": 3})  # type: ignore[arg-type]
