"""The registry's decoded-file cache never hides a change made by someone else."""

from __future__ import annotations

import json
from pathlib import Path

from spade_memory.identity import AgentIdentity
from spade_memory.storage.registry import REGISTRY_NAME, Registry


def test_a_change_by_another_writer_is_seen(tmp_path: Path) -> None:
    registry = Registry(tmp_path)
    for number in range(20):
        registry.register(AgentIdentity.of(f"agent{number}@localhost"))
    assert len(registry.agents()) == 20
    # Another process (another Registry object, as after a restart) adds one more.
    Registry(tmp_path).register(AgentIdentity.of("late@localhost"))
    assert "late@localhost" in registry.agents().values()
    # Someone edits the file in place: the edit is seen too.
    path = tmp_path / REGISTRY_NAME
    document = json.loads(path.read_text())
    stem = AgentIdentity.of("agent3@localhost").stem
    document["agents"][stem]["created_at"] = 1.0
    path.write_text(json.dumps(document, indent=1))
    assert registry._read_locked()[stem]["created_at"] == 1.0


def test_a_damaged_file_is_not_answered_from_the_cache(tmp_path: Path) -> None:
    registry = Registry(tmp_path)
    identity = AgentIdentity.of("alice@localhost")
    registry.register(identity)
    path = tmp_path / REGISTRY_NAME
    path.write_text("{ not json")
    registry.register(AgentIdentity.of("bob@localhost"))  # recovers: moves it aside
    assert len(list(tmp_path.glob(f"{REGISTRY_NAME}.corrupt-*"))) == 1
    assert "bob@localhost" in registry.agents().values()
