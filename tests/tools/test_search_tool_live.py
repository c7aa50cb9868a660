"""search_memories gives the LLM what recall gives the prompt: no superseded sentence."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from spade_memory import MemoryConfig, MemoryManager
from spade_memory.config import StorageConfig
from spade_memory.tools import ToolContext


@pytest.fixture(params=[False, True], ids=["derived at the store", "derived behind it"])
async def manager(request: pytest.FixtureRequest) -> AsyncIterator[MemoryManager]:
    config = MemoryConfig(
        in_memory=True,
        embedder=None,
        storage=StorageConfig(derive_in_background=request.param),
    )
    memory = await MemoryManager.open("keeper@localhost", config)
    try:
        yield memory
    finally:
        await memory.aclose()


async def _search(manager: MemoryManager, query: str) -> str:
    tool = next(tool for tool in manager.tools() if tool.name == "search_memories")
    result = await tool.call({"query": query}, ToolContext(manager=manager))
    assert result.ok, result.text
    return result.text


async def test_a_superseded_sentence_is_not_shown(manager: MemoryManager) -> None:
    old = await manager.store("Alice lives in Paris. Alice likes tea.")
    new = await manager.store("Alice lives in Rome.")
    text = await _search(manager, "Alice lives")
    assert "Rome" in text and f"(id {new.id})" in text
    assert "Paris" not in text  # a later memory says otherwise
    assert f"(id {old.id})" in text and "Alice likes tea." in text  # the rest of it stands
    await manager.flush()
    assert await _search(manager, "Alice lives") == text  # the same once derived


async def test_a_memory_with_nothing_live_is_left_out(manager: MemoryManager) -> None:
    await manager.store("Bob lives in Oslo.")
    newer = await manager.store("Bob lives in Bergen.")
    text = await _search(manager, "Bob lives")
    assert text.splitlines()[0].startswith("1 memory")
    assert "Bergen" in text and f"(id {newer.id})" in text and "Oslo" not in text
