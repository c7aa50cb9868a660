"""Keyword candidates the vector route did not return get their stored vector's cosine."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig, RetrievalTuning

_DIRECTIONS = {
    "zebra": (1.0, 0.0, 0.0),  # the query
    "Lions sleep most of the day": (1.0, 0.05, 0.0),
    "Lions hunt at night": (1.0, 0.0, 0.05),
    "A zebra crossing on the high street": (0.3, 0.0, 0.954),
}


class TableEmbedder:
    """Fixed vectors per text: the test decides every similarity."""

    dim = 3
    fingerprint = "table-v1"

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        rows = np.array([_DIRECTIONS.get(text, (0.0, 1.0, 0.0)) for text in texts], np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.embed_documents([text])[0]


async def _crossing(tmp_path: Path, fill: bool) -> float | None:
    retrieval = RetrievalConfig(
        tuning=RetrievalTuning(vector_fill=fill),
        min_candidates=1,
        recall_candidate_multiplier=1,
        mmr_pool_factor=1,
        neighbour_weight=0.0,
        graph_route=False,
    )
    config = MemoryConfig(root=tmp_path, embedder=TableEmbedder(), retrieval=retrieval)
    async with await MemoryManager.open("fill@localhost", config) as memory:
        await memory.store_many([{"content": text} for text in list(_DIRECTIONS)[1:]])
        await memory.flush()
        # Two candidates per sub-route: the vector route returns the two lions only.
        results = await memory.search("zebra", limit=2, explain=True)
    crossing = next(r for r in results if r.memory.content.startswith("A zebra"))
    assert crossing.explanation is not None
    return crossing.explanation.vector_score


async def test_a_keyword_candidate_gets_its_cosine(tmp_path: Path) -> None:
    missing = await _crossing(tmp_path / "off", fill=False)
    assert missing is None  # not among the vector route's two
    filled = await _crossing(tmp_path / "on", fill=True)
    assert filled == pytest.approx(0.3, abs=1e-3)
