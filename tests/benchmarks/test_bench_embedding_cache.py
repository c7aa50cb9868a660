"""The benchmarks' on-disk embedding cache: hits, misses, fingerprints, a cached run."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from benchmarks.data import parse_locomo
from benchmarks.harness import CACHE_ENV, CachedEmbedder, System, default_cache_dir
from benchmarks.locomo import run_spade_memory
from spade_memory.embedding.hashing import HashingEmbedder


class CountingEmbedder:
    """A hashing embedder that counts the texts it embeds, under a chosen fingerprint."""

    def __init__(self, fingerprint: str = "counting-v1", *, scale: float = 1.0) -> None:
        self._inner = HashingEmbedder(dim=32)
        self._fingerprint = fingerprint
        self._scale = scale
        self.embedded: list[str] = []
        self.queries = 0

    @property
    def dim(self) -> int:
        return self._inner.dim

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def embed_documents(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.embedded.extend(texts)
        vectors = self._inner.embed_documents(texts)
        if self._scale != 1.0:  # a "new model": different vectors for the same text
            vectors = vectors[:, ::-1].copy()
        return vectors

    def embed_query(self, text: str) -> NDArray[np.float32]:
        self.queries += 1
        return self._inner.embed_query(text)


def test_a_second_embedding_is_read_from_the_cache(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, tmp_path)
    first = cached.embed_documents(["alpha beta", "gamma", "alpha beta"])
    assert (cached.hits, cached.misses) == (0, 3)
    assert inner.embedded == ["alpha beta", "gamma", "alpha beta"]
    cached.close()

    again = CachedEmbedder(inner, tmp_path)  # a new process would see the same file
    second = again.embed_documents(["gamma", "delta", "alpha beta"])
    assert (again.hits, again.misses) == (2, 1)
    assert inner.embedded[3:] == ["delta"]  # only the text the cache lacked
    np.testing.assert_array_equal(second[0], first[1])
    np.testing.assert_array_equal(second[2], first[0])
    np.testing.assert_array_equal(second[1], inner.embed_documents(["delta"])[0])
    assert second.dtype == np.float32 and second.shape == (3, 32)
    assert again.fingerprint == inner.fingerprint and again.dim == 32
    again.close()


def test_a_new_fingerprint_never_reads_the_old_vectors(tmp_path: Path) -> None:
    old = CachedEmbedder(CountingEmbedder("model-v1"), tmp_path)
    old_vector = old.embed_documents(["same text"])[0]
    old.close()
    new_inner = CountingEmbedder("model-v2", scale=-1.0)
    new = CachedEmbedder(new_inner, tmp_path)
    new_vector = new.embed_documents(["same text"])[0]
    assert (new.hits, new.misses) == (0, 1) and new_inner.embedded == ["same text"]
    assert not np.array_equal(old_vector, new_vector)
    new.close()


def test_queries_are_never_cached(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, tmp_path)
    cached.embed_query("what is cached?")
    cached.embed_query("what is cached?")
    assert inner.queries == 2 and (cached.hits, cached.misses) == (0, 0)
    cached.close()


def test_the_cache_folder_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "elsewhere"))
    assert default_cache_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv(CACHE_ENV)
    assert default_cache_dir().parts[-3:] == ("benchmarks", "results", ".cache")


def _conversation() -> list[dict[str, object]]:
    texts = [
        "I adopted a puppy named Biscuit from the shelter",
        "my sister is getting married in Lisbon next spring",
        "I started learning the violin at the community center",
    ]
    turns = [
        {"dia_id": f"D1:{n}", "speaker": "Ann", "text": text}
        for n, text in enumerate(texts, start=1)
    ]
    return [
        {
            "sample_id": "tiny",
            "conversation": {"session_1_date_time": "1 May 2023", "session_1": turns},
            "qa": [{"question": "What is the puppy called?", "evidence": ["D1:1"], "category": 4}],
        }
    ]


async def test_a_cached_run_ranks_as_an_uncached_one(tmp_path: Path) -> None:
    conversations = parse_locomo(_conversation())
    systems = [System("hashed", embedder="hashing")]
    fresh = await run_spade_memory(conversations, systems, base_overrides={})
    filled = await run_spade_memory(
        conversations, systems, base_overrides={}, cache=tmp_path / "cache"
    )
    reused = await run_spade_memory(
        conversations, systems, base_overrides={}, cache=tmp_path / "cache"
    )
    with sqlite3.connect(tmp_path / "cache" / "embeddings.sqlite") as db:
        (stored,) = db.execute("SELECT count(*) FROM vectors").fetchone()
    assert stored >= 3  # every turn (and any graph entry text) embedded once
    db.close()
    assert fresh["hashed"].rankings == filled["hashed"].rankings == reused["hashed"].rankings
    assert not fresh["hashed"].index_cached and reused["hashed"].index_cached
