"""Hostile agent identities: every path stays inside the root, no two agents share a file.

A JID is normalised to a bare ``local@domain`` by XMPP's rules, or refused before
anything is touched. Here: names built to escape the root or to collide (``..``,
backslashes, percent-encoding, Windows device names, ``../../`` resources,
fullwidth letters, 300-character locals), 10,000 random JIDs over a wide alphabet,
and symlinks planted where the agent's files go.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from rel_support import file_states, sized

from spade_memory.config import MemoryConfig
from spade_memory.errors import InvalidAgentId, PathEscapeError
from spade_memory.identity import (
    AgentIdentity,
    normalize_jid,
    resolve_inside,
    storage_stem,
)
from spade_memory.manager import MemoryManager
from spade_memory.storage.registry import Registry

HOSTILE = [
    "..@localhost",
    ".@localhost",
    "...@localhost",
    "a\\b@x",
    "a\\..\\..\\b@x",
    "%2e%2e@x",
    "%2F%2E%2E@x",
    "CON@x",
    "con@x",
    "NUL@x",
    "aux.txt@x",
    "COM1@x",
    "lpt1@x",
    "alice@localhost/../../etc/passwd",
    "alice@localhost/..\\..\\windows",
    "alice@localhost/" + "../" * 50,
    "../../@x",
    "..%2f..%2f@x",
    "ａｌｉｃｅ@ｌｏｃａｌｈｏｓｔ",
    "ＡＬＩＣＥ@localhost",
    "alice@localhost",
    "Alice@LocalHost/phone",
    "a" * 300 + "@x",
    "b" * 1023 + "@x",
    "c" * 1024 + "@x",
    "a_b@c",
    "a@b_c",
    "a@b/c",
    "a.b@c",
    "a@b.c",
    "a-b@c",
    "a@b-c",
    "~root@x",
    "$HOME@x",
    "a:b@x",
    "a*b@x",
    "a?b@x",
    "a|b@x",
    ".hidden@x",
    "trailing.@x",
    "a@[::1]",
    "a@127.0.0.1",
    "\u202eevil@x",
    "a\u200d@x",
    "\u0130@x",
    "\u00df@x",
    "ss@x",
    "\U0001f110@x",
    "(a)@x",
    "\u2460@x",
    "1@x",
    "@x",
    "x@",
    "",
    "a\x00b@x",
    "a/b@x",
    "a b@x",
    "a@ex ample",
    "a@-x",
    "\x7f@x",
]

RANDOM_JIDS = sized(10_000, 100_000)

_ALPHABET = (
    [chr(c) for c in range(0x21, 0x7F)]  # printable ASCII, path characters included
    + [chr(c) for c in range(0xA1, 0x180)]  # Latin-1 and Latin Extended-A
    + [chr(c) for c in range(0xFF01, 0xFF5F)]  # fullwidth forms
    + list("αβγΣΩжщЯ中文字機密한국어ひらがなカタカナ")
    + ["\u0301", "\u0308", "\u200b", "\u200d", "\u202e", "\u2028", "\ufeff", "\u00ad"]
    + ["\U0001f600", "\U0001f110", "\u2460", "\u2126", "\u212a", "\ufb01", "\u1e9e"]
    + ["\x00", "\x01", "\t", "\n", " ", "/", "\\", ".", "..", "%2e", "@"]
)


def random_jid(rng: random.Random) -> str:
    def part(low: int, high: int) -> str:
        return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(low, high)))

    shape = rng.random()
    if shape < 0.7:
        return f"{part(1, 12)}@{rng.choice(['localhost', 'example.org', part(1, 8)])}"
    if shape < 0.85:
        return f"{part(1, 12)}@localhost/{part(0, 12)}"
    if shape < 0.95:
        return part(1, 20)
    return f"{'x' * rng.randint(200, 1100)}@localhost"


def check_identity(root: Path, identity: AgentIdentity, stems: dict[str, str]) -> None:
    """The identity's files resolve inside ``root`` and belong to it alone."""
    bare = identity.jid
    assert normalize_jid(bare) == bare, f"{bare!r} is not its own normal form"
    assert identity.stem == storage_stem(bare)
    for name in (identity.database_name, identity.interactions_name, identity.snapshot_name):
        assert len(name.encode("utf-8")) <= 255, f"file name too long for {bare!r}"
        assert not name.startswith("."), name
        path = resolve_inside(root, name)
        assert path.parent == root.resolve() and path.name == name
    folded = identity.stem.lower()  # case-insensitive file systems too
    owner = stems.setdefault(folded, bare)
    assert owner == bare, f"{bare!r} and {owner!r} would share the files {identity.stem}"


