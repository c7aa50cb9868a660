"""Utilities of the performance benchmarks: percentiles, summaries, /proc figures, texts."""

from __future__ import annotations

import argparse
import math
import os
import statistics
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.perf_common import (
    TextGenerator,
    add_common_arguments,
    io_counters,
    markdown_table,
    open_fds,
    percentile,
    rss_bytes,
    sizes_from,
    summarize,
)

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=200))
def test_percentile_agrees_with_the_median_and_the_extremes(values: list[float]) -> None:
    assert math.isclose(
        percentile(values, 50), statistics.median(values), rel_tol=1e-9, abs_tol=1e-6
    )
    assert percentile(values, 0) == min(values)
    assert percentile(values, 100) == max(values)
    assert min(values) <= percentile(values, 99) <= max(values)


def test_summary_counts_bulk_operations_for_the_throughput() -> None:
    summary = summarize([0.010, 0.020, 0.030], wall_s=0.5, operations=300)
    assert summary.count == 300
    assert summary.per_second == 600
    assert summary.p50_ms == 20.0
    assert summary.max_ms == 30.0


def test_process_figures_move_with_the_process(tmp_path: Path) -> None:
    before_io, before_fds = io_counters(), open_fds()
    with open(tmp_path / "f", "wb") as handle:
        handle.write(b"x" * 200_000)
        handle.flush()
        os.fsync(handle.fileno())
        assert open_fds() == before_fds + 1
    after_io = io_counters()
    assert after_io["wchar"] - before_io["wchar"] >= 200_000
    assert after_io["write_bytes"] - before_io["write_bytes"] >= 200_000
    held = bytearray(64 * 1024 * 1024)
    assert rss_bytes() > 64 * 1024 * 1024
    del held


def test_texts_are_deterministic_and_questions_distinct() -> None:
    first = TextGenerator(seed=3).texts(50, start=100)
    assert first == TextGenerator(seed=3).texts(50, start=100)
    assert first != TextGenerator(seed=4).texts(50, start=100)
    assert TextGenerator(seed=3).texts(10, start=105) == first[5:15]
    questions = TextGenerator(seed=3).queries(500)
    assert len(set(questions)) == 500
    assert all(question.endswith("?") for question in questions)


def test_sizes_come_from_the_command_line() -> None:
    parser = argparse.ArgumentParser()
    add_common_arguments(parser, sizes=(1, 2, 3), quick=(1,))
    assert sizes_from(parser.parse_args([])) == [1, 2, 3]
    assert sizes_from(parser.parse_args(["--quick"])) == [1]
    assert sizes_from(parser.parse_args(["--sizes", "10,20"])) == [10, 20]


def test_markdown_table_has_one_row_per_item() -> None:
    table = markdown_table(["a", "b"], [[1, 0.5], [1234, float("nan")]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | 0.5 |", "| 1,234 | – |"]


async def test_keyword_benchmark_measures_a_memory_file(tmp_path: Path) -> None:
    from benchmarks.perf_keyword import measure
    from spade_memory import MemoryConfig, MemoryManager

    config = MemoryConfig(root=tmp_path, embedder=None)
    async with await MemoryManager.open("bench@localhost", config) as manager:
        await manager.store_many([{"content": text} for text in TextGenerator(seed=1).texts(60)])
    (database,) = tmp_path.glob("*_base_memory.db")
    result = await measure(database, queries=5)
    assert result["memories"] == 60
    for kind in ("questions", "one word"):
        figures = result[kind]
        assert 0 < figures["wall_p50_ms"] <= figures["wall_p99_ms"]
        assert figures["cpu_p50_ms"] >= 0
