"""The agents page of ``spade-memory serve``: what it lists of each agent's files."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from factories import REPO, child_env, hashing_config, run_cli_json

from spade_memory.identity import AgentIdentity
from spade_memory.manager import MemoryManager
from spade_memory.storage import registry as registry_module
from spade_memory.web.fleet import Fleet

ALICE = "alice@localhost"
BOB = "bob@localhost"


async def _open(root: Path, jid: str) -> MemoryManager:
    return await MemoryManager.open(jid, hashing_config(root))


async def _fill(root: Path) -> None:
    async with await _open(root, ALICE) as alice:
        await alice.store("Alice keeps bees", category="fact")
        for number in range(3):  # enough notes for a journal beside the notes file
            await alice.add_note("conv-1", f"note {number}")
    async with await _open(root, BOB) as bob:
        await bob.store("Bob likes sailing", category="preference")


@pytest.fixture
async def client(memory_root: Path) -> AsyncIterator[TestClient[Any, Any]]:
    await _fill(memory_root)
    fleet = Fleet(memory_root, _open, host="127.0.0.1")
    async with TestClient(TestServer(fleet.app())) as opened:
        yield opened


async def _agents(client: TestClient[Any, Any]) -> dict[str, dict[str, Any]]:
    response = await client.get("/", params={"format": "json"})
    assert response.status == 200, await response.text()
    return {agent["jid"]: agent for agent in (await response.json())["agents"]}


async def test_the_agents_page_and_ls_count_the_same_files(
    client: TestClient[Any, Any], memory_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = memory_root / AgentIdentity.of(ALICE).interactions_name
    journal = notes.with_name(notes.name + ".journal")
    assert journal.stat().st_size > 0  # the file the two once counted differently
    listed = await asyncio.to_thread(run_cli_json, capsys, "ls", "--root", str(memory_root))
    by_ls = {agent["jid"]: agent for agent in listed["agents"]}
    by_page = await _agents(client)
    assert set(by_ls) == set(by_page) == {ALICE, BOB}
    for jid, row in by_ls.items():
        total = row["database_bytes"] + row["notes_bytes"] + row["snapshot_bytes"]
        assert by_page[jid]["bytes"] == total
        assert by_page[jid]["memories"] == row["memories"] == 1
    assert by_ls[ALICE]["notes_bytes"] == notes.stat().st_size + journal.stat().st_size


# An agent that stores memories and is killed before it closes its memory.
KILLED = """
import asyncio, os, sys
from pathlib import Path
from spade_memory.config import MaintenanceConfig, MemoryConfig
from spade_memory.manager import MemoryManager
from spade_memory.storage.registry import Registry

async def main() -> None:
    config = MemoryConfig(
        root=Path(sys.argv[1]), embedder="hashing",
        maintenance=MaintenanceConfig(check_on_open=False),
    )
    memory = await MemoryManager.open("carol@localhost", config)
    for number in range(5):
        await memory.store(f"Carol remembers thing {number}", category="fact")
    os._exit(0)

