"""spade_llm's own memory files, written by spade_llm itself, imported into spade_memory."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path

import pytest
from spade_llm.memory import AgentBaseMemory, AgentInteractionMemory

from spade_memory.cli import main
from spade_memory.config import MaintenanceConfig, MemoryConfig
from spade_memory.identity import conversation_id_for
from spade_memory.integrations.spade_llm import SpadeMemoryInteractionMemory
from spade_memory.integrations.spade_llm_import import import_spade_llm, spade_llm_uid
from spade_memory.manager import MemoryManager

ALICE = "alice@localhost"
BOB = "bob@localhost"


@pytest.fixture
async def spade_llm_dir(tmp_path: Path) -> Path:
    """Memory files as spade_llm 0.3 writes them: two agents, memories and notes."""
    folder = tmp_path / "spade_llm_memory"
    alice = AgentBaseMemory(ALICE, memory_path=str(folder))
    bob = AgentBaseMemory(BOB, memory_path=str(folder))
    try:
        await alice.store_memory("fact", "The staging database password rotates every 30 days")
        await alice.store_memory("preference", "Bob prefers answers in Chinese", "chat", 0.8)
        await alice.store_memory("pattern", "Deployments fail on Fridays")
        await bob.store_memory("capability", "I can translate between English and Chinese")
    finally:
        await alice.cleanup()
        await bob.cleanup()
    notes = AgentInteractionMemory(ALICE, memory_path=str(folder))
    notes.add_information(f"{ALICE}_{BOB}", "Bob is planning the Porto trip")
    notes.add_information("thread-42", "Agreed to meet on Monday")
    return folder


def target(root: Path, categories: tuple[str, ...] | None = None) -> MemoryConfig:
    extra = {"categories": categories} if categories else {}
    return MemoryConfig(
        root=root,
        embedder="hashing",
        maintenance=MaintenanceConfig(check_on_open=False, behaviour=False),
        **extra,  # type: ignore[arg-type]
    )


async def test_memories_and_notes_arrive_by_agent_and_twice_adds_nothing(
    spade_llm_dir: Path, memory_root: Path
) -> None:
    config = target(memory_root)
    report = await import_spade_llm(spade_llm_dir, config)
    assert (report.unmapped, report.unreadable) == ([], [])
    assert set(report.agents) == {ALICE, BOB}
    alice = report.agents[ALICE]
    assert (alice.memories_added, alice.notes_added) == (3, 2)
    assert report.agents[BOB].memories_added == 1

    async with await MemoryManager.open(ALICE, config) as memory:
        stored = {m.content: m for m in await memory.list(limit=10)}
        preference = stored["Bob prefers answers in Chinese"]
        assert (preference.category, preference.context, preference.confidence) == (
            "preference",
            "chat",
            0.8,
        )
        spade_id = preference.metadata["spade_llm"]["id"]
        assert preference.uid == spade_llm_uid(ALICE, spade_id)
        with sqlite3.connect(spade_llm_dir / "alice_localhost_base_memory.db") as db:
            ids = {row[0] for row in db.execute("SELECT id FROM agent_memories")}
        assert spade_id in ids
        hits = await memory.search("database password rotation")
        assert hits[0].memory.content.startswith("The staging database password")
        pair = conversation_id_for(ALICE, BOB)
        assert [n.content for n in await memory.notes(pair)] == ["Bob is planning the Porto trip"]
        assert [n.content for n in await memory.notes("thread-42")] == ["Agreed to meet on Monday"]

    again = await import_spade_llm(spade_llm_dir, config)
    assert again.agents[ALICE].memories_added == 0 and again.agents[ALICE].notes_added == 0
    assert again.agents[ALICE].memories_present == 3 and again.agents[ALICE].notes_present == 2
    async with await MemoryManager.open(ALICE, config) as memory:
        assert len(await memory.list(limit=10)) == 3


async def test_what_cannot_be_mapped_or_read_is_reported(
    spade_llm_dir: Path, memory_root: Path
) -> None:
    (spade_llm_dir / "broken_base_memory.db").write_bytes(b"this is not sqlite" * 100)
    (spade_llm_dir / "broken_interactions.json").write_text("{not json", encoding="utf-8")
    (spade_llm_dir / "nobody_interactions.json").write_text(
        '{"agent_id": "not a jid", "interactions": {}}', encoding="utf-8"
    )
    report = await import_spade_llm(
        spade_llm_dir, target(memory_root, ("fact", "preference", "capability"))
    )
    assert report.agents[ALICE].memories_added == 2
    assert any("category 'pattern' is not one of" in line for line in report.unmapped)
    assert any("'not a jid' is not a JID" in line for line in report.unmapped)
    assert any(
        line.startswith("broken_base_memory.db: not an SQLite database")
        for line in report.unreadable
    )
    assert any(line.startswith("broken_interactions.json: not JSON") for line in report.unreadable)
    assert all("\n" not in line for line in report.unreadable + report.unmapped)


async def test_a_note_without_text_is_named_counting_from_one(
    tmp_path: Path, memory_root: Path
) -> None:
    folder = tmp_path / "spade_llm_memory"
    folder.mkdir()
    notes = {"c": [{"content": "kept", "timestamp": None}, {"content": " ", "timestamp": None}]}
    (folder / "alice_localhost_interactions.json").write_text(
        json.dumps({"agent_id": ALICE, "interactions": notes}), encoding="utf-8"
    )
    report = await import_spade_llm(folder, target(memory_root))
    assert report.unmapped == ["alice_localhost_interactions.json: note 2 of 'c' has no text"]
    assert report.agents[ALICE].notes_added == 1


def test_the_command_imports_and_reports_in_one_line_each(
    spade_llm_dir: Path, memory_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "import-spade-llm",
        str(spade_llm_dir),
        "--root",
        str(memory_root),
        "--embedder",
        "hashing",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"{ALICE}: 3 memories and 2 notes added" in out
    assert main(args) == 0
    assert (
        f"{ALICE}: 0 memories and 0 notes added (3 memories and 2 notes" in capsys.readouterr().out
    )
    (spade_llm_dir / "x_base_memory.db").write_text("garbage", encoding="utf-8")
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "error: x_base_memory.db: not an SQLite database" in err and "Traceback" not in err


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_a_folder_without_spade_llm_files_is_one_line(
    tmp_path: Path, memory_root: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    folder = tmp_path / kind
    if kind == "empty":
        folder.mkdir()
    status = main(["import-spade-llm", str(folder), "--root", str(memory_root)])
    err = capsys.readouterr().err
    assert status == 1
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err


def test_the_command_makes_no_root_for_a_refused_folder_and_a_private_one_otherwise(
    spade_llm_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "new-root"
    empty = tmp_path / "empty"
    empty.mkdir()
    for refused in (tmp_path / "missing", empty):
        assert main(["import-spade-llm", str(refused), "--root", str(root)]) == 1
        assert not root.exists()
    args = ["import-spade-llm", str(spade_llm_dir), "--root", str(root), "--embedder", "hashing"]
    assert main(args) == 0
    capsys.readouterr()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700


def test_plain_import_points_spade_llm_files_to_import_spade_llm(
    spade_llm_dir: Path, memory_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = next(spade_llm_dir.glob("*_base_memory.db"))
    notes = next(spade_llm_dir.glob("*_interactions.json"))
    for given in (database, notes, spade_llm_dir):
        status = main(["import", ALICE, str(given), "--root", str(memory_root)])
        err = capsys.readouterr().err
        assert status == 2, err
        assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
        assert "spade-memory import-spade-llm" in err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\xff\xfe junk", "not text"),
        (b"", "empty"),
        (b"   \n\n", "empty"),
        (b"[1, 2, 3]", "is JSON but not an export"),
        (b'{"agent": "alice@localhost"}', "is JSON but not an export"),
        (b'{\n  "nested": {"deep": true}\n}', "is JSON but not an export"),
        (b'{"memories": 5}', "not a spade_memory export"),
        (b"not json at all\n", "line 1 is not JSON"),
        (b"[" * 100_000, "not JSON"),
    ],
)
def test_unreadable_input_to_import_is_one_line(
    tmp_path: Path,
    memory_root: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes,
    says: str,
) -> None:
    given = tmp_path / "given.jsonl"
    given.write_bytes(content)
    status = main(["import", ALICE, str(given), "--root", str(memory_root), "--embedder", "none"])
    err = capsys.readouterr().err
    assert status in (1, 2)
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert says in err


_SCHEMA = (
    "CREATE TABLE agent_memories (id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, "
    "category TEXT NOT NULL, content TEXT NOT NULL, context TEXT, confidence REAL, "
    "created_at TIMESTAMP, last_accessed TIMESTAMP, access_count INTEGER)"
)


async def test_odd_rows_arrive_whole_and_each_once(tmp_path: Path, memory_root: Path) -> None:
    folder = tmp_path / "spade_llm_memory"
    folder.mkdir()
    db = sqlite3.connect(folder / "alice_localhost_base_memory.db")
    db.execute(_SCHEMA)
    row = "INSERT INTO agent_memories VALUES (?, ?, 'fact', ?, ?, 1.0, ?, ?, 0)"
    when = "2024-01-01T10:00:00"
    db.execute(row, ("a", ALICE, "The build server is jenkins-02", None, when, when))
    # bytes that are not UTF-8 in a TEXT column, written by some other tool
    db.execute(
        "INSERT INTO agent_memories VALUES ('b', ?, 'fact', 'The cafe opens at 8', "
        "CAST(X'636166e9' AS TEXT), 1.0, ?, ?, 0)",
        (ALICE, when, when),
    )
    for content in ("Deploys happen on Fridays", "Alice likes green tea"):  # no ids
        db.execute(row, (None, ALICE, content, None, when, when))
    db.execute(row, ("c", ALICE, "The office wifi is called Gümüş".encode(), None, when, when))
    db.execute(row, ("d", ALICE, "Backups run at noon", None, when, "9999-12-31T23:59:59-12:00"))
    db.commit()
    db.close()
    config = target(memory_root)
    report = await import_spade_llm(folder, config)
    assert report.unreadable == [] and report.agents[ALICE].memories_added == 6
    async with await MemoryManager.open(ALICE, config) as memory:
        contents = sorted(m.content for m in await memory.list())
        assert contents == sorted(
            [
                "The build server is jenkins-02",
                "The cafe opens at 8",
                "Deploys happen on Fridays",
                "Alice likes green tea",
                "The office wifi is called Gümüş",
                "Backups run at noon",
            ]
        )
        (cafe,) = [m for m in await memory.list() if m.content == "The cafe opens at 8"]
        assert cafe.context == "caf\ufffd"
    again = await import_spade_llm(folder, config)
    assert again.agents[ALICE].memories_added == 0


async def test_imported_notes_reach_the_interaction_memory_drop_in(
    spade_llm_dir: Path, memory_root: Path
) -> None:
    config = target(memory_root)
    await import_spade_llm(spade_llm_dir, config)
    async with await MemoryManager.open(ALICE, config) as memory:
        notes = SpadeMemoryInteractionMemory(memory)
        pair = f"{ALICE}_{BOB}"  # spade_llm's id, kept here as conversation_id_for's
        assert notes.get_information(pair) == ["Bob is planning the Porto trip"]
        notes.add_information(pair, "Bob flies on Monday")
        assert notes.get_information(pair) == [
            "Bob is planning the Porto trip",
            "Bob flies on Monday",
        ]
        assert notes.clear_conversation(pair) is True
        assert notes.get_information(pair) == []
        await notes.flush()
        assert await memory.notes(conversation_id_for(ALICE, BOB)) == []


async def test_a_bad_note_costs_itself_only_and_every_left_out_note_is_named(
    tmp_path: Path, memory_root: Path
) -> None:
    folder = tmp_path / "spade_llm_memory"
    folder.mkdir()
    config = target(memory_root)
    data = {
        "agent_id": ALICE,
        "interactions": {
            "conv-big": [
                {"content": "Bob's API takes JSON", "timestamp": "2024-01-01T10:00:00"},
                {"content": "x" * (config.max_note_chars + 1)},
                {"content": "Bob answers within a day", "timestamp": "2024-01-01T10:02:00"},
            ],
            "conv-str": ["a note written as a bare string"],
            "conv-dict": {"content": "a note not in a list"},
        },
    }
    (folder / "alice_localhost_interactions.json").write_text(json.dumps(data))
    report = await import_spade_llm(folder, config)
    assert report.agents[ALICE].notes_added == 2
    assert any("note 2 of 'conv-big'" in line for line in report.unmapped)
    assert any("note 1 of 'conv-str' is not an object" in line for line in report.unmapped)
    assert any("'conv-dict' are not a list" in line for line in report.unmapped)
    async with await MemoryManager.open(ALICE, config) as memory:
        assert [n.content for n in await memory.notes("conv-big")] == [
            "Bob's API takes JSON",
            "Bob answers within a day",
        ]