@pytest.mark.slow
def test_ten_thousand_random_jids_stay_inside_and_never_collide(tmp_path: Path) -> None:
    rng = random.Random(1234)
    stems: dict[str, str] = {}
    accepted = refused = 0
    for _ in range(RANDOM_JIDS):
        jid = random_jid(rng)
        try:
            identity = AgentIdentity.of(jid)
        except InvalidAgentId as exc:
            refused += 1
            assert str(exc), jid
            continue
        accepted += 1
        assert "/" not in identity.jid and "\x00" not in identity.jid
        check_identity(tmp_path, identity, stems)
    assert accepted > RANDOM_JIDS // 4 and refused > 0, (accepted, refused)
    assert list(tmp_path.iterdir()) == [], "checking identities touched the disk"


@pytest.mark.slow
async def test_hostile_jids_open_inside_the_root_or_are_refused_untouched(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    config = MemoryConfig(root=root, embedder=None)
    stems: dict[str, str] = {}
    opened: dict[str, set[str]] = {}  # bare JID -> the contents stored under it
    for index, jid in enumerate(HOSTILE):
        before = file_states(root) if root.exists() else None
        try:
            manager = await MemoryManager.open(jid, config)
        except InvalidAgentId:
            after = file_states(root) if root.exists() else None
            assert after == before, f"refusing {jid!r} touched the root"
            continue
        async with manager:
            check_identity(root, manager.identity, stems)
            content = f"memory number {index}"
            await manager.store(content)
            await manager.add_note("conv", content)
            mine = opened.setdefault(manager.jid, set())
            mine.add(content)  # one bare JID (however spelt) is one memory, on purpose
            assert {m.content for m in await manager.list(limit=100)} == mine
            assert {n.content for n in await manager.notes("conv")} == mine
    # nothing outside the root, every file named for a registered agent
    outside = [p for p in tmp_path.rglob("*") if root not in p.parents and p != root]
    assert outside == [], outside
    registered = Registry(root).agents()
    assert set(registered.values()) == set(opened)
    for entry in root.iterdir():
        if entry.name.startswith(".") or entry.name == "backup":
            continue
        assert any(entry.name.startswith(stem) for stem in registered), entry.name
    assert (
        len({normalize_jid("ａｌｉｃｅ@ｌｏｃａｌｈｏｓｔ"), normalize_jid("alice@localhost")}) == 1
    )
    assert {"a_b@c", "a@b_c"} <= set(opened), "distinct bare JIDs were merged"


@pytest.mark.parametrize(
    "target",
    ["database", "wal", "interactions", "snapshot", "registry", "backup", "interactions-lock"],
)
@pytest.mark.parametrize("where", ["outside", "another-agent"])
async def test_symlinks_planted_in_the_root_are_refused(
    tmp_path: Path, target: str, where: str
) -> None:
    root = tmp_path / "memory"
    config = MemoryConfig(root=root, embedder="hashing")
    async with await MemoryManager.open("bob@localhost", config) as bob:
        await bob.store("bob's own memory")
        await bob.add_note("conv", "bob's own note")
        await bob.flush()
    victim = AgentIdentity.of("victim@localhost")
    bob_identity = AgentIdentity.of("bob@localhost")
    names = {
        "database": (victim.database_name, bob_identity.database_name),
        "wal": (victim.database_name + "-wal", bob_identity.database_name + "-wal"),
        "interactions": (victim.interactions_name, bob_identity.interactions_name),
        "snapshot": (victim.snapshot_name, bob_identity.snapshot_name),
        "registry": (".memory_metadata.json", bob_identity.interactions_name),
        "backup": ("backup", bob_identity.database_name),
        "interactions-lock": (
            f".{victim.interactions_name}.lock",
            f".{bob_identity.interactions_name}.lock",
        ),
    }
    name, bob_name = names[target]
    if where == "outside":
        outside = tmp_path / "outside"
        outside.mkdir()
        aim = outside / ("dir" if target == "backup" else "file")
        if target == "backup":
            aim.mkdir()
        else:
            aim.write_bytes(b"precious data outside the memory root")
    else:
        aim = root / bob_name
    link = root / name
    if link.exists() or link.is_symlink():
        link.unlink()
    os.symlink(aim, link)
    watched = tmp_path if where == "outside" else root
    before = {
        p: (p.read_bytes() if p.is_file() else None)
        for p in watched.rglob("*")
        if p != link and "victim" not in p.name and not p.name.endswith("-shm")
    }
    with pytest.raises(PathEscapeError) as refused:
        await MemoryManager.open("victim@localhost", config)
    assert "symlink" in str(refused.value)
    after = {
        p: (p.read_bytes() if p.is_file() else None)
        for p in watched.rglob("*")
        if p != link and "victim" not in p.name and not p.name.endswith("-shm")
    }
    changed = [str(p) for p in before if before[p] != after.get(p)]
    assert changed == [], f"files reached through the symlink changed: {changed}"
    link.unlink()  # a root-wide link (registry, backup) refuses every agent until removed
    async with await MemoryManager.open("bob@localhost", config) as bob:
        assert [m.content for m in await bob.list()] == ["bob's own memory"]
        assert [n.content for n in await bob.notes("conv")] == ["bob's own note"]