asyncio.run(main())
"""


def _files(root: Path) -> dict[str, tuple[str, int]]:
    return {
        str(path.relative_to(root)): (
            hashlib.sha256(path.read_bytes()).hexdigest(),
            path.stat().st_mtime_ns,
        )
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.mark.parametrize("index", ["with its index", "without its index"])
async def test_the_agents_page_reads_a_killed_agent_and_changes_no_file(
    memory_root: Path, index: str
) -> None:
    await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", KILLED, str(memory_root)],
        cwd=REPO,
        env=child_env(),
        check=True,
    )
    database = memory_root / AgentIdentity.of("carol@localhost").database_name
    if index == "without its index":
        database.with_name(database.name + "-shm").unlink()
    assert database.with_name(database.name + "-wal").stat().st_size > 0
    before = _files(memory_root)
    fleet = Fleet(memory_root, _open, host="127.0.0.1")
    async with TestClient(TestServer(fleet.app())) as client:
        agents = await _agents(client)
    assert agents["carol@localhost"]["memories"] == 5
    assert _files(memory_root) == before


async def test_the_registry_is_read_again_only_when_it_changed(
    client: TestClient[Any, Any], memory_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Path] = []
    decode = registry_module._decode

    def counted(raw: bytes, path: Path) -> dict[str, Any]:
        reads.append(path)
        return decode(raw, path)

    monkeypatch.setattr(registry_module, "_decode", counted)
    alice = AgentIdentity.of(ALICE).stem
    for page in ("/", "/memories", "/search?q=bees", "/conversations", "/"):
        response = await client.get(f"/agents/{alice}{page}")
        assert response.status == 200, page
    assert len(reads) <= 1
    # an agent created while the server runs is listed and served at once
    async with await _open(memory_root, "carol@localhost") as carol:
        await carol.store("Carol grows tomatoes", category="fact")
    assert "carol@localhost" in await _agents(client)
    carol_stem = AgentIdentity.of("carol@localhost").stem
    response = await client.get(f"/agents/{carol_stem}/memories", params={"format": "json"})
    assert response.status == 200
    assert [m["content"] for m in (await response.json())["memories"]] == ["Carol grows tomatoes"]
    assert len(reads) <= 2


async def test_a_damaged_agent_is_named_and_the_others_still_searched(
    client: TestClient[Any, Any], memory_root: Path
) -> None:
    database = memory_root / AgentIdentity.of(BOB).database_name
    database.write_bytes(b"this is no database" * 100)
    stem = AgentIdentity.of(BOB).stem
    page = await client.get(f"/agents/{stem}/", params={"format": "json"})
    assert page.status == 503 and "not a readable memory database" in (await page.json())["error"]
    found = await client.get("/search", params={"q": "bees", "format": "json"})
    assert found.status == 200, await found.text()
    data = await found.json()
    assert [r["memory"]["content"] for r in data["results"]] == ["Alice keeps bees"]
    assert [s["agent"] for s in data["skipped"]] == [BOB]


async def test_odd_ids_dates_and_tokens_are_no_server_errors(
    client: TestClient[Any, Any],
) -> None:
    stem = AgentIdentity.of(ALICE).stem
    long_id = "9" * 5000
    for path in (f"/agents/{stem}/memories/{long_id}", f"/agents/{stem}/graph/nodes/{long_id}"):
        assert (await client.get(path)).status == 404
    dated = await client.get(f"/agents/{stem}/memories", params={"to": "9999-12-31"})
    assert dated.status == 200
    forged = await client.post(
        f"/agents/{stem}/memories/1/pin", headers={"X-Memory-Token": "\udcff\udcfe"}
    )
    assert forged.status == 403


async def _token(client: TestClient[Any, Any], stem: str) -> str:
    page = await (await client.get(f"/agents/{stem}/")).text()
    found = re.search(r'name="memory-token" content="([^"]+)"', page)
    assert found is not None
    return found.group(1)


async def test_unreadable_change_requests_are_refused_not_server_errors(
    client: TestClient[Any, Any],
) -> None:
    stem = AgentIdentity.of(ALICE).stem
    pin = f"/agents/{stem}/memories/1/pin"
    form = "application/x-www-form-urlencoded"
    for body, kind in (
        (b"importance=\xff", form),  # not UTF-8
        (b"importance=1", f"{form}; charset=bogus"),  # no such charset
    ):
        response = await client.post(pin, data=body, headers={"Content-Type": kind})
        assert response.status == 400, await response.text()
    token = await _token(client, stem)
    for path in (pin, f"/agents/{stem}/memories/1/update"):
        response = await client.post(
            path,
            data=b'{"importance": 1' + b"0" * 400 + b"}",  # no float holds it
            headers={"Content-Type": "application/json", "X-Memory-Token": token},
        )
        assert response.status == 400, await response.text()
        assert "importance must be a number" in await response.text()


async def test_the_list_page_takes_its_largest_limit_and_the_search_its_own(
    client: TestClient[Any, Any], memory_root: Path
) -> None:
    stem = AgentIdentity.of(ALICE).stem
    largest = await client.get(
        f"/agents/{stem}/memories", params={"limit": "1000", "format": "json"}
    )
    assert largest.status == 200, await largest.text()
    data = await largest.json()
    assert data["limit"] == 1000 and data["more"] is False and len(data["memories"]) == 1
    one = await client.get(f"/agents/{stem}/memories", params={"limit": "1", "format": "json"})
    assert (await one.json())["more"] is False  # Alice holds one memory
    async with await _open(memory_root, BOB) as bob:
        await bob.store("Bob keeps bees too", category="fact")
    found = await client.get("/search", params={"q": "bees", "limit": "1", "format": "json"})
    assert found.status == 200, await found.text()
    assert len((await found.json())["results"]) == 1  # the page's limit, not each agent's


async def test_the_graph_of_a_conversation_is_the_one_named_as_written(
    memory_root: Path,
) -> None:
    async with await _open(memory_root, ALICE) as alice:
        await alice.store("Erin met Frank in Rome", source_conversation="c1")
        await alice.store("Carol met Dave in Paris", source_conversation=" c1")
        await alice.flush()
    fleet = Fleet(memory_root, _open, host="127.0.0.1")
    stem = AgentIdentity.of(ALICE).stem
    async with TestClient(TestServer(fleet.app())) as client:
        response = await client.get(
            f"/agents/{stem}/graph", params={"conversation": " c1", "format": "json"}
        )
        assert response.status == 200, await response.text()
        names = json.dumps(await response.json())
        assert "Carol" in names and "Erin" not in names


async def test_static_files_answer_only_the_hosts_the_pages_answer(
    client: TestClient[Any, Any],
) -> None:
    stem = AgentIdentity.of(ALICE).stem
    for path in ("/static/graph.js", f"/agents/{stem}/static/graph.js"):
        assert (await client.get(path)).status == 200
        foreign = await client.get(path, headers={"Host": "evil.example"})
        assert foreign.status == 403, path
