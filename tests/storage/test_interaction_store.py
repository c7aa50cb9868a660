"""InteractionStore: durable JSON notes, group commit, rollback, quarantine."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.errors import (
    InvalidAgentId,
    InvalidToolInput,
    StorageCorrupted,
    StorageError,
    StoreClosedError,
)
from spade_memory.storage import files
from spade_memory.storage.interaction import FORMAT_TAG, FORMAT_VERSION, InteractionStore
from spade_memory.storage.interaction_file import open_file

AGENT = "alice@example.org"


class Ticker:
    """A clock that moves one second per reading."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class WriteSpy:
    """Wraps ``files.atomic_write_bytes``: counts writes, can fail or hold them."""

    def __init__(self, real: Callable[..., None]) -> None:
        self.real = real
        self.calls = 0
        self.fail_next: list[OSError] = []
        self.gate: threading.Event | None = None
        self.started = threading.Event()

    def __call__(self, path: Path, data: bytes, **options: Any) -> None:
        self.calls += 1
        self.started.set()
        if self.gate is not None:
            self.gate.wait(timeout=10)
        if self.fail_next:
            raise self.fail_next.pop(0)
        self.real(path, data, **options)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteSpy]:
    writer = WriteSpy(files.atomic_write_bytes)
    monkeypatch.setattr(files, "atomic_write_bytes", writer)
    yield writer
    if writer.gate is not None:
        writer.gate.set()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "alice_interactions.json"


def file_notes(path: Path) -> dict[str, list[str]]:
    """The notes on disk: the snapshot's, with its journal's changes applied."""
    document = json.loads(path.read_text("utf-8"))
    assert document["format"] == FORMAT_TAG
    assert document["version"] == FORMAT_VERSION
    assert document["agent"] == AGENT
    conversations, _ = open_file(path, AGENT)
    return {c: [n.content for n in notes] for c, notes in conversations.items()}


async def test_round_trip_across_close_and_reopen(path: Path) -> None:
    clock = Ticker()
    store = await InteractionStore.open(path, agent="Alice@Example.org/laptop", clock=clock)
    assert store.agent == AGENT
    first = await store.add("conv-1", "Bob prefers mornings", author="bob@example.org")
    await store.add("conv-1", "Bob will send the figures")
    await store.add("conv-2", "会议定在周五", author="carol@example.org")
    await store.aclose()

    reopened = await InteractionStore.open(path, agent=AGENT, clock=clock)
    notes = await reopened.get("conv-1")
    assert [n.content for n in notes] == ["Bob prefers mornings", "Bob will send the figures"]
    assert notes[0] == first
    assert notes[0].author == "bob@example.org" and notes[1].author is None
    assert notes[0].created_at < notes[1].created_at
    assert [n.content for n in await reopened.get("conv-2")] == ["会议定在周五"]
    assert await reopened.conversations() == ["conv-1", "conv-2"]
    assert await reopened.counts() == (2, 3)
    await reopened.aclose()


async def test_open_writes_nothing_and_the_first_note_creates_the_file(
    path: Path, spy: WriteSpy
) -> None:
    store = await InteractionStore.open(path, agent=AGENT)
    assert await store.counts() == (0, 0)
    await store.aclose()
    assert not path.exists() and spy.calls == 0
    async with await InteractionStore.open(path, agent=AGENT) as store:
        await store.add("c", "first")
    assert file_notes(path) == {"c": ["first"]}
    assert json.loads(path.read_bytes())["agent"] == AGENT
    assert spy.calls == 1


async def test_a_file_another_store_creates_after_open_is_merged(path: Path) -> None:
    first = await InteractionStore.open(path, agent=AGENT)
    second = await InteractionStore.open(path, agent=AGENT)
    await second.add("c", "from the second")
    await first.add("c", "from the first")
    assert file_notes(path) == {"c": ["from the second", "from the first"]}
    await first.aclose()
    await second.aclose()


