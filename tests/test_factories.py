"""The shared test builders do what the tests rely on."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import (
    MEMORY_TOOL_NAMES,
    REPO,
    AgentDouble,
    child_env,
    fill,
    hashing_config,
    run_python,
    unique_name,
)

from spade_memory.manager import MemoryManager


def test_hashing_config_in_memory_or_under_a_root(tmp_path: Path) -> None:
    ephemeral = hashing_config()
    assert ephemeral.in_memory and ephemeral.embedder == "hashing"
    kept = hashing_config(tmp_path, embed_batch_size=7)
    assert not kept.in_memory and kept.root == tmp_path
    assert kept.storage.embed_batch_size == 7


async def test_fill_stores_every_text_in_order(fresh_memory: MemoryManager) -> None:
    stored = await fill(fresh_memory, ["tea at noon", "coffee at dawn"], category="preference")
    assert [memory.content for memory in stored] == ["tea at noon", "coffee at dawn"]
    assert {memory.category for memory in stored} == {"preference"}
    assert fresh_memory.jid == "alice@localhost"


async def test_agent_double_carries_the_memory_and_the_bare_jid(
    fresh_memory: MemoryManager,
) -> None:
    agent = AgentDouble(fresh_memory, "bob@localhost")
    assert str(agent.jid.bare) == "bob@localhost" and agent.memory is fresh_memory


def test_unique_names_differ() -> None:
    names = {unique_name("agent") for _ in range(50)}
    assert len(names) == 50 and all(name.startswith("agent-") for name in names)


def test_the_tool_names_are_the_registered_ones(fresh_memory: MemoryManager) -> None:
    assert tuple(tool.name for tool in fresh_memory.tools()) == MEMORY_TOOL_NAMES


@pytest.mark.slow  # a new Python process importing the package: seconds
def test_a_child_imports_this_tree_without_the_xmpp_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPADE_MEMORY_XMPP_PORT", "1")
    assert "SPADE_MEMORY_XMPP_PORT" not in child_env()
    code = "import os, spade_memory as m; print(m.__file__, os.getenv('SPADE_MEMORY_XMPP_PORT'))"
    done = run_python("-c", code, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    where, port = done.stdout.split()
    assert Path(where).resolve().is_relative_to(REPO) and port == "None"
