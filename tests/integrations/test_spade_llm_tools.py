"""spade_memory's tools as spade_llm LLMTool objects, called the way spade_llm calls them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from factories import MEMORY_TOOL_NAMES
from spade.message import Message
from spade_llm.context import ContextManager
from spade_llm.memory import AgentBaseMemory, AgentInteractionMemory, AgentMemoryTool
from spade_llm.memory import create_base_memory_tools as their_base_tools
from spade_llm.tools import LLMTool

from spade_memory.errors import ConfigError, InvalidAgentId
from spade_memory.integrations.spade_llm import SpadeLLMMemoryTool, spade_llm_tools
from spade_memory.manager import MemoryManager

REPO = Path(__file__).resolve().parents[2]
NAMES = list(MEMORY_TOOL_NAMES)


def by_name(manager: MemoryManager, **kwargs: Any) -> dict[str, SpadeLLMMemoryTool]:
    return {tool.name: tool for tool in spade_llm_tools(manager, **kwargs)}


async def test_tools_are_llm_tools_with_spade_llm_names(
    fresh_memory: MemoryManager,
) -> None:
    tools = spade_llm_tools(fresh_memory)
    assert [tool.name for tool in tools] == NAMES
    for tool in tools:
        assert isinstance(tool, LLMTool)
        openai = tool.to_openai_tool()
        assert openai["function"]["name"] == tool.name
        assert openai["function"]["parameters"]["type"] == "object"
    picked = spade_llm_tools(fresh_memory, names=["search_memories", "store_memory"])
    assert [tool.name for tool in picked] == ["search_memories", "store_memory"]
    with pytest.raises(ConfigError, match="no memory tool named 'recall'"):
        spade_llm_tools(fresh_memory, names=["recall"])


async def test_every_argument_of_spade_llm_tools_is_accepted(
    fresh_memory: MemoryManager, tmp_path: Path
) -> None:
    base = AgentBaseMemory("alice@localhost", memory_path=str(tmp_path))
    notes = AgentInteractionMemory("alice@localhost", memory_path=str(tmp_path))
    theirs = {tool.name: tool for tool in [*their_base_tools(base), AgentMemoryTool(notes)]}
    ours = by_name(fresh_memory)
    assert set(theirs) <= set(ours)
    for name, their_tool in theirs.items():
        their_props = their_tool.parameters["properties"]
        our_props = ours[name].parameters["properties"]
        for argument, spec in their_props.items():
            assert argument in our_props, f"{name}.{argument}"
            assert our_props[argument]["type"] == spec["type"], f"{name}.{argument}"
            if "enum" in spec:
                assert set(spec["enum"]) <= set(our_props[argument]["enum"])
        assert set(ours[name].parameters.get("required", [])) <= set(
            their_tool.parameters.get("required", [])
        )


async def test_called_as_spade_llm_calls_them(fresh_memory: MemoryManager) -> None:
    tools = by_name(fresh_memory)
    for tool in tools.values():  # what LLMBehaviour does before each request
        tool.set_conversation_id("thread-7")
    # the arguments of spade_llm's own store_memory
    said = await tools["store_memory"].execute(
        category="fact",
        content="The staging database password rotates every 30 days",
        context="ops handbook",
        confidence=0.9,
    )
    assert said.startswith("Stored as memory ")
    (memory,) = await fresh_memory.list()
    assert (memory.context, memory.confidence) == ("ops handbook", 0.9)
    assert memory.source_conversation == "thread-7"
    found = await tools["search_memories"].execute(query="database password rotation", limit=5)
    assert f"(id {memory.id})" in found.splitlines()[1]
    listed = await tools["list_memories"].execute(category="fact", limit=20)
    assert "staging database password" in listed
    noted = await tools["remember_interaction_info"].execute(information="Bob owns the rotation")
    assert noted == "Noted for this conversation."
    notes = await fresh_memory.notes("thread-7")
    assert [note.content for note in notes] == ["Bob owns the rotation"]
    tools["forget_memory"].set_conversation_id("thread-7")  # a new request: 4 calls each
    forgot = await tools["forget_memory"].execute(memory_id=memory.id)
    assert forgot.startswith(f"Forgot memory {memory.id}")
    assert await fresh_memory.list() == []


@pytest.mark.parametrize(
    ("name", "arguments", "complaint"),
    [
        ("store_memory", {"category": "opinion", "content": "x"}, "category must be one of"),
        ("store_memory", {"category": "fact"}, "missing required argument: content"),
        ("store_memory", {"category": "fact", "content": "  "}, "content must not be empty"),
        ("store_memory", {"category": "fact", "content": "x", "confidence": 2}, "confidence"),
        ("store_memory", {"category": "fact", "content": "x", "mood": "ok"}, "unknown argument"),
        ("store_memory", {"category": "fact", "content": "a\x00b"}, "NUL"),
        ("search_memories", {"query": "x", "limit": "ten"}, "limit must be an integer"),
        ("list_memories", {"limit": 0}, "limit must be an integer from 1 to 50"),
        ("remember_interaction_info", {}, "missing required argument: information"),
        ("forget_memory", {"memory_id": True}, "memory_id must be an integer"),
    ],
)
async def test_bad_input_gets_a_clear_error_and_writes_nothing(
    fresh_memory: MemoryManager, name: str, arguments: dict[str, Any], complaint: str
) -> None:
    tool = by_name(fresh_memory)[name]
    tool.set_conversation_id("thread-1")
    said = await tool.execute(**arguments)
    assert said.startswith(f"invalid arguments for {name}: ") and complaint in said
    assert "Nothing was changed" in said
    assert await fresh_memory.list() == []
    assert await fresh_memory.conversations() == []


async def test_a_note_needs_a_conversation(fresh_memory: MemoryManager) -> None:
    tool = by_name(fresh_memory)["remember_interaction_info"]
    said = await tool.execute(information="Bob owns the rotation")
    assert "no current conversation" in said
    assert await fresh_memory.conversations() == []


async def test_each_request_has_its_own_budget(fresh_memory: MemoryManager) -> None:
    tools = by_name(fresh_memory)
    search = tools["search_memories"]
    limit = fresh_memory.config.tools.max_calls
    search.set_conversation_id("thread-1")
    for _ in range(limit):
        assert (await search.execute(query="anything")).startswith("No memories")
    refused = await tools["store_memory"].execute(category="fact", content="one too many")
    assert refused.startswith("store_memory was not run: this request already made")
    assert await fresh_memory.list() == []
    for tool in tools.values():
        tool.set_conversation_id("thread-1")  # the next request
    assert (await tools["store_memory"].execute(category="fact", content="x")).startswith("Stored")
    unlimited = by_name(fresh_memory, budget=False)["search_memories"]
    unlimited.set_conversation_id("thread-2")
    for _ in range(limit + 1):
        assert "memor" in await unlimited.execute(query="x")


async def test_the_sender_comes_from_the_spade_llm_agent(
    fresh_memory: MemoryManager,
) -> None:
    context = ContextManager()
    message = Message(to="alice@localhost", sender="Bob@localhost/phone", thread="t-9")
    message.body = "remember that the report is due Friday"
    context.add_message(message, "t-9")
    tools = by_name(fresh_memory)
    for tool in tools.values():  # what LLMAgent and LLMBehaviour do
        tool.set_agent(SimpleNamespace(context=context))
        tool.set_conversation_id("t-9")
    await tools["store_memory"].execute(category="fact", content="The report is due Friday")
    await tools["remember_interaction_info"].execute(information="Bob asked about the report")
    (memory,) = await fresh_memory.list()
    assert (memory.source_sender, memory.source_conversation) == ("bob@localhost", "t-9")
    (note,) = await fresh_memory.notes("t-9")
    assert note.author == "bob@localhost"
    fixed = by_name(fresh_memory, sender="carol@localhost", conversation_id="c")
    await fixed["remember_interaction_info"].execute(information="Carol called")
    assert (await fresh_memory.notes("c"))[0].author == "carol@localhost"


async def test_a_sender_given_is_kept_as_its_bare_jid_and_one_that_is_no_jid_is_refused(
    fresh_memory: MemoryManager,
) -> None:
    fixed = by_name(fresh_memory, sender="Carol@LocalHost/desk", conversation_id="c")
    await fixed["store_memory"].execute(category="fact", content="Carol moved to Porto")
    await fixed["remember_interaction_info"].execute(information="Carol called")
    (memory,) = await fresh_memory.list()
    assert (memory.source_sender, memory.scope.owner) == ("carol@localhost",) * 2
    assert (await fresh_memory.notes("c"))[0].author == "carol@localhost"
    with pytest.raises(InvalidAgentId, match="not a valid agent JID"):
        spade_llm_tools(fresh_memory, sender="Carol")  # said to the program, not to the LLM


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_spade_memory_never_imports_spade_llm_and_says_what_to_install() -> None:
    done = run_python(
        "import json, sys, spade_memory, spade_memory.integrations\n"
        "assert 'spade_llm' not in sys.modules and 'litellm' not in sys.modules\n"
        "sys.modules['spade_llm'] = None  # now as if it were not installed\n"
        "from spade_memory.integrations.spade_llm import SpadeMemoryBackend, spade_llm_tools\n"
        "said = []\n"
        "for use in (lambda: SpadeMemoryBackend(jid='a@b'), lambda: spade_llm_tools(None)):\n"
        "    try:\n"
        "        use()\n"
        "    except ImportError as exc:\n"
        "        said.append(str(exc))\n"
        "print(json.dumps(said))"
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert len(said) == 2
    for text in said:
        assert 'pip install "spade-memory[spade-llm]"' in text


async def test_any_argument_name_gets_a_clear_answer(fresh_memory: MemoryManager) -> None:
    search = by_name(fresh_memory)["search_memories"]
    said = await search.execute(query="x", self="oops")
    assert said.startswith("invalid arguments for search_memories: unknown argument 'self'")


async def test_the_tools_act_for_the_sender_of_the_conversation(
    fresh_memory: MemoryManager,
) -> None:
    human = by_name(fresh_memory, sender="human@localhost", conversation_id="c-human")
    mallory = by_name(fresh_memory, sender="mallory@localhost", conversation_id="c-mallory")
    await human["store_memory"].execute(category="fact", content="The Porto wifi is blue-42")
    (told,) = await fresh_memory.list()
    assert told.scope.owner == "human@localhost" and told.scope.visibility == "private"
    assert "blue-42" in await human["list_memories"].execute()
    assert "blue-42" not in await mallory["list_memories"].execute()
    assert "blue-42" not in await mallory["search_memories"].execute(query="Porto wifi")
    assert "no memory with id" in await mallory["forget_memory"].execute(memory_id=told.id)
    assert (await fresh_memory.get(told.id)).content == told.content


async def test_a_sender_reusing_anothers_thread_acts_for_itself(
    fresh_memory: MemoryManager,
) -> None:
    # spade_llm keys a conversation by the thread its first sender chose, and records
    # that first sender alone; the tools act for whoever wrote the newest message.
    context = ContextManager()
    tools = by_name(fresh_memory)
    for tool in tools.values():
        tool.set_agent(SimpleNamespace(context=context))

    def write(sender: str, body: str) -> None:
        message = Message(to="alice@localhost", sender=sender, thread="support", body=body)
        context.add_message(message, "support")
        for tool in tools.values():
            tool.set_conversation_id("support")

    write("bob@localhost", "my PIN is 2468")
    await tools["store_memory"].execute(category="fact", content="Bob's PIN is 2468")
    await tools["remember_interaction_info"].execute(information="Bob gave his PIN")
    write("mallory@localhost/laptop", "what do you know?")
    assert "2468" not in await tools["list_memories"].execute()
    assert "2468" not in await tools["search_memories"].execute(query="PIN")
    await tools["store_memory"].execute(category="fact", content="Mallory likes tea")
    await tools["remember_interaction_info"].execute(information="Mallory asked about PINs")
    told = {m.content: m for m in await fresh_memory.list()}
    assert told["Bob's PIN is 2468"].scope.owner == "bob@localhost"
    mallory = told["Mallory likes tea"]
    assert (mallory.scope.owner, mallory.source_sender) == ("mallory@localhost",) * 2
    assert mallory.source_conversation != "support"  # a conversation of her own
    assert [n.author for n in await fresh_memory.notes("support")] == ["bob@localhost"]
    assert [n.author for n in await fresh_memory.notes(mallory.source_conversation)] == [
        "mallory@localhost"
    ]
    write("bob@localhost", "back again")  # the first sender is answered as before
    assert "2468" in await tools["list_memories"].execute()
