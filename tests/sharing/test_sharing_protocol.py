"""The sharing protocol's message format: round-trips, strict parsing, bounded answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import xml.sax.saxutils

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spade.message import Message

from spade_memory.config import SharingConfig
from spade_memory.errors import ProtocolError
from spade_memory.spade.sharing.client import MemorySharing, PendingAnswers
from spade_memory.spade.sharing.policy import SharingPolicy
from spade_memory.spade.sharing.protocol import (
    IN_REPLY_TO,
    INFORM,
    PERFORMATIVE,
    PROTOCOL,
    QUERY_PROTOCOL,
    QUERY_REF,
    SHARE_PROTOCOL,
    MemoryQuery,
    SharedMemory,
    SharedResult,
    build_answer,
    is_protocol_message,
    make_answer,
    make_request,
    parse_answer,
    parse_query,
    parse_reason,
    parse_receipt,
    parse_shared_memory,
    protocol_template,
    reason_body,
    receipt_body,
    wire_bytes,
)

texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=200,
).filter(lambda text: text.strip() != "")
categories = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)


@given(query=texts, category=st.none() | categories, limit=st.integers(1, 100))
def test_query_round_trips(query: str, category: str | None, limit: int) -> None:
    original = MemoryQuery(query=query, category=category, limit=limit)
    assert parse_query(original.to_body()) == original


@given(
    results=st.lists(
        st.builds(
            SharedResult,
            id=st.integers(1, 2**40),
            category=categories,
            content=texts,
            score=st.floats(0, 1),
            provenance=st.fixed_dictionaries(
                {"owner": st.just("a@b"), "created_at": st.floats(0, 2e9)}
            ),
        ),
        max_size=8,
    )
)
def test_answer_round_trips_when_it_fits(results: list[SharedResult]) -> None:
    answer = parse_answer(build_answer(results, max_bytes=200_000, max_chars=1_000))
    assert answer.results == tuple(results)
    assert not answer.truncated and answer.omitted == 0


@settings(max_examples=60)
@given(
    contents=st.lists(texts, min_size=1, max_size=30),
    max_bytes=st.integers(1_024, 6_000),
    max_chars=st.integers(20, 2_000),
)
def test_answer_never_exceeds_its_byte_budget(
    contents: list[str], max_bytes: int, max_chars: int
) -> None:
    results = [
        SharedResult(id=i + 1, category="fact", content=c * 20, score=0.5)
        for i, c in enumerate(contents)
    ]
    body = build_answer(results, max_bytes=max_bytes, max_chars=max_chars)
    assert len(body.encode("utf-8")) <= wire_bytes(body) <= max_bytes
    answer = parse_answer(body)
    assert len(answer.results) + answer.omitted == len(results)
    assert all(len(r.content) <= max_chars for r in answer.results)
    for result, content in zip(answer.results, contents, strict=False):
        assert result.truncated == (result.content != content * 20)
    cut = any(result.truncated for result in answer.results)
    assert answer.truncated == (cut or answer.omitted > 0)


def test_answer_cuts_long_content_and_notes_it() -> None:
    long = SharedResult(id=1, category="fact", content="x" * 5_000, score=1.0)
    answer = parse_answer(build_answer([long], max_bytes=2_000, max_chars=1_000))
    (result,) = answer.results
    assert result.truncated and answer.truncated
    assert result.content.endswith("…") and len(result.content) <= 1_000


@given(
    memory=st.builds(
        SharedMemory,
        id=st.integers(1, 2**40),
        uid=st.text("0123456789abcdef", min_size=32, max_size=32),
        category=categories,
        content=texts,
        context=st.none() | texts,
        confidence=st.floats(0, 1),
        importance=st.floats(0, 1),
        created_at=st.floats(0, 2e9),
    )
)
def test_shared_memory_round_trips(memory: SharedMemory) -> None:
    assert parse_shared_memory(memory.to_body(), max_content_chars=1_000) == memory


garbage = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=300),
    st.binary(max_size=50),
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
        max_leaves=20,
    ).map(lambda value: json.dumps(value)),
    st.fixed_dictionaries(
        {"query": st.none() | st.integers() | st.text(max_size=5)},
        optional={"limit": st.integers() | st.floats() | st.text(), "category": st.text()},
    ).map(json.dumps),
    st.fixed_dictionaries(
        {"results": st.lists(st.dictionaries(st.text(max_size=8), st.integers()), max_size=3)}
    ).map(json.dumps),
)


@settings(max_examples=300)
@given(body=garbage)
def test_garbage_never_raises_anything_but_protocol_error(body: object) -> None:
    for parse in (
        parse_query,
        parse_answer,
        parse_receipt,
        lambda b: parse_shared_memory(b, max_content_chars=100),
    ):
        with contextlib.suppress(ProtocolError):
            parse(body)
    assert isinstance(parse_reason(body), str)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "body is empty"),
        ("x" * 400_001, "at most 400000"),
        ('{"query": "a\\u0000b"}', "NUL"),
        ('{"query": "\\ud800"}', "lone surrogate"),
        ('{"query": "x", "limit": true}', "limit must be an integer"),
        ('{"query": "x", "limit": 5.0}', "limit must be an integer"),
        ('{"query": "x", "limit": 1e400}', "limit must be an integer"),
        ('{"query": "x", "extra": 1}', "unknown fields ['extra']"),
        ('{"limit": 3}', "lacks the fields ['query']"),
        ('{"query": "x", "category": 7}', "category must be a string"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_bad_query_bodies_name_the_problem(body: str, message: str) -> None:
    with pytest.raises(ProtocolError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_query(body)


def test_shared_content_over_the_receivers_limit_is_refused() -> None:
    memory = SharedMemory(
        id=1, uid="u", category="fact", content="y" * 101, context=None,
        confidence=1.0, importance=0.5, created_at=1.0,
    )  # fmt: skip
    with pytest.raises(ProtocolError, match="content is 101 characters; at most 100"):
        parse_shared_memory(memory.to_body(), max_content_chars=100)


def test_reasons_and_receipts() -> None:
    assert parse_reason(reason_body("no")) == "no"
    assert len(parse_reason(reason_body("n" * 5_000))) <= 500
    assert parse_reason("not json") == "no reason given"
    assert parse_receipt(receipt_body(42)) == 42
    with pytest.raises(ProtocolError):
        parse_receipt('{"stored_id": 0}')


def test_messages_carry_protocol_thread_and_reply_marker() -> None:
    request = make_request("bob@localhost", QUERY_PROTOCOL, QUERY_REF, '{"query": "x"}')
    assert request.thread and request.thread.startswith("mem-")
    assert is_protocol_message(request)
    assert protocol_template().match(request)
    request.sender = "alice@localhost/r1"
    answer = make_answer(request, "inform", "{}")
    assert str(answer.to) == "alice@localhost/r1"
    assert answer.thread == request.thread
    assert answer.get_metadata(IN_REPLY_TO) == request.thread
    assert answer.get_metadata(PROTOCOL) == QUERY_PROTOCOL
    assert answer.get_metadata(PERFORMATIVE) == "inform"
    share = make_request("bob@localhost", SHARE_PROTOCOL, "request", "{}")
    assert protocol_template().match(share) and share.thread != request.thread
    other = make_request("bob@localhost", "something/else", QUERY_REF, "{}")
    assert not is_protocol_message(other) and not protocol_template().match(other)


def test_to_body_refuses_an_invalid_query() -> None:
    with pytest.raises(ProtocolError, match="query must not be empty"):
        MemoryQuery(query="  ").to_body()


_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


@pytest.mark.parametrize("odd", ["\uffff", "\ufffe"])
def test_bodies_escape_what_no_xml_stanza_carries(odd: str) -> None:
    # raw in a stanza, such a character made the server close the sender's stream
    result = SharedResult(id=1, category="fact", content=f"office note {odd}", score=1.0)
    bodies = [
        build_answer([result], max_bytes=16_000, max_chars=4_000),
        reason_body(f"no {odd}"),
        MemoryQuery(query=f"office {odd}", category=None, limit=3).to_body(),
    ]
    for body in bodies:
        assert not _NOT_XML.search(body), body
    assert parse_answer(bodies[0]).results[0].content == f"office note {odd}"
    assert parse_reason(bodies[1]) == f"no {odd}"
    assert parse_query(bodies[2]).query == f"office {odd}"


async def test_ask_gives_no_more_results_than_asked_for() -> None:
    pending = PendingAnswers()
    config = SharingConfig()

    async def send(msg: Message) -> None:  # a peer that answers with 50 results
        results = [
            {"id": i + 1, "category": "fact", "content": f"fact {i}", "score": 1.0}
            for i in range(50)
        ]
        msg.sender = "bob@localhost/r"
        answer = make_answer(msg, INFORM, json.dumps({"results": results}))
        answer.sender = "bob@localhost/r"
        asyncio.get_running_loop().call_soon(pending.resolve, answer)

    sharing = MemorySharing(
        jid="alice@localhost",
        config=config,
        memory=lambda: None,
        send=send,
        pending=pending,
        policy=SharingPolicy(config, ("fact",)),
    )
    answer = await sharing.ask("bob@localhost", "anything", limit=3)
    assert [r.content for r in answer.results] == ["fact 0", "fact 1", "fact 2"]
    assert answer.truncated and answer.omitted == 47


def test_an_answer_fits_its_budget_as_the_stanza_carries_it() -> None:
    # quotes and ampersands are escaped in the stanza: &quot; is six bytes, not one
    quoted = '"&" ' * 200
    results = [
        SharedResult(id=i + 1, category="fact", content=quoted, score=0.5) for i in range(40)
    ]
    body = build_answer(results, max_bytes=4_000, max_chars=1_000)
    escaped = xml.sax.saxutils.escape(body, {'"': "&quot;", "'": "&apos;"})
    assert wire_bytes(body) == len(escaped.encode("utf-8")) <= 4_000
