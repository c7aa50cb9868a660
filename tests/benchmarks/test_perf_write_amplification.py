"""The counters the write-amplification benchmark reads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.perf_write_amplification import device_written_bytes, folio_accounting


def test_device_counter_sees_a_synced_write(tmp_path: Path) -> None:
    before = device_written_bytes(tmp_path)
    if before is None:
        pytest.skip("the folder is not on a block device with a stat file")
    with open(tmp_path / "f", "wb") as handle:
        handle.write(os.urandom(1 << 20))
        handle.flush()
        os.fsync(handle.fileno())
    after = device_written_bytes(tmp_path)
    assert after is not None
    assert after - before >= 1 << 20


def test_folio_accounting_counts_at_least_the_page_written(tmp_path: Path) -> None:
    counted = folio_accounting(tmp_path, pages=64, writes=8)
    assert counted >= 4096
    assert list(tmp_path.iterdir()) == []
