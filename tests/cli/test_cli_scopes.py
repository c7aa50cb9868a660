"""``--as JID``: the CLI shows what a conversation partner would see, and shows scopes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from factories import run_cli as run
from factories import run_cli_json as run_json

from spade_memory import MemoryConfig, MemoryManager, Scope
from spade_memory.config import MaintenanceConfig

AGENT, ALICE, BOB = "agent@localhost", "alice@localhost", "bob@localhost"


async def build(root: Path) -> None:
    config = MemoryConfig(
        root=root, embedder="hashing", maintenance=MaintenanceConfig(check_on_open=False)
    )
    async with await MemoryManager.open(AGENT, config) as memory:
        await memory.store("The office door code is 4711", scope=Scope.private(ALICE))
        await memory.store("The office opens at nine")
        await memory.store("Bob's office is room 12", scope=Scope.shared(BOB, [ALICE]))
        await memory.flush()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "memory"
    asyncio.run(build(folder))
    return folder


def test_search_and_list_as_a_partner(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    where = ("--root", str(root))
    everything = run_json(capsys, "search", AGENT, "office", *where)
    assert len(everything) == 3
    as_bob = run_json(capsys, "search", AGENT, "office", *where, "--as", BOB)
    assert {r["memory"]["id"] for r in as_bob} == {2, 3}
    as_alice = run_json(capsys, "list", AGENT, *where, "--as", "Alice@localhost/laptop")
    assert [m["id"] for m in as_alice] == [3, 2, 1]
    assert [m["id"] for m in run_json(capsys, "list", AGENT, *where, "--as", BOB)] == [3, 2]
    status, out, _ = run(capsys, "list", AGENT, *where, "--as", BOB)
    assert status == 0 and f"as {BOB} sees them" in out and "shared" in out
    status, out, _ = run(capsys, "search", AGENT, "door code", *where, "--as", BOB)
    assert status == 0 and "4711" not in out
    status, _, err = run(capsys, "list", AGENT, *where, "--as", "not a jid")
    assert status == 2 and "not a valid agent JID" in err


def test_show_and_forget_as_a_partner(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    where = ("--root", str(root))
    shown = run_json(capsys, "show", AGENT, "1", *where)
    assert shown["memory"]["scope"] == {"owner": ALICE, "visibility": "private", "shared_with": []}
    status, out, _ = run(capsys, "show", AGENT, "1", *where)
    assert status == 0 and f"private {ALICE}" in out
    status, _, err = run(capsys, "show", AGENT, "1", *where, "--as", BOB)
    assert status == 1 and "no memory with id 1" in err
    status, _, err = run(capsys, "forget", AGENT, "2", *where, "--as", BOB)
    assert status == 1 and "you may forget only what you told me" in err
    assert run_json(capsys, "forget", AGENT, "3", *where, "--as", BOB)["forgotten"] == 3
    assert [m["id"] for m in run_json(capsys, "list", AGENT, *where)] == [2, 1]


@pytest.mark.parametrize(
    "argv",
    [["search", AGENT, "office"], ["list", AGENT], ["show", AGENT, "1"], ["forget", AGENT, "2"]],
)
def test_a_conversation_without_a_partner_is_refused(
    root: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    status, out, err = run(capsys, *argv, "--root", str(root), "--conversation", "c1")
    assert (status, out) == (2, "")
    assert err == "error: --conversation names where a partner asks: give it with --as JID\n"
    assert [m["id"] for m in run_json(capsys, "list", AGENT, "--root", str(root))] == [3, 2, 1]
