"""The store floor of ``perf_store`` and the paired ratio of ``write_latency``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from benchmarks.perf_store import measure_floor
from benchmarks.write_latency import paired_ratio, table


async def test_the_floor_times_one_committed_row_per_store(tmp_path: Path) -> None:
    figures = await measure_floor(tmp_path, stores=25, synchronous="NORMAL")
    assert set(figures) == {"sqlite3", "aiosqlite"}
    for system, summary in figures.items():
        assert summary["count"] == 25 and summary["per_second"] > 0
        with sqlite3.connect(tmp_path / f"floor-{system}.db") as db:
            assert db.execute("SELECT count(*) FROM floor").fetchone()[0] == 25
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_paired_ratio_ignores_a_slow_moment_both_writes_shared() -> None:
    document = [1.0, 1.0, 10.0, 10.0, 10.0]
    graph = [1.5, 1.5, 15.0, 15.0, 15.0]  # always 1.5 times its pair
    assert paired_ratio(graph, document) == 1.5
    # the ratio of the medians (15 / 10) agrees here; it would not with the
    # slow moments falling on one mode's writes only
    assert paired_ratio([2.0, 3.0, 30.0], [1.0, 1.0, 10.0]) == 3.0


def test_the_write_latency_table_has_a_row_per_write_and_both_ratios() -> None:
    seconds = {"extract": [0.001, 0.002]}
    for synchronous in ("FULL", "NORMAL"):
        seconds[f"{synchronous}/document"] = [0.002, 0.004]
        seconds[f"{synchronous}/graph"] = [0.003, 0.010]
    text = table({"en": seconds}, {"en": ["one text", "another"]})
    lines = text.splitlines()
    assert len(lines) == 2 + 5 and all(line.count("|") == 8 for line in lines)
    # graph row: medians 6.5 / 3 ms; pairs 1.5 and 2.5, their median 2.0
    assert lines[4].endswith("| 2.17× | 2.00× |")
    assert lines[3].endswith("|  |  |")  # no ratio on the document row
