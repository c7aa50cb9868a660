"""The FAISS vector index: correctness against numpy, filtering, snapshots, threads."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from spade_memory.errors import ConfigError
from spade_memory.storage.vectors import IndexKind, SnapshotInfo, VectorIndex

DIM = 24
KINDS: list[IndexKind] = ["flat", "hnsw"]


def _unit(rng: np.random.Generator, n: int, dim: int = DIM) -> NDArray[np.float32]:
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix


def _brute(
    truth: dict[int, NDArray[np.float32]], query: NDArray[np.float32], k: int
) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    ids = np.array(sorted(truth), dtype=np.int64)
    if not len(ids):
        return ids, np.zeros(0, np.float32)
    scores = np.stack([truth[int(i)] for i in ids]) @ query
    order = np.argsort(-scores, kind="stable")[:k]
    return ids[order], scores[order].astype(np.float32)


def _filled(
    kind: IndexKind, n: int = 400, seed: int = 7
) -> tuple[VectorIndex, dict[int, NDArray[np.float32]]]:
    rng = np.random.default_rng(seed)
    vectors = _unit(rng, n)
    ids = rng.choice(10_000_000, size=n, replace=False).astype(np.int64) + 1
    index = VectorIndex(DIM, kind=kind)
    index.add(ids, vectors)
    return index, {int(i): v for i, v in zip(ids, vectors, strict=True)}


def _check_exact(
    index: VectorIndex, truth: dict[int, NDArray[np.float32]], query: NDArray[np.float32], k: int
) -> None:
    ids, scores = index.search(query, k)
    want_ids, want_scores = _brute(truth, query, k)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)


# --- exact index -------------------------------------------------------------------


def test_flat_search_matches_brute_force() -> None:
    index, truth = _filled("flat")
    rng = np.random.default_rng(1)
    for query in _unit(rng, 20):
        for k in (1, 5, 50):
            _check_exact(index, truth, query, k)
    assert index.ntotal == len(truth)
    assert set(index.ids().tolist()) == set(truth)
    assert index.ids().dtype == np.int64


@pytest.mark.parametrize("kind", KINDS)
def test_add_replaces_the_vector_of_an_existing_id(kind: IndexKind) -> None:
    index, truth = _filled(kind, n=100)
    rng = np.random.default_rng(2)
    chosen = sorted(truth)[:10]
    fresh = _unit(rng, len(chosen))
    index.add(np.array(chosen), fresh)
    truth.update({i: v for i, v in zip(chosen, fresh, strict=True)})
    assert index.ntotal == 100
    for i, vector in zip(chosen, fresh, strict=True):
        ids, scores = index.search(vector, 1)
        assert ids.tolist() == [i]
        assert scores[0] == pytest.approx(1.0, abs=1e-5)
    for query in _unit(rng, 5):
        _check_exact(index, truth, query, 10)


@pytest.mark.parametrize("kind", KINDS)
def test_repeated_id_in_one_add_keeps_the_last_vector(kind: IndexKind) -> None:
    rng = np.random.default_rng(3)
    a, b, c = _unit(rng, 3)
    index = VectorIndex(DIM, kind=kind)
    index.add(np.array([5, 6, 5]), np.stack([a, b, c]))
    assert index.ntotal == 2
    ids, scores = index.search(c, 1, allowed_ids=[5])
    assert ids.tolist() == [5] and scores[0] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_remove_counts_and_ignores_unknown_ids(kind: IndexKind) -> None:
    index, truth = _filled(kind, n=50)
    gone = sorted(truth)[:5]
    assert index.remove([*gone, 123_456_789_012, gone[0]]) == 5
    assert index.remove(gone) == 0
    assert index.remove([]) == 0
    assert index.remove(np.array([], dtype=np.int64)) == 0
    for i in gone:
        del truth[i]
    assert index.ntotal == 45
    assert set(index.ids().tolist()) == set(truth)
    rng = np.random.default_rng(4)
    for query in _unit(rng, 5):
        ids, _ = index.search(query, 45)
        assert set(ids.tolist()) == set(truth)
        _check_exact(index, truth, query, 5)


@pytest.mark.parametrize("kind", KINDS)
def test_empty_index_and_edge_cases_of_k(kind: IndexKind) -> None:
    index = VectorIndex(DIM, kind=kind)
    query = np.ones(DIM, np.float32) / np.sqrt(DIM)
    ids, scores = index.search(query, 5)
    assert ids.shape == (0,) and scores.shape == (0,) and ids.dtype == np.int64
    index.add(np.array([1, 2]), _unit(np.random.default_rng(5), 2))
    assert index.search(query, 0)[0].size == 0
    assert index.search(query, 10)[0].size == 2  # never padded with -1
    assert index.search(query.reshape(1, -1), 1)[0].size == 1
    assert index.search(query, 5, allowed_ids=[])[0].size == 0
    assert index.search(query, 5, allowed_ids=[99])[0].size == 0


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("k", "allowed_size", "absent"), [(5, 3, 0), (5, 40, 10), (50, 20, 5), (10, 300, 0), (3, 1, 30)]
)
def test_allowed_ids_returns_exactly_what_exists(
    kind: IndexKind, k: int, allowed_size: int, absent: int
) -> None:
    index, truth = _filled(kind, n=400, seed=11)
    rng = np.random.default_rng(allowed_size + k)
    present = rng.choice(np.array(sorted(truth)), size=allowed_size, replace=False)
    allowed = np.concatenate([present, np.arange(absent, dtype=np.int64) + 20_000_000])
    for query in _unit(rng, 4):
        ids, scores = index.search(query, k, allowed_ids=allowed)
        assert len(ids) == min(k, allowed_size)
        assert set(ids.tolist()) <= set(present.tolist())
        subset = {int(i): truth[int(i)] for i in present}
        want_ids, want_scores = _brute(subset, query, k)
        np.testing.assert_array_equal(ids, want_ids)  # small filters are answered exactly
        np.testing.assert_allclose(scores, want_scores, atol=1e-5)


def test_hnsw_large_filter_still_returns_k() -> None:
    index, truth = _filled("hnsw", n=3000, seed=12)
    rng = np.random.default_rng(13)
    allowed = rng.choice(np.array(sorted(truth)), size=2500, replace=False)
    for query in _unit(rng, 5):
        ids, _ = index.search(query, 20, allowed_ids=allowed)
        assert len(ids) == 20 and set(ids.tolist()) <= set(allowed.tolist())


def test_hnsw_filter_far_from_the_query_falls_back_to_exact() -> None:
    """Allowed ids all in a cluster opposite the query: the graph walk finds none of them."""
    rng = np.random.default_rng(40)
    near = rng.standard_normal((4000, 8)).astype(np.float32) * 0.05
    far = rng.standard_normal((2100, 8)).astype(np.float32) * 0.05
    near[:, 0] += 1.0
    far[:, 0] -= 1.0
    vectors = np.vstack([near, far])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(1, 6101, dtype=np.int64)
    index = VectorIndex(8, kind="hnsw", ef_search=1)
    index.add(ids, vectors)
    query = np.zeros(8, np.float32)
    query[0] = 1.0
    allowed = ids[4000:]
    got, scores = index.search(query, 100, allowed_ids=allowed)
    truth = {int(i): v for i, v in zip(ids[4000:], vectors[4000:], strict=True)}
    want, want_scores = _brute(truth, query, 100)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)


def test_hnsw_recall_against_brute_force() -> None:
    index, truth = _filled("hnsw", n=2000, seed=14)
    rng = np.random.default_rng(15)
    hits = 0
    for query in _unit(rng, 30):
        ids, scores = index.search(query, 10)
        assert len(ids) == 10
        np.testing.assert_allclose(scores, np.sort(scores)[::-1])
        hits += len(set(ids.tolist()) & set(_brute(truth, query, 10)[0].tolist()))
    assert hits / 300 >= 0.9


def test_hnsw_removal_hides_then_compacts() -> None:
    index, truth = _filled("hnsw", n=200, seed=16)
    doomed = sorted(truth)[:30]  # 15 %: hidden, not yet rebuilt
    assert index.remove(doomed) == 30
    rng = np.random.default_rng(17)
    for query in _unit(rng, 5):
        ids, _ = index.search(query, 200)
        assert not set(ids.tolist()) & set(doomed)
        assert len(ids) == 170
    more = sorted(truth)[30:60]  # now 30 % removed: rebuilt
    assert index.remove(more) == 30
    for i in doomed + more:
        del truth[i]
    assert index.ntotal == 140 and set(index.ids().tolist()) == set(truth)
    for query in _unit(rng, 5):
        ids, _ = index.search(query, 200)
        assert set(ids.tolist()) == set(truth)


@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_is_refused(kind: IndexKind) -> None:
    index = VectorIndex(4, kind=kind)
    good = np.eye(4, dtype=np.float32)[:2]
    with pytest.raises(ValueError, match="shape"):
        index.add(np.array([1, 2, 3]), good)
    with pytest.raises(ValueError, match="shape"):
        index.add(np.array([1, 2]), np.ones((2, 5), np.float32))
    with pytest.raises(ValueError, match=">= 0"):
        index.add(np.array([-1, 2]), good)
    with pytest.raises(ValueError, match="NaN"):
        index.add(np.array([1, 2]), np.full((2, 4), np.nan, np.float32))
    with pytest.raises(ValueError, match="integers"):
        index.add(np.array([1.5, 2.0]), good)
    with pytest.raises(ValueError, match="4 values"):
        index.search(np.ones(3, np.float32), 1)
    assert index.ntotal == 0


@pytest.mark.parametrize(
    "args", [{"dim": 0}, {"dim": 4, "kind": "ivf"}, {"dim": 4, "ef_search": 0}]
)
def test_bad_configuration_is_refused(args: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        VectorIndex(**args)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "remove"]), st.lists(st.integers(0, 30), max_size=6)),
        max_size=12,
    ),
    st.sampled_from(KINDS),
)
def test_property_index_follows_a_dict_model(
    ops: list[tuple[str, list[int]]], kind: IndexKind
) -> None:
    rng = np.random.default_rng(len(ops))
    index = VectorIndex(8, kind=kind)
    model: dict[int, NDArray[np.float32]] = {}
    for op, keys in ops:
        if op == "add":
            vectors = _unit(rng, len(keys), 8)
            index.add(np.array(keys, dtype=np.int64), vectors)
            model.update({k: v for k, v in zip(keys, vectors, strict=True)})
        else:
            removed = index.remove(keys)
            assert removed == len(set(keys) & set(model))
            for k in set(keys):
                model.pop(k, None)
        assert index.ntotal == len(model)
        assert sorted(index.ids().tolist()) == sorted(model)
    query = _unit(rng, 1, 8)[0]
    ids, scores = index.search(query, 40)
    want_ids, want_scores = _brute(model, query, 40)
    assert sorted(ids.tolist()) == sorted(want_ids.tolist())
    np.testing.assert_allclose(np.sort(scores), np.sort(want_scores), atol=1e-5)


# --- snapshots ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_snapshot_round_trip(tmp_path: Path, kind: IndexKind) -> None:
    index, truth = _filled(kind, n=300)
    index.remove(sorted(truth)[:10])  # HNSW: tombstones are compacted on save
    for i in sorted(truth)[:10]:
        del truth[i]
    path = tmp_path / "agent_vectors.faiss"
    index.save_snapshot(path, generation=7, seq=1234, fingerprint="hashing-v1:dim=24")
    loaded = VectorIndex.load_snapshot(path, dim=DIM, fingerprint="hashing-v1:dim=24")
    assert loaded is not None
    copy, info = loaded
    assert info == SnapshotInfo(
        generation=7, seq=1234, fingerprint="hashing-v1:dim=24", dim=DIM, count=290
    )
    assert copy.kind == kind and copy.dim == DIM and copy.ntotal == 290
    assert sorted(copy.ids().tolist()) == sorted(truth)
    rng = np.random.default_rng(20)
    for query in _unit(rng, 5):
        np.testing.assert_array_equal(copy.search(query, 10)[0], index.search(query, 10)[0])
    copy.add(np.array([1]), _unit(rng, 1))  # the loaded index is live
    assert copy.ntotal == 291
    assert (
        VectorIndex.load_snapshot(
            path,
            dim=DIM,
            fingerprint="hashing-v1:dim=24",
            kind="flat" if kind == "hnsw" else "hnsw",
        )
        is None
    )
    assert path.exists()
    assert list(tmp_path.iterdir()) == [path]  # no temporary files left


@pytest.mark.parametrize("kind", KINDS)
def test_a_loaded_snapshot_replaces_and_removes_the_ids_it_holds(
    tmp_path: Path, kind: IndexKind
) -> None:
    """Ids are checked against what the index holds only up to the highest ever
    added: a loaded index knows its highest, so its ids are replaced, not doubled."""
    index, truth = _filled(kind, n=50)
    path = tmp_path / "agent_vectors.faiss"
    index.save_snapshot(path, generation=1, seq=1, fingerprint="f")
    loaded = VectorIndex.load_snapshot(path, dim=DIM, fingerprint="f")
    assert loaded is not None
    copy = loaded[0]
    highest = max(truth)
    rng = np.random.default_rng(3)
    replacement = _unit(rng, 1)
    copy.add(np.array([highest]), replacement)
    assert copy.ntotal == 50
    ids, scores = copy.search(replacement[0], 1)
    assert ids.tolist() == [highest] and scores[0] == pytest.approx(1.0, abs=1e-5)
    assert copy.remove([highest + 1, highest + 2]) == 0  # above everything: nothing
    assert copy.remove([min(truth)]) == 1
    assert copy.ntotal == 49


def test_snapshot_overwrite_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "v.faiss"
    first, _ = _filled("flat", n=50, seed=1)
    second, _ = _filled("flat", n=80, seed=2)
    first.save_snapshot(path, generation=1, seq=1, fingerprint="f")
    second.save_snapshot(path, generation=2, seq=5, fingerprint="f")
    loaded = VectorIndex.load_snapshot(path, dim=DIM, fingerprint="f")
    assert loaded is not None and loaded[1].generation == 2 and loaded[0].ntotal == 80


def test_missing_snapshot_is_none(tmp_path: Path) -> None:
    assert VectorIndex.load_snapshot(tmp_path / "none.faiss", dim=DIM, fingerprint="f") is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("dim", "fingerprint"), [(DIM, "other-embedder"), (DIM + 1, "f"), (8, "x")]
)
def test_snapshot_of_another_embedder_is_ignored_not_quarantined(
    tmp_path: Path, dim: int, fingerprint: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "v.faiss"
    index, _ = _filled("flat", n=20)
    index.save_snapshot(path, generation=1, seq=1, fingerprint="f")
    with caplog.at_level(logging.INFO, logger="spade_memory.storage.vectors"):
        assert VectorIndex.load_snapshot(path, dim=dim, fingerprint=fingerprint) is None
    assert "made for" in caplog.text
    assert list(tmp_path.iterdir()) == [path]


def _damage_modes(data: bytes) -> dict[str, bytes]:
    def flip(position: int) -> bytes:
        damaged = bytearray(data)
        damaged[position] ^= 0x5A
        return bytes(damaged)

    return {
        "empty": b"",
        "garbage": bytes(range(256)) * 8,
        "truncated-header": data[:10],
        "truncated-middle": data[: len(data) // 2],
        "truncated-last-byte": data[:-1],
        "extra-byte": data + b"\x00",
        "flip-magic": flip(0),
        "flip-header-length": flip(8),
        "flip-header-crc": flip(12),
        "flip-version": flip(16),
        "flip-generation": flip(20),
        "flip-fingerprint": flip(64),  # 16-byte prefix + 46-byte fixed header
        "flip-payload-start": flip(80),
        "flip-payload-middle": flip(len(data) // 2),
        "flip-payload-end": flip(len(data) - 1),
    }


@pytest.mark.parametrize("kind", KINDS)
def test_every_damaged_snapshot_is_quarantined(
    tmp_path: Path, kind: IndexKind, caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "source.faiss"
    index, _ = _filled(kind, n=40)
    index.save_snapshot(source, generation=3, seq=3, fingerprint="fingerprint-x")
    assert VectorIndex.load_snapshot(source, dim=DIM, fingerprint="fingerprint-x") is not None
    for name, damaged in _damage_modes(source.read_bytes()).items():
        folder = tmp_path / name
        folder.mkdir()
        path = folder / "v.faiss"
        path.write_bytes(damaged)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="spade_memory.storage.vectors"):
            assert VectorIndex.load_snapshot(path, dim=DIM, fingerprint="fingerprint-x") is None, (
                name
            )
        assert not path.exists(), name
        (moved,) = folder.iterdir()
        assert moved.name.startswith("v.faiss.corrupt-"), name
        assert moved.read_bytes() == damaged, name
        assert any(
            r.levelno == logging.WARNING and "damaged" in r.getMessage() for r in caplog.records
        ), name


def test_any_flipped_byte_is_caught(tmp_path: Path) -> None:
    source = tmp_path / "source.faiss"
    index, _ = _filled("flat", n=3, seed=3)
    index.save_snapshot(source, generation=1, seq=1, fingerprint="f")
    data = source.read_bytes()
    for position in range(0, len(data), max(1, len(data) // 200)):
        damaged = bytearray(data)
        damaged[position] ^= 0x01
        path = tmp_path / f"{position}.faiss"
        path.write_bytes(bytes(damaged))
        assert VectorIndex.load_snapshot(path, dim=DIM, fingerprint="f") is None, position
        assert not path.exists(), position


def test_stale_temporary_files_are_cleaned_on_load(tmp_path: Path) -> None:
    path = tmp_path / "v.faiss"
    index, _ = _filled("flat", n=10)
    index.save_snapshot(path, generation=1, seq=1, fingerprint="f")
    stale = tmp_path / ".v.faiss.999.123.tmp"
    stale.write_bytes(b"half a snapshot")
    assert VectorIndex.load_snapshot(path, dim=DIM, fingerprint="f") is not None
    assert not stale.exists()


# --- threads ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_searches_in_threads_while_adding(kind: IndexKind) -> None:
    rng = np.random.default_rng(30)
    index = VectorIndex(DIM, kind=kind)
    batches = [
        (np.arange(b * 50, b * 50 + 50, dtype=np.int64) + 1, _unit(rng, 50)) for b in range(30)
    ]
    queries = _unit(rng, 8)
    done = threading.Event()
    errors: list[BaseException] = []
    searched = [0] * 4

    def searcher(slot: int) -> None:
        try:
            while not done.is_set() or searched[slot] == 0:
                for query in queries:
                    ids, scores = index.search(
                        query, 10, allowed_ids=None if slot % 2 else np.arange(1, 1501, 3)
                    )
                    assert len(ids) == len(set(ids.tolist())) <= 10
                    assert (ids >= 1).all() and (ids <= 1500).all()
                    assert np.all(np.diff(scores) <= 1e-6)
                searched[slot] += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=searcher, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    try:
        for number, (ids, vectors) in enumerate(batches):
            index.add(ids, vectors)
            if number % 5 == 4:
                index.remove(ids[:10].tolist())
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert not errors, errors[0]
    assert all(count > 0 for count in searched)
    assert index.ntotal == 1500 - 6 * 10


@pytest.mark.parametrize("kind", KINDS)
def test_equal_scores_come_in_id_order(kind: IndexKind) -> None:
    """Ties (to float32 noise) are ordered by id, whatever order FAISS found them in."""
    index = VectorIndex(DIM, kind=kind)
    base = np.zeros(DIM, dtype=np.float32)
    base[0] = 1.0
    other = np.zeros(DIM, dtype=np.float32)
    other[1] = 1.0
    index.add([9, 3, 7, 5], np.stack([other, other, base, other]))
    query = base.copy()
    query[1] = 1e-9  # a score of 1e-9 for the three others: noise, a tie with 0
    ids, _ = index.search(query, 4)
    assert ids.tolist() == [7, 3, 5, 9]
    ids, _ = index.search(query, 4, allowed_ids=[9, 5, 3])
    assert ids.tolist() == [3, 5, 9]