async def test_get_limit_keeps_the_newest(path: Path) -> None:
    async with await InteractionStore.open(path, agent=AGENT, clock=Ticker()) as store:
        for i in range(5):
            await store.add("c", f"note {i}")
        assert [n.content for n in await store.get("c", limit=2)] == ["note 3", "note 4"]
        assert await store.get("c", limit=0) == []
        assert len(await store.get("c", limit=50)) == 5
        assert await store.get("unknown") == []
        with pytest.raises(InvalidToolInput, match="limit"):
            await store.get("c", limit=-1)


async def test_clear_removes_and_persists(path: Path, spy: WriteSpy) -> None:
    async with await InteractionStore.open(path, agent=AGENT) as store:
        await store.add("a", "one")
        await store.add("a", "two")
        await store.add("b", "three")
        writes = spy.calls
        assert await store.clear("missing") == 0
        assert spy.calls == writes
        assert await store.clear("a") == 2
        assert await store.get("a") == []
    assert file_notes(path) == {"b": ["three"]}


async def test_in_memory_store_touches_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "cwd"
    temp = tmp_path / "temp"
    cwd.mkdir()
    temp.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("TMPDIR", str(temp))

    def refuse(*args: Any) -> None:
        raise AssertionError(f"an in-memory store touched the disk: {args}")

    for name in ("atomic_write_bytes", "quarantine", "remove_stale_temps", "fsync_dir"):
        monkeypatch.setattr(files, name, refuse)
    store = await InteractionStore.open(None, agent=AGENT)
    assert store.path is None
    await store.add("c", "kept in RAM")
    await store.import_notes({"d": [{"content": "imported", "created_at": 5.0}]})
    assert await store.clear("d") == 1
    assert [n.content for n in await store.get("c")] == ["kept in RAM"]
    await store.aclose()
    assert list(cwd.iterdir()) == []
    assert list(temp.iterdir()) == []


def write_raw(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def other_agent_file() -> bytes:
    document = {
        "format": FORMAT_TAG,
        "version": FORMAT_VERSION,
        "agent": "bob@example.org",
        "conversations": {"c": [{"content": "x", "author": None, "created_at": 1.0}]},
    }
    return json.dumps(document).encode()


def shaped(conversations: object) -> bytes:
    document = {
        "format": FORMAT_TAG,
        "version": FORMAT_VERSION,
        "agent": AGENT,
        "conversations": conversations,
    }
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"format": "spade_memory.inter', id="truncated-json"),
        pytest.param(b"\xff\xfe\x00garbage", id="not-utf8"),
        pytest.param(b"[]", id="not-an-object"),
        pytest.param(b'{"conversations": {}}', id="no-format-tag"),
        pytest.param(shaped([]), id="conversations-not-object"),
        pytest.param(shaped({"c": "note"}), id="notes-not-list"),
        pytest.param(shaped({"c": [{"author": None, "created_at": 1}]}), id="note-no-content"),
        pytest.param(
            shaped({"c": [{"content": "x", "author": None, "created_at": "today"}]}),
            id="note-bad-time",
        ),
        pytest.param(other_agent_file(), id="another-agents-file"),
    ],
)
async def test_damaged_file_is_quarantined_never_emptied(path: Path, raw: bytes) -> None:
    write_raw(path, raw)
    with pytest.raises(StorageCorrupted) as caught:
        await InteractionStore.open(path, agent=AGENT)
    error = caught.value
    assert error.path == path
    assert error.quarantined_to is not None
    assert str(path) in str(error) and str(error.quarantined_to) in str(error)
    assert error.quarantined_to.read_bytes() == raw
    assert not path.exists()


async def test_newer_format_version_is_refused_and_left_in_place(path: Path) -> None:
    raw = json.dumps(
        {"format": FORMAT_TAG, "version": FORMAT_VERSION + 1, "agent": AGENT, "conversations": {}}
    ).encode()
    write_raw(path, raw)
    with pytest.raises(StorageError, match="upgrade") as caught:
        await InteractionStore.open(path, agent=AGENT)
    assert not isinstance(caught.value, StorageCorrupted)
    assert path.read_bytes() == raw


