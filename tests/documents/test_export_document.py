"""The export document and its JSON-lines form, described by pydantic models: old exports
import, what is written reads back the same, every wrong type is refused cleanly."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory import Scope
from spade_memory.cli.transfer import export_lines, parse_export_lines
from spade_memory.config import MemoryConfig
from spade_memory.errors import InvalidToolInput
from spade_memory.maintenance.transfer import ExportDocument, check_export, parse_export
from spade_memory.manager import MemoryManager

DATA = Path(__file__).parent / "data"
OLD_JSON = json.loads((DATA / "export_v1.json").read_text(encoding="utf-8"))
OLD_LINES = (DATA / "export_v1.jsonl").read_text(encoding="utf-8")


@pytest.fixture
async def carol(memory_config: MemoryConfig) -> Any:
    async with await MemoryManager.open("carol@localhost", memory_config) as manager:
        yield manager


@pytest.mark.parametrize("form", ["json", "lines"])
async def test_an_export_of_the_earlier_encoder_imports_every_field(
    carol: MemoryManager, form: str
) -> None:
    data = OLD_JSON if form == "json" else parse_export_lines(OLD_LINES.splitlines())
    assert await carol.import_data(data) == (4, 3)
    exported = await carol.export()
    # an export made before scopes imports as global, and is exported so
    assert all(m["scope"] == Scope().to_dict() for m in exported["memories"])
    strip = [{k: v for k, v in m.items() if k not in ("id", "scope")} for m in exported["memories"]]
    old = [{k: v for k, v in m.items() if k != "id"} for m in OLD_JSON["memories"]]
    assert sorted(strip, key=lambda m: m["uid"]) == sorted(old, key=lambda m: m["uid"])
    assert exported["notes"] == OLD_JSON["notes"]
    assert await carol.import_data(data) == (0, 0)


def test_the_lines_are_written_as_before_with_one_format_field() -> None:
    # The header named two formats (the lines' and the dict's); it names one now.
    # Old files are read as before.
    old_header = '"export_format": "spade_memory.export", '
    assert old_header in OLD_LINES.splitlines()[0]
    now = OLD_LINES.replace(old_header, "", 1)
    assert "".join(line + "\n" for line in export_lines(OLD_JSON)) == now
    assert "export_format" not in now.splitlines()[0]
    for lines in (OLD_LINES, now):
        parsed = parse_export_lines(lines.splitlines())
        assert parsed == OLD_JSON
        assert "".join(line + "\n" for line in export_lines(parsed)) == now


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
times = st.floats(min_value=0, max_value=4e9, allow_nan=False)
scopes = st.none() | st.builds(
    lambda owner, visibility, readers: {
        "owner": owner,
        "visibility": visibility,
        "shared_with": readers,
    },
    st.none() | st.sampled_from(["alice@localhost", "bob@localhost"]),
    st.sampled_from(["global", "private", "shared", "conversation"]),
    st.lists(st.sampled_from(["bob@localhost", "carol@localhost"]), max_size=2, unique=True),
)
sources = st.none() | st.lists(
    st.builds(
        lambda cid, message, formed: {"conversation_id": cid, "message": message, "formed": formed},
        texts,
        st.none() | st.integers(0, 5),
        st.booleans(),
    ),
    max_size=2,
)
forgotten_atoms = st.none() | st.lists(texts, min_size=1, max_size=2)
given_graph = st.tuples(
    st.none() | st.lists(texts, min_size=1, max_size=2),
    st.none()
    | st.lists(
        st.fixed_dictionaries({"source": texts, "relation": texts, "target": texts}),
        min_size=1,
        max_size=2,
    ),
)
memories = st.builds(
    lambda uid, content, importance, status, created, seen, count, metadata, scope, came, gone, g: {
        "id": None,
        "uid": uid,
        "category": "fact",
        "content": content,
        "context": None,
        "confidence": 1.0,
        "importance": importance,
        "status": status,
        "source_conversation": None,
        "source_sender": None,
        "created_at": created,
        "updated_at": created,
        "last_accessed": seen,
        "access_count": count,
        "metadata": metadata,
        "scope": scope,
        "sources": came,
        "forgotten_atoms": gone,
        "entities": g[0],
        "relations": g[1],
    },
    st.uuids().map(lambda u: u.hex),
    texts,
    st.floats(0, 1),
    st.sampled_from(["active", "archived"]),
    times,
    st.none() | times,
    st.integers(0, 10**6),
    st.dictionaries(texts, st.none() | st.integers() | texts, max_size=3),
    scopes,
    sources,
    forgotten_atoms,
    given_graph,
)
notes = st.dictionaries(
    texts,
    st.lists(
        st.builds(
            lambda content, author, created: {
                "content": content,
                "author": author,
                "created_at": created,
            },
            texts,
            st.none() | texts,
            times,
        ),
        min_size=1,
        max_size=3,
    ),
    max_size=3,
)


messages = st.builds(
    lambda role, sender, text, at, message_id, formed, before_reset: {
        "role": role,
        "sender": sender,
        "text": text,
        "at": at,
        "message_id": message_id,
        "formed": formed,
        "before_reset": before_reset,
    },
    st.sampled_from(["user", "assistant"]),
    st.sampled_from(["alice@localhost", "bob@localhost"]),
    texts,
    times,
    st.none() | texts,
    st.booleans(),
    st.booleans(),
)
conversations = st.lists(
    st.builds(
        lambda cid, peer, kept: {"conversation_id": cid, "peer": peer, "messages": kept},
        texts,
        st.sampled_from(["bob@localhost", "carol@localhost"]),
        st.lists(messages, max_size=3),
    ),
    max_size=3,
)


@settings(max_examples=100, deadline=None)
@given(memories=st.lists(memories, max_size=4), notes=notes, kept=st.none() | conversations)
def test_round_trips_through_the_models_and_the_lines(
    memories: list[dict[str, Any]], notes: dict[str, Any], kept: list[dict[str, Any]] | None
) -> None:
    data = {
        "format": "spade_memory.export",
        "version": 1 if kept is None else 2,
        "agent": "alice@localhost",
        "memories": memories,
        "notes": notes,
        **({} if kept is None else {"conversations": kept}),
    }
    assert parse_export(data).model_dump() == {"conversations": [], **data}
    lines = list(export_lines(data))
    assert parse_export_lines(lines) == data
    assert [json.loads(line)["type"] for line in lines] == (
        ["header"]
        + ["memory"] * len(memories)
        + ["notes"] * len(notes)
        + ["conversation"] * len(kept or [])
    )


def _document(**memory: Any) -> dict[str, Any]:
    record = {**OLD_JSON["memories"][0], **memory}
    return {**OLD_JSON, "memories": [OLD_JSON["memories"][1], record]}


WRONG_MEMORY = [
    ("uid", 7),
    ("uid", "x" * 65),
    ("category", None),
    ("content", None),
    ("content", 3),
    ("context", 1.5),
    ("confidence", "0.9"),
    ("confidence", True),
    ("confidence", math.nan),
    ("importance", [0.5]),
    ("status", "deleted"),
    ("status", 1),
    ("source_sender", 5),
    ("created_at", "2024-01-01"),
    ("created_at", math.inf),
    ("updated_at", False),
    ("last_accessed", {}),
    ("access_count", 1.0),
    ("access_count", -1),
    ("access_count", True),
    ("access_count", 2**64),  # past what SQLite keeps
    ("metadata", [1]),
    ("metadata", "x"),
    ("id", "1"),
    ("content", "\ud800"),
]


@pytest.mark.parametrize(
    ("name", "value"), WRONG_MEMORY, ids=[f"{n}={v!r}" for n, v in WRONG_MEMORY]
)
async def test_a_wrong_type_in_a_memory_is_refused_naming_it_and_writes_nothing(
    carol: MemoryManager, name: str, value: Any
) -> None:
    with pytest.raises(InvalidToolInput, match=rf"memories\[1\]\.{name}"):
        parse_export(_document(**{name: value}))
    with pytest.raises(InvalidToolInput):
        await carol.import_data(_document(**{name: value}))
    assert (await carol.stats()).total == 0
    line = json.dumps({"type": "memory", **_document(**{name: value})["memories"][1]})
    header = OLD_LINES.splitlines()[0]
    with pytest.raises(InvalidToolInput, match=rf"line 2 is invalid: {name}"):
        parse_export_lines([header, line])


async def test_metadata_holding_a_lone_surrogate_is_refused_and_writes_nothing(
    carol: MemoryManager,
) -> None:
    with pytest.raises(InvalidToolInput, match="surrogate"):
        await carol.store("a fact", metadata={"note": "\ud800"})
    with pytest.raises(InvalidToolInput, match=r"memory 2 of the export is invalid.*surrogate"):
        await carol.import_data(_document(metadata={"note": "\udcff"}))
    assert (await carol.stats()).total == 0


async def test_a_note_too_long_is_refused_naming_it_before_any_memory_is_written() -> None:
    config = MemoryConfig(in_memory=True, embedder="hashing", max_note_chars=20)
    notes = [{"content": "short", "created_at": 1.0}, {"content": "x" * 21, "created_at": 2.0}]
    data = {**OLD_JSON, "notes": {"c1": notes}}
    async with await MemoryManager.open("carol@localhost", config) as carol:
        with pytest.raises(
            InvalidToolInput, match="note 2 of conversation 'c1' is invalid: content is too long"
        ):
            await carol.import_data(data)
        assert (await carol.stats()).total == 0
        assert await carol.conversations() == []
    with pytest.raises(InvalidToolInput, match="note 2 of conversation 'c1' is invalid"):
        check_export(data, config)  # the same check, before any memory is opened


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"memories": [OLD_JSON["memories"][0], {"content": "x", "category": "bogus"}]},
            "memory 2",
        ),
        (
            {"conversations": [{"conversation_id": "c", "peer": "not a jid", "messages": []}]},
            "conversation 1",
        ),
        (
            {
                "notes": {
                    "c": [{"content": "ok", "created_at": 1.0}, {"content": " ", "created_at": 1.0}]
                }
            },
            "note 2",
        ),
    ],
)
async def test_an_invalid_part_is_named_counting_from_one(
    carol: MemoryManager, change: dict[str, Any], says: str
) -> None:
    with pytest.raises(InvalidToolInput, match=f"^{says} of "):
        await carol.import_data({**OLD_JSON, "version": 2, **change})
    assert (await carol.stats()).total == 0


WRONG_DOCUMENT = [
    ("format", "spade_memory.exports"),
    ("format", None),
    ("version", 4),
    ("version", True),
    ("version", "1"),
    ("agent", 5),
    ("memories", {}),
    ("memories", [1]),
    ("notes", []),
    ("notes", {"c": "a note"}),
    ("notes", {"c": [{"content": "x"}]}),
    ("notes", {"c": [{"content": "x", "created_at": "now"}]}),
    ("conversations", {}),
    ("conversations", [{"peer": "bob@localhost"}]),
    ("conversations", [{"conversation_id": "c", "peer": "bob@localhost", "messages": [{}]}]),
    ("conversations", [{"conversation_id": "c", "peer": 5}]),
]


@pytest.mark.parametrize(
    ("name", "value"), WRONG_DOCUMENT, ids=[f"{n}={v!r}" for n, v in WRONG_DOCUMENT]
)
def test_a_wrong_type_in_the_document_is_refused(name: str, value: Any) -> None:
    with pytest.raises(InvalidToolInput, match="export"):
        parse_export({**OLD_JSON, name: value})


@pytest.mark.parametrize(
    "line",
    [
        '{"type": "notes", "conversation": 3, "notes": []}',
        '{"type": "notes", "conversation": "c", "notes": [{"content": 1, "created_at": 1}]}',
        '{"type": "notes", "conversation": "c"}',
        '{"type": "conversation", "conversation_id": "c"}',
        '{"type": "conversation", "conversation_id": "c", "peer": "b@x", "messages": [1]}',
        '{"type": "memory"}',
        "[1, 2]",
    ],
)
def test_a_wrong_line_is_refused_naming_it(line: str) -> None:
    with pytest.raises(InvalidToolInput, match="line 2"):
        parse_export_lines([OLD_LINES.splitlines()[0], line])
    bad_header = json.dumps({**json.loads(OLD_LINES.splitlines()[0]), "version": "1"})
    with pytest.raises(InvalidToolInput, match="line 1 is invalid: version"):
        parse_export_lines([bad_header])


anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from([*OLD_JSON, *OLD_JSON["memories"][0]]),
    value=anything,
)
def test_any_value_anywhere_is_read_or_refused_as_invalid_input(name: str, value: Any) -> None:
    data = {**OLD_JSON, name: value} if name in OLD_JSON else _document(**{name: value})
    try:
        document = parse_export(data)
    except InvalidToolInput:
        return
    assert isinstance(document, ExportDocument)
