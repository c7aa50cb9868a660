"""Agents ask each other's memories and share memories over a real XMPP socket.

One embedded server and four agents per module: alice owns the memory asked
(facts for bob, patterns for bob and carol, a private category for nobody), bob
accepts memories from alice, carol is allowed little, dan has sharing off. The
agents are taken out of SPADE's in-process container so every message crosses
the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from factories import unique_name
from spade.container import Container
from spade.message import Message

from spade_memory.config import (
    DEFAULT_CATEGORIES,
    MemoryConfig,
    SharingConfig,
    ToolBudget,
)
from spade_memory.errors import (
    ConfigError,
    SharingError,
    SharingRefused,
    SharingTimeout,
)
from spade_memory.identity import conversation_id_for, thread_conversation_id
from spade_memory.models import Scope, Viewer
from spade_memory.spade.llm_agent import LLMAgent
from spade_memory.spade.sharing import QueryAnswer
from spade_memory.spade.sharing.protocol import (
    PERFORMATIVE,
    QUERY_PROTOCOL,
    QUERY_REF,
    SHARE_PROTOCOL,
    SharedMemory,
    make_request,
    parse_reason,
)
from spade_memory.testing.scripted_llm import ScriptedLLM
from spade_memory.testing.xmpp_server import EmbeddedXMPPServer
from spade_memory.tools import RequestBudget, ToolContext

pytestmark = pytest.mark.asyncio(loop_scope="module")

CATEGORIES = (*DEFAULT_CATEGORIES, "private")
MAX_ANSWER_BYTES = 2_048
MAX_CHARS = 200


@dataclass
class World:
    server: EmbeddedXMPPServer
    alice: LLMAgent
    bob: LLMAgent
    carol: LLMAgent
    dan: LLMAgent
    started: list[LLMAgent]

    def jid(self, name: str) -> str:
        return self.server.jid(unique_name(name))

    async def start(self, agent: LLMAgent) -> LLMAgent:
        self.started.append(agent)
        await asyncio.wait_for(agent.start(auto_register=True), 20)
        Container().unregister(str(agent.jid))  # no in-process shortcut: use XMPP
        return agent


def bare(agent: LLMAgent) -> str:
    return str(agent.jid.bare)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    Container().reset()
    folder: Path = tmp_path_factory.mktemp("xmpp")
    async with EmbeddedXMPPServer(folder=folder) as server:

        def jid(name: str) -> str:
            return server.jid(unique_name(name))

        names = {name: jid(name) for name in ("alice", "bob", "carol", "dan")}

        def config(sharing: SharingConfig | None) -> MemoryConfig:
            return MemoryConfig(
                in_memory=True, embedder="hashing", categories=CATEGORIES, sharing=sharing
            )

        alice_sharing = SharingConfig(
            allow={"fact": [names["bob"]], "pattern": [names["bob"], names["carol"]]},
            max_answer_bytes=MAX_ANSWER_BYTES,
            max_content_chars=MAX_CHARS,
            burst=100,
        )
        port = server.port
        bob_sharing = SharingConfig(accept_from=frozenset({names["alice"]}), ask_timeout_seconds=2)
        agents = {
            "alice": LLMAgent(
                names["alice"], "pw", port=port, llm=ScriptedLLM(), memory=config(alice_sharing)
            ),
            "bob": LLMAgent(names["bob"], "pw", port=port, memory=config(bob_sharing)),
            "carol": LLMAgent(names["carol"], "pw", port=port, memory=config(SharingConfig())),
            "dan": LLMAgent(names["dan"], "pw", port=port, llm=ScriptedLLM(), memory=config(None)),
        }
        made = World(server=server, started=[], **agents)
        try:
            for agent in agents.values():
                await made.start(agent)
            memory = made.alice.memory
            await memory.store("The Lisbon office opens on 3 March", category="fact")
            await memory.store("Lisbon standups happen every Monday", category="pattern")
            await memory.store("Lisbon salary of Ana is secret", category="private")
            await memory.store("Lisbon lunch is preferred at noon", category="preference")
            await memory.add_note("pair-lisbon", "Lisbon note: bob owes alice a coffee")
            yield made
        finally:
            for agent in made.started:
                with contextlib.suppress(Exception):
                    await agent.stop()


async def raw_request(
    sender: LLMAgent, to: LLMAgent, msg: Message, timeout: float = 5.0
) -> Message:
    """Send ``msg`` as ``sender`` and await the answer on its thread."""
    responder = sender._sharing_responder
    assert responder is not None
    future = responder.pending.expect(str(msg.thread), bare(to))
    try:
        await responder.send(msg)
        return await asyncio.wait_for(future, timeout)
    finally:
        responder.pending.discard(str(msg.thread))


def contents(answer: QueryAnswer) -> list[str]:
    return [result.content for result in answer.results]


async def test_allowed_agent_gets_its_categories_with_provenance(world: World) -> None:
    answer = await world.bob.sharing.ask(bare(world.alice), "Lisbon", limit=10)
    found = contents(answer)
    assert "The Lisbon office opens on 3 March" in found
    assert "Lisbon standups happen every Monday" in found
    assert {result.category for result in answer.results} <= {"fact", "pattern"}
    assert not any("coffee" in text for text in found)  # interaction notes never leave
    fact = next(r for r in answer.results if r.category == "fact")
    assert fact.provenance["owner"] == bare(world.alice)
    assert isinstance(fact.provenance["created_at"], float)
    assert fact.id >= 1 and not fact.truncated
    assert world.alice.llm.calls == []  # type: ignore[attr-defined]  # the LLM never saw it


async def test_private_and_unlisted_categories_are_refused(world: World) -> None:
    alice = bare(world.alice)
    for category in ("private", "preference", "nosuch"):
        with pytest.raises(SharingRefused, match=f"category {category} is not shared"):
            await world.bob.sharing.ask(alice, "Lisbon", category=category)
    with pytest.raises(SharingRefused, match="category fact is not shared"):
        await world.carol.sharing.ask(alice, "Lisbon", category="fact")
    answer = await world.carol.sharing.ask(alice, "Lisbon", limit=10)
    assert contents(answer) == ["Lisbon standups happen every Monday"]


async def test_agent_not_on_any_allow_list_is_refused(world: World) -> None:
    await world.bob.memory.store("Bob keeps the Lisbon keys", category="fact")
    with pytest.raises(SharingRefused, match="is not allowed to query this memory"):
        await world.carol.sharing.ask(bare(world.bob), "Lisbon keys")


@pytest.mark.slow
async def test_unknown_agent_times_out_with_a_clear_error(world: World) -> None:
    nobody = world.jid("nobody")
    with pytest.raises(SharingTimeout, match=r"did not answer within 0\.5 s: it may not exist"):
        await world.bob.sharing.ask(nobody, "anything", timeout=0.5)
    tool = next(t for t in world.bob.memory_tools if t.name == "ask_agent_memory")
    result = await tool.call({"agent": nobody, "query": "x"}, ToolContext(world.bob.memory))
    assert not result.ok
    assert "did not answer within 2 s" in result.text and nobody in result.text
    # within a request's budget the peer's timeout is still reported as the peer's
    budget = RequestBudget(ToolBudget(max_seconds=30))
    within = await tool.call(
        {"agent": nobody, "query": "x"}, ToolContext(world.bob.memory, budget=budget)
    )
    assert "did not answer within 2 s" in within.text and "time limit" not in within.text


async def test_agent_without_sharing_says_not_understood_nor_passes_it_to_its_llm(
    world: World,
) -> None:
    await world.dan.memory.store("Dan knows the Lisbon wifi password", category="fact")
    with pytest.raises(SharingError, match="does not answer memory requests") as refused:
        await world.bob.sharing.ask(bare(world.dan), "Lisbon wifi", timeout=5)
    assert not isinstance(refused.value, SharingTimeout)
    assert "wifi" not in str(refused.value)
    assert world.dan.llm.calls == []  # type: ignore[attr-defined]
    assert {t.name for t in world.dan.tools}.isdisjoint({"ask_agent_memory", "share_memory"})
    with pytest.raises(ConfigError, match="memory sharing is off"):
        world.dan.sharing  # noqa: B018
    # and its conversation behaviour still answers ordinary messages
    reply = await world.bob.ask(str(world.dan.jid), "what do you know about Lisbon?", timeout=10)
    assert reply.get_metadata("performative") == "inform"


async def test_oversized_answer_is_bounded_and_says_so(world: World) -> None:
    memory = world.alice.memory
    for number in range(12):
        await memory.store(f"Oversized report {number}: " + "zebra " * 150, category="fact")
    answer = await world.bob.sharing.ask(bare(world.alice), "oversized zebra report", limit=20)
    assert answer.truncated
    assert answer.results and all(len(r.content) <= MAX_CHARS for r in answer.results)
    assert any(r.truncated for r in answer.results)
    assert len(answer.results) + answer.omitted <= 10  # max_results
    body = {
        "results": [
            {
                "id": r.id, "category": r.category, "content": r.content, "score": r.score,
                "truncated": r.truncated, "provenance": dict(r.provenance),
            }
            for r in answer.results
        ],
        "truncated": answer.truncated,
        "omitted": answer.omitted,
    }  # fmt: skip
    size = len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
    assert size <= MAX_ANSWER_BYTES


async def test_spoofed_identity_in_body_or_metadata_counts_for_nothing(world: World) -> None:
    alice, bob = bare(world.alice), bare(world.bob)
    msg = make_request(alice, QUERY_PROTOCOL, QUERY_REF, json.dumps({"query": "Lisbon"}))
    for key in ("sender", "from", "on-behalf-of", "jid"):
        msg.set_metadata(key, bob)
    answer = await raw_request(world.carol, world.alice, msg)
    assert answer.get_metadata(PERFORMATIVE) == "inform"
    results = json.loads(answer.body)["results"]
    assert [r["content"] for r in results] == ["Lisbon standups happen every Monday"]

    claim = make_request(
        alice, QUERY_PROTOCOL, QUERY_REF, json.dumps({"query": "Lisbon", "sender": bob})
    )
    refused = await raw_request(world.carol, world.alice, claim)
    assert refused.get_metadata(PERFORMATIVE) == "failure"
    assert "unknown fields ['sender']" in parse_reason(refused.body)

    # the stranger may not ask bob at all: claiming to be alice changes nothing
    to_bob = make_request(bob, QUERY_PROTOCOL, QUERY_REF, json.dumps({"query": "keys"}))
    to_bob.set_metadata("sender", alice)
    refusal = await raw_request(world.carol, world.bob, to_bob)
    assert refusal.get_metadata(PERFORMATIVE) == "refuse"


@pytest.mark.parametrize(
    ("performative", "body", "reason"),
    [
        (QUERY_REF, "not json", "not JSON"),
        (QUERY_REF, "[1, 2]", "must be a JSON object"),
        (QUERY_REF, '{"query": ""}', "query must not be empty"),
        (QUERY_REF, '{"query": "x", "limit": 0}', "limit must be an integer from 1 to 100"),
        (QUERY_REF, '{"query": "x", "limit": NaN}', "not a JSON number"),
        (QUERY_REF, '{"query": "x", "query": "y"}', "twice"),
        (QUERY_REF, '{"query": "' + "a" * 1001 + '"}', "at most 1000"),
        (QUERY_REF, '{"query": "x", "category": "Not A Category"}', "lower-case category"),
        ("request", '{"query": "x"}', "must have performative query-ref"),
    ],
)
async def test_bad_queries_get_a_failure_with_the_reason(
    world: World, performative: str, body: str, reason: str
) -> None:
    msg = make_request(bare(world.alice), QUERY_PROTOCOL, performative, body)
    answer = await raw_request(world.bob, world.alice, msg)
    assert answer.get_metadata(PERFORMATIVE) == "failure"
    assert reason in parse_reason(answer.body)


async def test_responder_survives_garbage_and_strangers_learn_nothing(world: World) -> None:
    msg = make_request(bare(world.bob), QUERY_PROTOCOL, QUERY_REF, "garbage {")
    refused = await raw_request(world.carol, world.bob, msg)
    assert refused.get_metadata(PERFORMATIVE) == "refuse"  # not told what was wrong
    assert "JSON" not in parse_reason(refused.body)
    share = make_request(bare(world.bob), SHARE_PROTOCOL, "request", '{"memory": 1}')
    answer = await raw_request(world.alice, world.bob, share)
    assert answer.get_metadata(PERFORMATIVE) == "failure"
    assert "memory must be an object" in parse_reason(answer.body)
    still = await world.bob.sharing.ask(bare(world.alice), "Lisbon office", category="fact")
    assert "The Lisbon office opens on 3 March" in contents(still)


async def test_share_is_stored_with_provenance_when_accepted(world: World) -> None:
    memory = await world.alice.memory.store("Porto office opens on 9 May", category="fact")
    tool = next(t for t in world.alice.memory_tools if t.name == "share_memory")
    result = await tool.call(
        {"agent": bare(world.bob), "memory_id": memory.id}, ToolContext(world.alice.memory)
    )
    assert result.ok, result.text
    stored_id = int(result.text.rsplit(" ", 1)[1].rstrip("."))
    stored = await world.bob.memory.get(stored_id)
    assert stored.content == "Porto office opens on 9 May"
    assert stored.category == "fact"
    assert stored.source_sender == bare(world.alice)
    assert stored.metadata["shared_by"] == bare(world.alice)
    assert stored.metadata["shared_memory_id"] == memory.id
    assert stored.metadata["shared_memory_uid"] == memory.uid
    assert abs(stored.metadata["shared_at"] - stored.created_at) < 60
    assert stored.scope == Scope.private(bare(world.alice))  # what a partner tells is its own


async def test_a_shared_memory_never_joins_a_conversation_its_thread_names(
    world: World,
) -> None:
    # a thread is the sender's choice: naming bob's conversation with dan in it must
    # not put alice's memory into that conversation
    victim = conversation_id_for(bare(world.bob), bare(world.dan))
    body = SharedMemory(
        id=1, uid="u" * 32, category="fact", content="The Faro office is closed",
        context=None, confidence=1.0, importance=0.5, created_at=1.0,
    ).to_body()  # fmt: skip
    share = make_request(bare(world.bob), SHARE_PROTOCOL, "request", body)
    share.thread = victim
    answer = await raw_request(world.alice, world.bob, share)
    assert answer.get_metadata(PERFORMATIVE) == "inform", answer.body
    (stored,) = [m for m in await world.bob.memory.list() if m.content.startswith("The Faro")]
    assert stored.source_conversation not in (None, victim)
    assert stored.source_conversation == thread_conversation_id(
        bare(world.bob), bare(world.alice), victim
    )


async def test_share_sends_only_what_a_query_would_show(world: World) -> None:
    alice = world.alice.memory
    old = await alice.store("Rui lives in Braga. Rui likes green tea.", category="fact")
    await alice.store("Rui lives in Faro.", category="fact")  # supersedes the first sentence
    stored_id = await world.alice.sharing.share(bare(world.bob), old.id)
    assert (await world.bob.memory.get(stored_id)).content == "Rui likes green tea."
    archived = await alice.store("Braga standups are on Mondays", category="fact")
    await alice.archive(archived.id)
    with pytest.raises(SharingRefused, match="archived"):
        await world.alice.sharing.share(bare(world.bob), archived.id)


async def test_what_a_partner_told_privately_is_neither_answered_nor_shared(
    world: World,
) -> None:
    alice, bob, dan = world.alice.memory, bare(world.bob), bare(world.dan)
    told = await alice.store(
        "The Lisbon door code is 8080", category="fact", scope=Scope.private(dan)
    )
    answer = await world.bob.sharing.ask(bare(world.alice), "Lisbon door code", limit=20)
    assert all("8080" not in content for content in contents(answer))
    with pytest.raises(SharingRefused, match="told to this agent by someone else, privately"):
        await world.alice.sharing.share(bob, told.id)
    # an LLM talking with carol cannot send it either: carol does not see it
    tool = next(t for t in world.alice.memory_tools if t.name == "share_memory")
    carol_sees = Viewer(jid=bare(world.carol), categories=frozenset({"pattern"}))
    result = await tool.call(
        {"agent": bob, "memory_id": told.id},
        ToolContext(world.alice.memory, viewer=carol_sees),
    )
    assert not result.ok and f"no memory with id {told.id}" in result.text
    assert all("8080" not in m.content for m in await world.bob.memory.list(limit=100))


async def test_share_refused_by_receiver_or_by_own_policy(world: World) -> None:
    alice = world.alice.memory
    pattern = await alice.store("Porto retros are on Fridays", category="pattern")
    before = await world.carol.memory.list()
    with pytest.raises(SharingRefused, match="does not accept memories from"):
        await world.alice.sharing.share(bare(world.carol), pattern.id)
    assert await world.carol.memory.list() == before

    fact = await alice.store("Porto budget is 2 million", category="fact")
    with pytest.raises(SharingRefused, match="may not see memories of category fact"):
        await world.alice.sharing.share(bare(world.carol), fact.id)
    secret = await alice.store("Porto password is hunter2", category="private")
    with pytest.raises(SharingRefused, match="private category private"):
        await world.alice.sharing.share(bare(world.bob), secret.id)
    tool = next(t for t in world.alice.memory_tools if t.name == "share_memory")
    result = await tool.call(
        {"agent": bare(world.bob), "memory_id": 999_999}, ToolContext(world.alice.memory)
    )
    assert not result.ok and "no memory with id 999999" in result.text
    # bob refuses what carol sends: he accepts memories from alice only
    carol_memory = await world.carol.memory.store("Carol likes tea", category="preference")
    with pytest.raises(SharingRefused):
        await world.carol.sharing.share(bare(world.bob), carol_memory.id)


async def test_rate_limit_refuses_a_flooding_sender(world: World) -> None:
    sharing = SharingConfig(allow={"fact": ["*"]}, burst=2, rate_per_minute=0.5)
    strict = LLMAgent(
        world.jid("strict"),
        "pw",
        port=world.server.port,
        memory=MemoryConfig(in_memory=True, embedder="hashing", sharing=sharing),
    )
    await world.start(strict)
    await strict.memory.store("The strict agent knows the Lisbon code", category="fact")
    to = bare(strict)
    for _ in range(2):
        answer = await world.carol.sharing.ask(to, "Lisbon code")
        assert contents(answer) == ["The strict agent knows the Lisbon code"]
    with pytest.raises(SharingRefused, match="rate limit"):
        await world.carol.sharing.ask(to, "Lisbon code")
    # another sender has its own bucket
    assert contents(await world.bob.sharing.ask(to, "Lisbon code"))
    await strict.stop()


async def test_tools_are_offered_only_with_sharing(world: World) -> None:
    names = [tool.name for tool in world.bob.tools]
    assert names[-2:] == ["ask_agent_memory", "share_memory"]
    tool = next(t for t in world.bob.memory_tools if t.name == "ask_agent_memory")
    result = await tool.call(
        json.dumps({"agent": bare(world.alice), "query": "Lisbon office", "category": "fact"}),
        ToolContext(world.bob.memory),
    )
    assert result.ok
    assert "The Lisbon office opens on 3 March" in result.text
    assert f"{bare(world.alice)} shared" in result.text
    refused = await tool.call(
        {"agent": bare(world.alice), "query": "Lisbon", "category": "private"},
        ToolContext(world.bob.memory),
    )
    assert not refused.ok and "refused: category private is not shared" in refused.text
    bad = await tool.call({"agent": "not a jid", "query": "x"}, ToolContext(world.bob.memory))
    assert not bad.ok and "not a valid agent JID" in bad.text
    itself = await tool.call(
        {"agent": bare(world.bob), "query": "x"}, ToolContext(world.bob.memory)
    )
    assert not itself.ok and "this agent itself" in itself.text


async def test_an_xmpp_error_bounce_ends_the_request_at_once(world: World) -> None:
    # Servers such as Prosody bounce a message to an unknown account with an error.
    nobody = world.jid("nobody")
    asking = asyncio.ensure_future(world.bob.sharing.ask(nobody, "anything", timeout=30))
    responder = world.bob._sharing_responder
    assert responder is not None
    while not responder.pending._waiting:
        await asyncio.sleep(0)
    (thread,) = responder.pending._waiting  # raw requests clean up after themselves
    bounced = make_request(bare(world.bob), QUERY_PROTOCOL, QUERY_REF, '{"query": "anything"}')
    bounced.thread = thread
    bounced.sender = nobody
    stanza = bounced.prepare(world.bob.client)
    stanza["type"] = "error"
    stanza["error"]["condition"] = "service-unavailable"
    assert world.bob._message_received(stanza) == []
    with pytest.raises(SharingError, match=r"could not be reached \(service-unavailable\)"):
        await asyncio.wait_for(asking, 5)
    assert world.bob.llm.calls == []  # type: ignore[attr-defined]