async def test_invalid_agent_is_refused_before_touching_files(path: Path) -> None:
    with pytest.raises(InvalidAgentId):
        await InteractionStore.open(path, agent="no-domain")
    assert not path.exists()


async def test_temp_files_of_an_interrupted_write_are_removed_on_open(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A write killed between its temporary file and the rename leaves the file's
    # fixed-name temporaries; open removes them without listing the folder.
    async with await InteractionStore.open(path, agent=AGENT) as store:
        await store.add("c", "kept")
    real_replace = os.replace

    def killed(*args: Any) -> None:
        raise KeyboardInterrupt  # stands in for SIGKILL: nothing after it runs

    monkeypatch.setattr(files.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        files.atomic_write_bytes(path, b"half", locked=True)
    monkeypatch.setattr(files.os, "replace", real_replace)
    leftovers = sorted(p.name for p in path.parent.iterdir() if p.name.endswith(".tmp"))
    assert leftovers, "the interrupted write left no temporary file to test with"
    unrelated = path.parent / ".other.json.1.2.tmp"
    unrelated.write_bytes(b"not ours")

    def listing(*args: Any) -> None:
        raise AssertionError("open listed the folder")

    monkeypatch.setattr(files, "remove_stale_temps", listing)
    store = await InteractionStore.open(path, agent=AGENT)
    await store.aclose()
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == [unrelated.name]
    assert file_notes(path) == {"c": ["kept"]}


async def test_older_temp_files_are_removed_by_the_first_write(path: Path) -> None:
    stale = path.parent / f".{path.name}.4242.123456.tmp"
    unrelated = path.parent / ".other.json.1.2.tmp"
    stale.write_bytes(b"half a write")
    unrelated.write_bytes(b"not ours")
    async with await InteractionStore.open(path, agent=AGENT) as store:
        assert stale.exists()
        await store.add("c", "first")
        assert not stale.exists()
    assert unrelated.exists()


async def test_concurrent_adds_share_writes_and_are_all_durable(path: Path, spy: WriteSpy) -> None:
    store = await InteractionStore.open(path, agent=AGENT, clock=Ticker())
    spy.calls = 0
    notes = await asyncio.gather(*(store.add(f"c{i % 7}", f"note {i}") for i in range(200)))
    assert len(notes) == 200
    assert 1 <= spy.calls < 200
    on_disk = file_notes(path)
    assert sum(len(v) for v in on_disk.values()) == 200
    assert sorted(c for v in on_disk.values() for c in v) == sorted(f"note {i}" for i in range(200))
    await store.aclose()
    reopened = await InteractionStore.open(path, agent=AGENT)
    assert (await reopened.counts()) == (7, 200)
    await reopened.aclose()


async def test_adds_during_a_write_wait_for_the_next_write(path: Path, spy: WriteSpy) -> None:
    store = await InteractionStore.open(path, agent=AGENT)
    spy.calls = 0
    spy.started.clear()
    spy.gate = threading.Event()
    first = asyncio.create_task(store.add("c", "first"))
    await asyncio.to_thread(spy.started.wait, 10)
    later = [asyncio.create_task(store.add("c", f"later {i}")) for i in range(10)]
    await asyncio.sleep(0)  # let the later adds queue up behind the running write
    assert not first.done()
    assert not any(task.done() for task in later)
    spy.gate.set()
    await asyncio.gather(first, *later)
    assert spy.calls == 2
    assert file_notes(path) == {"c": ["first"] + [f"later {i}" for i in range(10)]}
    await store.aclose()


async def test_failed_write_raises_rolls_back_and_next_add_succeeds(
    path: Path, spy: WriteSpy
) -> None:
    store = await InteractionStore.open(path, agent=AGENT)
    await store.add("c", "acked one")
    spy.fail_next.append(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    results = await asyncio.gather(
        store.add("c", "lost a"), store.add("d", "lost b"), return_exceptions=True
    )
    assert all(isinstance(r, StorageError) for r in results)
    assert "No space left" in str(results[0])
    assert [n.content for n in await store.get("c")] == ["acked one"]
    assert await store.conversations() == ["c"]
    assert await store.counts() == (1, 1)
    assert file_notes(path) == {"c": ["acked one"]}

    await store.add("c", "acked two")
    assert file_notes(path) == {"c": ["acked one", "acked two"]}
    await store.aclose()


async def test_failed_write_keeps_changes_queued_behind_it(path: Path, spy: WriteSpy) -> None:
    store = await InteractionStore.open(path, agent=AGENT)
    spy.started.clear()
    spy.gate = threading.Event()
    spy.fail_next.append(OSError(errno.EIO, "I/O error"))
    doomed = asyncio.create_task(store.add("c", "doomed"))
    await asyncio.to_thread(spy.started.wait, 10)
    queued = asyncio.create_task(store.add("c", "queued"))
    await asyncio.sleep(0)
    assert [n.content for n in await store.get("c")] == ["doomed", "queued"]
    spy.gate.set()
    with pytest.raises(StorageError, match="I/O error"):
        await doomed
    await queued
    assert [n.content for n in await store.get("c")] == ["queued"]
    assert file_notes(path) == {"c": ["queued"]}
    await store.aclose()


async def test_failed_clear_restores_the_notes(path: Path, spy: WriteSpy) -> None:
    store = await InteractionStore.open(path, agent=AGENT)
    await store.add("c", "keep me")
    spy.fail_next.append(OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(StorageError):
        await store.clear("c")
    assert [n.content for n in await store.get("c")] == ["keep me"]
    assert file_notes(path) == {"c": ["keep me"]}
    await store.aclose()


@pytest.mark.parametrize(
    ("conversation", "content", "author", "message"),
    [
        ("", "text", None, "conversation_id must not be empty"),
        ("   ", "text", None, "conversation_id must not be empty"),
        ("c" * 513, "text", None, "conversation_id is too long"),
        (42, "text", None, "conversation_id must be a string"),
        ("c", "", None, "content must not be empty"),
        ("c", " \n\t", None, "content must not be empty"),
        ("c", "x" * 51, None, "content is too long: 51 characters, at most 50"),
        ("c", "nul\x00byte", None, "NUL"),
        ("c", "lone \ud800 surrogate", None, "surrogate"),
        ("c", b"bytes", None, "content must be a string"),
        ("c\x00", "text", None, "NUL"),
        ("c", "text", "bob\x00", "NUL"),
        ("c", "text", "", "author must not be empty"),
    ],
)
async def test_bad_input_is_rejected_and_nothing_written(
    path: Path,
    spy: WriteSpy,
    conversation: Any,
    content: Any,
    author: Any,
    message: str,
) -> None:
    store = await InteractionStore.open(path, agent=AGENT, max_note_chars=50)
    await store.add("c", "existing")
    before, writes = path.read_bytes(), spy.calls
    with pytest.raises(InvalidToolInput, match=message):
        await store.add(conversation, content, author=author)
    assert spy.calls == writes
    assert path.read_bytes() == before
    assert await store.counts() == (1, 1)
    await store.aclose()


async def test_closed_store_refuses_use_and_close_is_idempotent(path: Path) -> None:
    store = await InteractionStore.open(path, agent=AGENT)
    await store.aclose()
    await store.aclose()
    assert store.closed
    with pytest.raises(StoreClosedError, match="closed"):
        await store.add("c", "late")
    with pytest.raises(StoreClosedError):
        await store.get("c")
    with pytest.raises(StoreClosedError):
        await store.export()


async def test_close_waits_for_the_running_write(path: Path, spy: WriteSpy) -> None:
    store = await InteractionStore.open(path, agent=AGENT)
    spy.started.clear()
    spy.gate = threading.Event()
    adding = asyncio.create_task(store.add("c", "in flight"))
    await asyncio.to_thread(spy.started.wait, 10)
    closing = asyncio.create_task(store.aclose())
    await asyncio.sleep(0)
    assert not closing.done()
    spy.gate.set()
    await closing
    assert adding.done()
    await adding
    assert file_notes(path) == {"c": ["in flight"]}


async def test_export_import_round_trip_is_idempotent(tmp_path: Path) -> None:
    source = await InteractionStore.open(tmp_path / "a.json", agent=AGENT, clock=Ticker())
    await source.add("c", "one", author="bob@example.org")
    await source.add("c", "two")
    await source.add("d", "three")
    exported = await source.export()
    await source.aclose()

    target = await InteractionStore.open(tmp_path / "b.json", agent=AGENT, clock=Ticker(0))
    await target.add("c", "local")
    assert await target.import_notes(exported) == 3
    assert await target.import_notes(exported) == 0
    assert [n.content for n in await target.get("c")] == ["local", "one", "two"]
    assert (await target.get("c"))[1].author == "bob@example.org"
    await target.aclose()


@pytest.mark.parametrize(
    "data",
    [
        {"c": "not a list"},
        {"c": [{"content": "ok"}, {"content": ""}]},
        {"c": [{"content": "ok", "colour": "red"}]},
        {"c": [{"content": "ok", "created_at": float("nan")}]},
        {"c": [{"content": "ok", "conversation_id": "elsewhere"}]},
        {"": [{"content": "ok"}]},
        {"c": ["just text"]},
    ],
)
async def test_bad_import_writes_nothing(path: Path, spy: WriteSpy, data: Any) -> None:
    store = await InteractionStore.open(path, agent=AGENT)
    writes = spy.calls
    with pytest.raises(InvalidToolInput):
        await store.import_notes(data)
    assert spy.calls == writes
    assert await store.counts() == (0, 0)
    await store.aclose()


_texts = st.text(
    alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
    min_size=1,
    max_size=40,
).filter(lambda s: s.strip() != "")


@settings(max_examples=25, deadline=None)
@given(notes=st.lists(st.tuples(_texts, _texts), min_size=1, max_size=8))
def test_any_valid_text_survives_the_file(notes: list[tuple[str, str]]) -> None:
    async def scenario(folder: Path) -> None:
        path = folder / "notes.json"
        store = await InteractionStore.open(path, agent=AGENT)
        for conversation, content in notes:
            await store.add(conversation, content)
        expected = await store.export()
        await store.aclose()
        reopened = await InteractionStore.open(path, agent=AGENT)
        assert await reopened.export() == expected
        for conversation, _ in notes:
            assert [n.content for n in await reopened.get(conversation)] == [
                c for conv, c in notes if conv == conversation
            ]
        await reopened.aclose()

    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(scenario(Path(folder)))


async def test_an_add_cancelled_while_queued_is_taken_back(path: Path, spy: WriteSpy) -> None:
    store = await InteractionStore.open(path, agent=AGENT)
    spy.started.clear()
    spy.gate = threading.Event()
    first = asyncio.create_task(store.add("c", "first"))
    await asyncio.to_thread(spy.started.wait, 10)
    given_up = asyncio.create_task(store.add("c", "given up"))
    kept = asyncio.create_task(store.add("c", "kept"))
    await asyncio.sleep(0)
    assert [n.content for n in await store.get("c")] == ["first", "given up", "kept"]
    given_up.cancel()
    with pytest.raises(asyncio.CancelledError):
        await given_up
    assert [n.content for n in await store.get("c")] == ["first", "kept"]
    spy.gate.set()
    await asyncio.gather(first, kept)
    assert file_notes(path) == {"c": ["first", "kept"]}
    await store.aclose()
