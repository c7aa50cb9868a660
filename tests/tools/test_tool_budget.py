"""RequestBudget: calls, wall time and output characters per LLM request."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spade_memory.config import MemoryConfig, ToolBudget
from spade_memory.errors import BudgetExceeded, ConfigError
from spade_memory.models import Memory, SearchResult
from spade_memory.tools import RequestBudget, ToolContext, build_memory_tools
from spade_memory.tools.budget import TRUNCATION_NOTE


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def memory(memory_id: int, content: str) -> Memory:
    return Memory(
        id=memory_id,
        uid=f"uid-{memory_id}",
        category="fact",
        content=content,
        context=None,
        confidence=1.0,
        importance=0.5,
        status="active",
        source_conversation=None,
        source_sender=None,
        created_at=1.0,
        updated_at=1.0,
        last_accessed=None,
        access_count=0,
    )


class SlowManager:
    """Answers searches with many long memories; can be told to block until released."""

    def __init__(self, results: int = 20) -> None:
        self.config = MemoryConfig(in_memory=True, embedder=None)
        self.categories = self.config.categories
        self.results = [SearchResult(memory(i, "x" * 400), 1.0) for i in range(1, results + 1)]
        self.block: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.calls: list[str] = []
        self.stored = 0

    async def _maybe_block(self) -> None:
        self.entered.set()
        if self.block is not None:
            await self.block.wait()

    async def recall(self, query: str, **kwargs: Any) -> list[SearchResult]:
        self.calls.append("recall")
        await self._maybe_block()
        return self.results[: kwargs.get("limit", 5)]

    async def store(self, content: str, **kwargs: Any) -> Memory:
        self.calls.append("store")
        await self._maybe_block()
        self.stored += 1
        return memory(self.stored, content)


def tools_by_name() -> dict[str, Any]:
    return {tool.name: tool for tool in build_memory_tools(("fact", "preference"))}


def test_calls_are_counted_and_refused_when_spent() -> None:
    budget = RequestBudget(ToolBudget(max_calls=2))
    budget.charge_call("search_memories")
    budget.charge_call("store_memory")
    assert budget.remaining_calls == 0
    with pytest.raises(BudgetExceeded, match="2 memory tool calls"):
        budget.charge_call("search_memories")
    spent = budget.spent
    assert spent.calls == 2 and spent.refused == 1
    assert spent.by_tool == {"search_memories": 1, "store_memory": 1}


def test_time_counts_only_while_tools_run_and_overlaps_once() -> None:
    clock = FakeClock()
    budget = RequestBudget(ToolBudget(max_seconds=10.0), clock=clock)
    clock.now += 100  # the LLM thinking between calls costs nothing
    assert budget.remaining_seconds == 10.0
    with budget.running():
        clock.now += 3
        with budget.running():  # a parallel call
            clock.now += 2
            assert budget.elapsed == 5.0
        clock.now += 1
    assert budget.elapsed == 6.0
    clock.now += 50
    assert budget.remaining_seconds == 4.0
    with budget.running():
        clock.now += 4
    assert budget.remaining_seconds == 0.0
    with pytest.raises(BudgetExceeded, match="10 s"):
        budget.charge_call("list_memories")


def test_output_is_truncated_to_what_is_left() -> None:
    budget = RequestBudget(ToolBudget(max_output_chars=100))
    assert budget.take_output("a" * 60) == "a" * 60
    assert budget.remaining_output == 40
    lines = "\n".join(f"line {i:03}" for i in range(10))  # 10 lines of 8 + newlines
    cut = budget.take_output(lines)
    assert cut.endswith(TRUNCATION_NOTE)
    kept = cut[: -len(TRUNCATION_NOTE)]
    assert lines.startswith(kept) and len(kept) <= 40
    assert kept.endswith(("line 003", "line 004"))  # cut at a line break
    assert budget.remaining_output == 0
    assert budget.take_output("more") == TRUNCATION_NOTE.lstrip("\n")
    assert budget.take_output("") == ""
    assert budget.spent.truncated == 2


@given(chunks=st.lists(st.text(max_size=300), max_size=12), limit=st.integers(100, 1000))
def test_charged_output_never_exceeds_the_limit(chunks: list[str], limit: int) -> None:
    budget = RequestBudget(ToolBudget(max_output_chars=limit))
    delivered = 0
    for chunk in chunks:
        out = budget.take_output(chunk)
        body = out.removesuffix(TRUNCATION_NOTE).removesuffix(TRUNCATION_NOTE.lstrip("\n"))
        assert chunk.startswith(body)
        if out == chunk:
            delivered += len(chunk)
        else:
            delivered += len(body)
    assert delivered <= limit
    assert budget.spent.output_chars <= limit
    assert budget.remaining_output == limit - budget.spent.output_chars


def test_budget_limits_come_from_tool_budget_config() -> None:
    with pytest.raises(TypeError):
        RequestBudget({"max_calls": 4})  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        ToolBudget(max_output_chars=10)
    budget = RequestBudget(MemoryConfig(in_memory=True).tools)
    assert (budget.remaining_calls, budget.remaining_seconds, budget.remaining_output) == (
        4,
        20.0,
        12_000,
    )


async def test_tool_refuses_the_call_after_the_budget_without_touching_memory() -> None:
    manager = SlowManager()
    budget = RequestBudget(ToolBudget(max_calls=2))
    context = ToolContext(manager, budget=budget)  # type: ignore[arg-type]
    search = tools_by_name()["search_memories"]
    assert (await search.call({"query": "a", "limit": 1}, context)).ok
    bad = await search.call({"query": ""}, context)  # invalid calls still cost a call
    assert not bad.ok
    refused = await search.call({"query": "b"}, context)
    assert not refused.ok
    assert "2 memory tool calls" in refused.text
    assert manager.calls == ["recall"]


async def test_tool_output_is_cut_and_says_so() -> None:
    manager = SlowManager()
    budget = RequestBudget(ToolBudget(max_output_chars=1000))
    context = ToolContext(manager, budget=budget)  # type: ignore[arg-type]
    result = await tools_by_name()["search_memories"].call({"query": "x", "limit": 20}, context)
    assert result.ok
    assert result.text.endswith(TRUNCATION_NOTE)
    assert len(result.text) <= 1000 + len(TRUNCATION_NOTE)
    assert budget.remaining_output == 0
    second = await tools_by_name()["search_memories"].call({"query": "x"}, context)
    assert second.ok and second.text == TRUNCATION_NOTE.lstrip("\n")


async def test_read_tool_is_cut_off_when_time_runs_out() -> None:
    manager = SlowManager()
    manager.block = asyncio.Event()  # never set: the search hangs
    budget = RequestBudget(ToolBudget(max_seconds=0.05))
    context = ToolContext(manager, budget=budget)  # type: ignore[arg-type]
    result = await tools_by_name()["search_memories"].call({"query": "x"}, context)
    assert not result.ok
    assert "ran out of time" in result.text
    assert budget.remaining_seconds == 0.0
    again = await tools_by_name()["search_memories"].call({"query": "x"}, context)
    assert not again.ok and "0.05 s" in again.text
    assert manager.calls == ["recall"]


async def test_write_tool_is_never_cut_off_half_way() -> None:
    manager = SlowManager()
    manager.block = asyncio.Event()
    budget = RequestBudget(ToolBudget(max_seconds=0.01))
    context = ToolContext(manager, budget=budget)  # type: ignore[arg-type]
    store = tools_by_name()["store_memory"]
    call = asyncio.create_task(store.call({"category": "fact", "content": "kept"}, context))
    await manager.entered.wait()
    asyncio.get_running_loop().call_later(0.05, manager.block.set)
    result = await call
    assert result.ok, result.text
    assert manager.stored == 1
    assert budget.elapsed >= 0.05


async def test_a_write_confirmation_is_never_cut_by_the_output_budget() -> None:
    from spade_memory.manager import MemoryManager

    config = MemoryConfig(in_memory=True, embedder=None)
    async with await MemoryManager.open("budget@localhost", config) as manager:
        for n in range(12):
            await manager.store(f"The office in town {n} opens at nine in the morning")
        budget = RequestBudget(ToolBudget(max_output_chars=200))
        context = ToolContext(manager, budget=budget)
        tools = {tool.name: tool for tool in build_memory_tools(manager.categories)}
        listed = await tools["list_memories"].call({"limit": 12}, context)
        assert listed.ok and listed.text.endswith(TRUNCATION_NOTE)
        stored = await tools["store_memory"].call(
            {"content": "The Porto office opens at ten", "category": "fact"}, context
        )
        assert stored.ok and stored.text == "Stored as memory 13 in category fact."
        assert budget.remaining_output == 0
