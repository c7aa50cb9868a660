"""SpadeMemoryInteractionMemory in place of spade_llm's AgentInteractionMemory, and
memory tools that never duplicate a tool spade_llm registers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from spade.message import Message
from spade_llm.agent import LLMAgent
from spade_llm.memory import AgentInteractionMemory, AgentMemoryTool
from spade_llm.providers import LLMProvider

from spade_memory import MemoryConfig, MemoryManager, conversation_id_for
from spade_memory.integrations.spade_llm import (
    SpadeLLMMemoryTool,
    SpadeMemoryInteractionMemory,
    spade_llm_tools,
    use_interaction_memory,
)

CONVERSATION = "alice@localhost_bob@localhost"
NOTES = ["Bob's API takes JSON over HTTPS", "Bob answers within a day", "  last note \n"]


def provider() -> Any:
    return LLMProvider(model="qwen2.5", base_url="http://localhost:11434/v1")


def names(tools: list[Any]) -> list[str]:
    return [tool.name for tool in tools]


async def test_same_methods_and_summary_as_spade_llm(
    fresh_memory: MemoryManager, tmp_path: Path
) -> None:
    theirs = AgentInteractionMemory("alice@localhost", memory_path=str(tmp_path))
    ours = SpadeMemoryInteractionMemory(fresh_memory)
    for memory in (theirs, ours):
        assert memory.get_context_summary(CONVERSATION) is None
        assert memory.get_information(CONVERSATION) == []
        for note in NOTES:
            said = memory.add_information(CONVERSATION, note)
            assert said == f"Remembered information about this interaction: {note}"
    assert ours.get_context_summary(CONVERSATION) == theirs.get_context_summary(CONVERSATION)
    assert ours.get_context_summary(CONVERSATION) == (
        "Previous interaction notes:\n- Bob's API takes JSON over HTTPS\n"
        "- Bob answers within a day\n-   last note"
    )
    assert ours.get_information(CONVERSATION) == theirs.get_information(CONVERSATION) == NOTES
    theirs_all, ours_all = theirs.get_all_interactions(), ours.get_all_interactions()
    assert list(ours_all) == list(theirs_all) == [CONVERSATION]
    assert [set(e) for e in ours_all[CONVERSATION]] == [{"content", "timestamp"}] * 3
    assert ours.interactions == {"agent_id": "alice@localhost", "interactions": ours_all}
    for memory in (theirs, ours):
        assert memory.clear_conversation(CONVERSATION) is True
        assert memory.clear_conversation(CONVERSATION) is False
        assert memory.get_context_summary(CONVERSATION) is None
    assert await fresh_memory.notes(CONVERSATION) == []


async def test_notes_are_kept_in_the_notes_file(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None)
    async with await MemoryManager.open("alice@localhost", config) as manager:
        memory = SpadeMemoryInteractionMemory(manager)
        for note in NOTES:
            memory.add_information(CONVERSATION, note)
        assert memory.get_information(CONVERSATION) == NOTES  # at once, before the write
        await memory.flush()
        assert memory.storage_path is not None and memory.storage_path.is_file()
        assert [n.content for n in await manager.notes(CONVERSATION)] == NOTES
    async with await MemoryManager.open("alice@localhost", config) as manager:
        again = SpadeMemoryInteractionMemory(manager)
        assert again.get_information(CONVERSATION) == NOTES
        assert again.get_context_summary(CONVERSATION) is not None
        assert again.clear_conversation(CONVERSATION) is True
        await again.flush()
    async with await MemoryManager.open("alice@localhost", config) as manager:
        assert SpadeMemoryInteractionMemory(manager).get_information(CONVERSATION) == []


async def test_a_note_that_cannot_be_kept_is_answered_not_raised(
    fresh_memory: MemoryManager,
) -> None:
    memory = SpadeMemoryInteractionMemory(fresh_memory)
    said = memory.add_information(CONVERSATION, "   ")
    assert said.startswith("Could not remember this information:")
    assert memory.get_information(CONVERSATION) == []
    assert memory.get_information("") == []
    assert memory.clear_conversation("") is False


async def test_the_agent_injects_our_notes_and_its_tool_writes_them(
    fresh_memory: MemoryManager, tmp_path: Path
) -> None:
    agent = LLMAgent(
        "alice@localhost", "pw", provider=provider(), interaction_memory=(True, str(tmp_path))
    )
    memory = SpadeMemoryInteractionMemory(fresh_memory)
    use_interaction_memory(agent, memory)
    assert agent.interaction_memory is memory and agent.llm_behaviour.interaction_memory is memory
    (tool,) = [t for t in agent.tools if t.name == "remember_interaction_info"]
    assert isinstance(tool, AgentMemoryTool) and tool.interaction_memory is memory
    tool.set_conversation_id(CONVERSATION)  # what LLMBehaviour does before a request
    await tool.execute(information=NOTES[0])
    assert [n.content for n in await fresh_memory.notes(CONVERSATION)] == NOTES[:1]
    behaviour = agent.llm_behaviour
    await behaviour._inject_interaction_memory(CONVERSATION)
    history = behaviour.context.get_conversation_history(CONVERSATION)
    assert {"role": "system", "content": f"Previous interaction notes:\n- {NOTES[0]}"} in [
        {"role": m["role"], "content": m["content"]} for m in history
    ]
    bare = LLMAgent("carol@localhost", "pw", provider=provider())
    use_interaction_memory(bare, memory)
    assert names(bare.tools).count("remember_interaction_info") == 1


@pytest.mark.parametrize("base_memory", [False, True])
async def test_tools_never_duplicate_what_spade_llm_registers(
    fresh_memory: MemoryManager, tmp_path: Path, base_memory: bool
) -> None:
    agent = LLMAgent(
        "alice@localhost",
        "pw",
        provider=provider(),
        tools=spade_llm_tools(fresh_memory),
        interaction_memory=(True, str(tmp_path)),
        agent_base_memory=(base_memory, str(tmp_path)),
    )
    listed = names(agent.tools)
    assert len(listed) == len(set(listed)), listed
    assert agent.llm_behaviour.tools is agent.tools
    (note_tool,) = [t for t in agent.tools if t.name == "remember_interaction_info"]
    assert isinstance(note_tool, AgentMemoryTool)  # spade_llm's, which its prompt reads
    ours = {t.name for t in agent.tools if isinstance(t, SpadeLLMMemoryTool)}
    assert "forget_memory" in ours and "remember_interaction_info" not in ours
    assert ("store_memory" in ours) is not base_memory
    for extra in spade_llm_tools(fresh_memory, agent=agent):  # built after the agent
        agent.add_tool(extra)
    listed = names(agent.tools)
    assert len(listed) == len(set(listed)), listed
    if agent.agent_base_memory is not None:
        await agent.agent_base_memory.cleanup()


async def test_tools_for_an_existing_agent_leave_out_its_names(
    fresh_memory: MemoryManager, tmp_path: Path
) -> None:
    agent = LLMAgent(
        "alice@localhost", "pw", provider=provider(), interaction_memory=(True, str(tmp_path))
    )
    tools = spade_llm_tools(fresh_memory, agent=agent)
    assert "remember_interaction_info" not in names(tools)
    assert "store_memory" in names(tools)


async def test_our_tools_added_one_by_one_are_offered_once(
    fresh_memory: MemoryManager, tmp_path: Path
) -> None:
    agent = LLMAgent(
        "alice@localhost", "pw", provider=provider(), interaction_memory=(True, str(tmp_path))
    )
    for tool in spade_llm_tools(fresh_memory, agent=agent):  # as the README shows
        agent.add_tool(tool)  # spade_llm appends to the list it shares with its behaviour
    listed = names(agent.llm_behaviour.tools)
    assert len(listed) == len(set(listed)), listed
    assert {"store_memory", "search_memories", "forget_memory"} <= set(listed)


def test_a_note_added_outside_an_event_loop_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    loop = asyncio.new_event_loop()
    config = MemoryConfig(root=tmp_path, embedder="hashing")
    manager = loop.run_until_complete(MemoryManager.open("alice@localhost", config))
    try:
        notes = SpadeMemoryInteractionMemory(manager)
        said = notes.add_information(CONVERSATION, "Bob likes pizza")  # no loop runs now
        assert said.startswith("Could not remember this information")
        assert notes.get_information(CONVERSATION) == []  # not shown, then lost at reopen
    finally:
        loop.run_until_complete(manager.aclose())
        loop.close()


async def test_a_thread_named_after_two_others_never_reads_their_notes(
    fresh_memory: MemoryManager,
) -> None:
    # spade_llm's conversation id is the thread its sender chose: mallory writing
    # in the thread "alice@..._bob@..." must not have alice's notes on bob (kept
    # under spade_memory's id of the pair, as import-spade-llm keeps them) put into
    # the prompt that answers mallory, nor clear them.
    await fresh_memory.add_note(
        conversation_id_for("alice@localhost", "bob@localhost"), "Bob's staging password is hunter2"
    )
    agent = LLMAgent("alice@localhost", "pw", provider=provider())
    memory = SpadeMemoryInteractionMemory(fresh_memory)
    use_interaction_memory(agent, memory)
    context = agent.llm_behaviour.context

    def message_from(sender: str, thread: str) -> None:
        message = Message(to="alice@localhost", sender=f"{sender}/phone", thread=thread, body="hi")
        context.add_message(message, thread)

    mallory_thread = CONVERSATION  # "alice@localhost_bob@localhost"
    message_from("mallory@localhost", mallory_thread)
    assert memory.get_context_summary(mallory_thread) is None
    assert memory.clear_conversation(mallory_thread) is False
    message_from("bob@localhost", mallory_thread)  # bob writes in it: his notes
    assert memory.get_information(mallory_thread) == ["Bob's staging password is hunter2"]
    assert await fresh_memory.notes(conversation_id_for("alice@localhost", "bob@localhost"))
