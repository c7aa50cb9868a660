"""Export and import carry scopes; an export made before scopes imports as global."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spade_memory import InvalidToolInput, MemoryConfig, MemoryManager, Scope, Viewer

ALICE, BOB = "alice@x.org", "bob@x.org"


async def test_scopes_round_trip(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None)
    async with await MemoryManager.open("one@x.org", config) as source:
        await source.store("global fact")
        await source.store("private fact", scope=Scope.private(ALICE))
        await source.store("shared fact", scope=Scope.shared(ALICE, [BOB]))
        await source.store("talk fact", scope=Scope.conversation(BOB), source_conversation="c1")
        exported = await source.export()
    scopes = {m["content"]: m["scope"] for m in exported["memories"]}
    assert scopes["shared fact"] == {"owner": ALICE, "visibility": "shared", "shared_with": [BOB]}
    async with await MemoryManager.open("two@x.org", config) as target:
        assert await target.import_data(exported) == (4, 0)
        assert await target.import_data(exported) == (0, 0)
        imported = {m.content: m.scope for m in await target.list()}
        assert imported == {
            "global fact": Scope(),
            "private fact": Scope.private(ALICE),
            "shared fact": Scope.shared(ALICE, [BOB]),
            "talk fact": Scope.conversation(BOB),
        }
        seen = {m.content for m in await target.list(viewer=Viewer(jid=BOB))}
        assert seen == {"global fact", "shared fact"}


async def test_an_export_without_scopes_imports_as_global(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None)
    old: dict[str, Any] = {
        "format": "spade_memory.export",
        "version": 1,
        "agent": "old@x.org",
        "memories": [{"uid": "a" * 32, "content": "an old memory", "category": "fact"}],
        "notes": {},
    }
    async with await MemoryManager.open("two@x.org", config) as target:
        assert await target.import_data(old) == (1, 0)
        (memory,) = await target.list(viewer=Viewer(jid=BOB))
        assert memory.scope == Scope()
        bad = {**old, "memories": [{"content": "x", "scope": {"visibility": "private"}}]}
        with pytest.raises(InvalidToolInput, match="private memory needs an owner"):
            await target.import_data(bad)
        bad = {**old, "memories": [{"content": "x", "scope": {"visibility": "everyone"}}]}
        with pytest.raises(InvalidToolInput, match="visibility"):
            await target.import_data(bad)
        assert len(await target.list()) == 1


async def test_an_import_normalises_a_sender_and_keeps_one_that_is_no_jid(
    tmp_path: Path,
) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None)
    export: dict[str, Any] = {
        "format": "spade_memory.export",
        "version": 2,
        "agent": "old@x.org",
        "memories": [
            {"content": "told from a phone", "source_sender": "Alice@X.org/phone"},
            # earlier versions stored any text as the sender: it comes back as it was
            {"content": "told by a name", "source_sender": "Ann"},
        ],
        "notes": {},
    }
    async with await MemoryManager.open("two@x.org", config) as target:
        assert await target.import_data(export) == (2, 0)
        senders = {m.content: m.source_sender for m in await target.list()}
        assert senders == {"told from a phone": ALICE, "told by a name": "Ann"}


async def test_copies_within_an_export_stay_apart_and_an_archived_one_is_no_copy(
    tmp_path: Path,
) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None)
    async with await MemoryManager.open("one@x.org", config) as source:
        closed = await source.store("The Porto office opens at 9")
        await source.archive(closed.id)
        await source.store("The Porto office opens at 9")
        await source.store("Bob likes tea")
        await source.store("Bob likes tea", dedupe=False)
        exported = await source.export()
    kept = sorted((m["content"], m["status"], m["access_count"]) for m in exported["memories"])
    async with await MemoryManager.open("two@x.org", config) as target:
        assert await target.import_data(exported) == (4, 0)
        assert await target.import_data(exported) == (0, 0)
        found = await target.list(status=None, limit=50)
        assert sorted((m.content, m.status, m.access_count) for m in found) == kept
        # a copy of a memory held before the import still reinforces it
        told = await target.store("A fact held here")
        copy = {**exported["memories"][0], "uid": "n" * 32, "content": "A fact held here"}
        copy["status"] = "active"
        assert await target.import_data({**exported, "memories": [copy]}) == (0, 0)
        assert (await target.get(told.id)).access_count == 1
