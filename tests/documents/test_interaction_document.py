"""The interaction notes file, described by its pydantic models: old files load, what is
written is byte for byte the format as spelled out, every wrong type is refused."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spade_memory.errors import StorageCorrupted, StorageError
from spade_memory.models import InteractionNote
from spade_memory.storage import interaction_file
from spade_memory.storage.interaction import InteractionStore
from spade_memory.storage.interaction_file import InteractionsDocument

DATA = Path(__file__).parent / "data"
AGENT = "alice@example.org"


def spelled_out(
    agent: str, conversations: dict[str, list[dict[str, Any]]], journal: str | None
) -> bytes:
    """The file as the format is written down: one JSON object, indent 1, UTF-8."""
    document = {
        "format": "spade_memory.interactions",
        "version": 2,
        "agent": agent,
        "journal": journal,
        "conversations": conversations,
    }
    return json.dumps(document, ensure_ascii=False, indent=1).encode("utf-8")


def valid_document() -> dict[str, Any]:
    return {
        "format": "spade_memory.interactions",
        "version": 1,
        "agent": AGENT,
        "conversations": {
            "conv-1": [
                {"content": "first", "author": "bob@example.org", "created_at": 1.5},
                {"content": "second", "author": None, "created_at": 2},
            ]
        },
    }


async def test_a_file_written_by_the_earlier_encoder_loads_and_is_rewritten_the_same(
    tmp_path: Path,
) -> None:
    original = (DATA / "interactions_v1.json").read_bytes()
    path = tmp_path / "alice_interactions.json"
    shutil.copyfile(DATA / "interactions_v1.json", path)
    store = await InteractionStore.open(path, agent=AGENT)
    try:
        notes = await store.get("conv-1")
        assert [(n.content, n.author) for n in notes] == [
            ("Bob asked about tea", "bob@example.org"),
            ("Follow up on Friday", None),
        ]
        emoji = await store.get("bob@example.org|alice@example.org")
        assert emoji[0].content == 'Emoji 🍵 and 中文 and "quotes"\nnew line'
        decoded, journal = interaction_file._decode(original, AGENT)
        assert journal is None
        assert json.loads(interaction_file._encode(AGENT, decoded, None)) == {
            **json.loads(original),
            "version": 2,
            "journal": None,
        }
        added = await store.add("conv-1", "a third note", author=None)
    finally:
        await store.aclose()
    # The first save of a version 1 file writes a version 2 snapshot, with a journal id.
    expected = json.loads(original)
    expected["conversations"]["conv-1"].append(
        {"content": "a third note", "author": None, "created_at": added.created_at}
    )
    written = json.loads(path.read_bytes())
    assert isinstance(written["journal"], str)
    assert path.read_bytes() == spelled_out(AGENT, expected["conversations"], written["journal"])


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
notes = st.lists(
    st.fixed_dictionaries(
        {
            "content": texts,
            "author": st.none() | texts,
            "created_at": st.floats(allow_nan=False, allow_infinity=False),
        }
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(conversations=st.dictionaries(texts, notes, max_size=4))
def test_round_trip_writes_the_spelled_out_format(
    conversations: dict[str, list[dict[str, Any]]],
) -> None:
    typed = {
        c: [InteractionNote(c, n["content"], n["author"], n["created_at"]) for n in entries]
        for c, entries in conversations.items()
    }
    raw = interaction_file._encode(AGENT, typed, "j1")
    in_order = {
        c: [{k: n[k] for k in ("content", "author", "created_at")} for n in entries]
        for c, entries in conversations.items()
    }
    assert raw == spelled_out(AGENT, in_order, "j1")
    assert interaction_file._decode(raw, AGENT) == (typed, "j1")


WRONG: dict[str, list[Any]] = {
    "any": [None, True, 3, 2.5, "text", [1], {"a": 1}],
}


def _wrong_values(slot: str) -> list[Any]:
    accepted = {
        "format": [],  # only the tag
        "version": [2, 3],  # 1 or 2, or a newer version: refused untouched (below)
        "agent": ["text"],
        "conversations": [{"a": 1}],  # a dict, but of notes: refused one level down
        "notes": [[1]],
        "note": [{"a": 1}],
        "content": ["text"],
        "author": [None, "text"],
        "created_at": [3, 2.5],
    }[slot]
    return [v for v in WRONG["any"] if not any(v == a and type(v) is type(a) for a in accepted)]


def _with(slot: str, value: Any) -> dict[str, Any]:
    document = valid_document()
    note = document["conversations"]["conv-1"][1]
    if slot in ("format", "version", "agent", "conversations"):
        document[slot] = value
    elif slot == "notes":
        document["conversations"]["conv-1"] = value
    elif slot == "note":
        document["conversations"]["conv-1"][1] = value
    else:
        note[slot] = value
    return document


SLOTS = ["format", "version", "agent", "conversations", "notes", "note"]
SLOTS += ["content", "author", "created_at"]
CASES = [(slot, value) for slot in SLOTS for value in _wrong_values(slot)]
CASES += [("created_at", math.nan), ("created_at", math.inf), ("content", "\ud800")]
CASES += [("created_at", "1.5"), ("version", 1.0), ("agent", "bob@example.org")]


@pytest.mark.parametrize(("slot", "value"), CASES, ids=[f"{s}={v!r}" for s, v in CASES])
async def test_every_wrong_type_is_quarantined_as_damage(
    tmp_path: Path, slot: str, value: Any
) -> None:
    path = tmp_path / "alice_interactions.json"
    raw = json.dumps(_with(slot, value)).encode("utf-8", "surrogatepass")
    path.write_bytes(raw)
    with pytest.raises(StorageCorrupted) as caught:
        await InteractionStore.open(path, agent=AGENT)
    assert caught.value.quarantined_to is not None
    assert caught.value.quarantined_to.read_bytes() == raw
    assert str(path) in str(caught.value)
    if slot in ("content", "author", "created_at") and value != "\ud800":
        assert f"conversations[conv-1][1].{slot}" in str(caught.value).replace("'", "")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=8,
    ),
    slot=st.sampled_from(SLOTS),
)
def test_any_value_anywhere_is_loaded_or_refused_as_damage(value: Any, slot: str) -> None:
    raw = json.dumps(_with(slot, value)).encode("utf-8")
    try:
        loaded, _ = interaction_file._decode(raw, AGENT)
    except ValueError:
        return  # the load path quarantines a ValueError as damage
    except interaction_file._NewerVersion:
        assert slot == "version" and value > 2  # refused untouched
        return
    assert all(isinstance(n, InteractionNote) for ns in loaded.values() for n in ns)
    InteractionsDocument.model_validate(json.loads(raw))


def test_a_newer_version_is_refused_untouched_not_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "alice_interactions.json"
    raw = json.dumps({**valid_document(), "version": 3, "conversations": "a new layout"})
    path.write_text(raw, encoding="utf-8")
    with pytest.raises(StorageError, match="upgrade") as caught:
        interaction_file.open_file(path, AGENT)
    assert not isinstance(caught.value, StorageCorrupted)
    assert path.read_text(encoding="utf-8") == raw


@pytest.mark.parametrize(
    "document",
    [[1], {"format": "spade_memory.interactions", "agent": 7}, {"agent": AGENT}, "x"],
)
def test_the_owner_of_a_wrong_file_is_unknown(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    assert interaction_file.read_agent_of(path) is None
    path.write_text(json.dumps({**valid_document(), "version": 9}), encoding="utf-8")
    assert interaction_file.read_agent_of(path) == AGENT
