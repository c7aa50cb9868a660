"""``spade-memory history`` and ``form``: kept conversations listed and read, looks that
form nothing, forming on demand, forgetting a conversation, and history through
``export`` and ``import``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from factories import run_cli as run
from factories import run_cli_json as run_json

from spade_memory.config import FormationConfig, MaintenanceConfig, MemoryConfig
from spade_memory.manager import MemoryManager

ALICE = "alice@localhost"
BOB = "bob@example.org"
CAROL = "carol@example.org"
DAY = 1_700_049_600.0


async def build(root: Path) -> None:
    config = MemoryConfig(
        root=root,
        embedder="hashing",
        maintenance=MaintenanceConfig(check_on_open=False),
        formation=FormationConfig(form=False),
    )
    async with await MemoryManager.open(ALICE, config) as alice:
        await alice.store("Alice keeps bees")
        for position in range(12):
            await alice.history.append(
                "conv-bob",
                role="user",
                sender=BOB,
                text=f"I prefer tea number {position}",
                message_id=f"b{position}",
                at=DAY + 120 * position,
            )
            await alice.history.append(
                "conv-bob",
                role="assistant",
                sender=ALICE,
                text="Noted",
                at=DAY + 120 * position + 1,
            )
        await alice.history.append("conv-carol", role="user", sender=CAROL, text="My name is Carol")


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "memory"
    asyncio.run(build(folder))
    return folder


def test_history_lists_conversations_and_reads_one_without_forming(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = run_json(capsys, "history", ALICE, "--root", str(root))
    assert [(c["conversation_id"], c["peer"], c["messages"], c["pending"]) for c in listed] == [
        ("conv-carol", CAROL, 1, 1),
        ("conv-bob", BOB, 24, 24),
    ]
    status, out, _ = run(capsys, "history", ALICE, "--root", str(root))
    assert status == 0 and "conv-bob" in out and "pending" in out
    read = run_json(capsys, "history", ALICE, "conv-bob", "--limit", "3", "--root", str(root))
    assert [m["text"] for m in read["messages"]] == ["Noted", "I prefer tea number 11", "Noted"]
    assert all(m["formed"] is False for m in read["messages"])
    status, out, _ = run(capsys, "history", ALICE, "conv-bob", "--root", str(root))
    assert status == 0 and "I prefer tea number 0" in out and "assistant" in out
    # looking formed nothing: the closed windows of conv-bob still wait
    assert run_json(capsys, "stats", ALICE, "--root", str(root))["memories"] == 1
    assert run_json(capsys, "history", ALICE, "--root", str(root))[1]["pending"] == 24


def test_history_as_a_partner_sees_its_own_conversations_only(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = run_json(capsys, "history", ALICE, "--as", CAROL, "--root", str(root))
    assert [c["conversation_id"] for c in listed] == ["conv-carol"]
    status, _, err = run(capsys, "history", ALICE, "conv-bob", "--as", CAROL, "--root", str(root))
    assert status == 1 and "keeps no conversation 'conv-bob'" in err
    status, _, err = run(
        capsys, "history", ALICE, "conv-bob", "--forget", "--as", CAROL, "--root", str(root)
    )
    assert status == 1
    status, _, err = run(capsys, "history", ALICE, "nothing", "--root", str(root))
    assert status == 1 and "keeps no conversation 'nothing'" in err
    status, _, err = run(capsys, "history", ALICE, "--forget", "--root", str(root))
    assert status == 2 and "needs the conversation" in err


def test_form_forms_every_pending_message_and_says_what_it_did(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "form", ALICE, "--root", str(root))
    assert status == 0
    assert "25 messages to form" in out and "windows formed" in out and "new memories" in out
    assert all(c["pending"] == 0 for c in run_json(capsys, "history", ALICE, "--root", str(root)))
    assert run_json(capsys, "stats", ALICE, "--root", str(root))["memories"] > 1
    again = run_json(capsys, "form", ALICE, "--root", str(root))
    assert (again["pending_messages"], again["windows"]) == (0, 0)


def test_form_reports_in_json(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "form", ALICE, "--root", str(root))
    assert report["pending_messages"] == 25 and report["left"] == 0
    assert report["windows"] >= 2 and report["memories"] == len(report["memory_ids"])
    assert report["by_llm"] == 0 and report["discarded"] == 0


def test_forget_a_conversation_and_what_was_formed_only_from_it(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "form", ALICE, "--root", str(root))
    before = run_json(capsys, "stats", ALICE, "--root", str(root))["memories"]
    gone = run_json(capsys, "history", ALICE, "conv-carol", "--forget", "--root", str(root))
    assert gone["forgotten"] == "conv-carol" and gone["messages"] == 1 and gone["memories"] >= 1
    after = run_json(capsys, "stats", ALICE, "--root", str(root))["memories"]
    assert after == before - gone["memories"]
    listed = run_json(capsys, "history", ALICE, "--root", str(root))
    assert [c["conversation_id"] for c in listed] == ["conv-bob"]
    status, out, _ = run(capsys, "history", ALICE, "conv-bob", "--forget", "--root", str(root))
    assert status == 0 and "forgot conversation conv-bob" in out


def test_export_and_import_carry_the_history(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "alice.jsonl"
    status, _, err = run(capsys, "export", ALICE, "--root", str(root), "-o", str(target))
    assert status == 0 and "25 messages of 2 conversations" in err
    kinds = [json.loads(line)["type"] for line in target.read_text().splitlines()]
    assert kinds.count("conversation") == 2
    other = tmp_path / "other"
    args = ("import", "dave@localhost", str(target), "--root", str(other), "--embedder", "hashing")
    added = run_json(capsys, *args)
    assert added["messages_added"] == 25 and added["memories_added"] == 1
    assert run_json(capsys, *args)["messages_added"] == 0
    listed = run_json(capsys, "history", "dave@localhost", "--root", str(other))
    assert sorted((c["conversation_id"], c["messages"]) for c in listed) == [
        ("conv-bob", 24),
        ("conv-carol", 1),
    ]
