"""Registry: stem -> JID map of a memory root, safe across processes, self-healing."""

from __future__ import annotations

import json
import logging
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from spade_memory import MemoryConfig, MemoryManager
from spade_memory.errors import InvalidAgentId, PathEscapeError, StorageError
from spade_memory.identity import AgentIdentity
from spade_memory.storage import registry as registry_module
from spade_memory.storage.interaction import InteractionStore
from spade_memory.storage.registry import (
    REGISTRY_FORMAT,
    REGISTRY_NAME,
    REGISTRY_VERSION,
    Registry,
)

ALICE = AgentIdentity.of("alice@example.org")
BOB = AgentIdentity.of("bob@example.org")


def read_document(root: Path) -> dict[str, object]:
    document = json.loads((root / REGISTRY_NAME).read_text("utf-8"))
    assert isinstance(document, dict)
    return document


def test_registration_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    Registry(root, clock=lambda: 1234.5).register(ALICE)
    Registry(root, clock=lambda: 1234.5).register(BOB)

    fresh = Registry(root)
    assert fresh.agents() == {ALICE.stem: ALICE.jid, BOB.stem: BOB.jid}
    assert fresh.lookup("Alice@Example.org/phone") == ALICE
    assert fresh.lookup("carol@example.org") is None
    document = read_document(root)
    assert document["format"] == REGISTRY_FORMAT
    assert document["version"] == REGISTRY_VERSION
    assert document["agents"] == {
        ALICE.stem: {"jid": ALICE.jid, "created_at": 1234.5},
        BOB.stem: {"jid": BOB.jid, "created_at": 1234.5},
    }


def test_missing_root_has_no_agents(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "nowhere")
    assert registry.agents() == {}
    assert registry.lookup(ALICE.jid) is None
    assert not (tmp_path / "nowhere").exists()


def test_lookup_refuses_invalid_jids(tmp_path: Path) -> None:
    with pytest.raises(InvalidAgentId):
        Registry(tmp_path).lookup("not a jid")


def test_registration_is_idempotent(tmp_path: Path) -> None:
    ticks = iter([10.0, 20.0, 30.0])
    registry = Registry(tmp_path, clock=lambda: next(ticks))
    registry.register(ALICE)
    before = (tmp_path / REGISTRY_NAME).read_bytes()
    registry.register(ALICE)
    registry.register(AgentIdentity.of("ALICE@example.org/other-resource"))
    assert (tmp_path / REGISTRY_NAME).read_bytes() == before
    assert registry.agents() == {ALICE.stem: ALICE.jid}


def test_unregister_removes_only_its_own_entry(tmp_path: Path) -> None:
    registry = Registry(tmp_path, clock=lambda: 1.0)
    registry.register(ALICE)
    registry.register(BOB)
    assert registry.unregister(ALICE) is True
    assert registry.unregister(ALICE) is False
    assert Registry(tmp_path).agents() == {BOB.stem: BOB.jid}
    assert Registry(tmp_path / "nowhere").unregister(ALICE) is False
    assert not (tmp_path / "nowhere").exists()


def test_conflicting_stem_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulate a hash collision: every JID maps to the same stem.
    monkeypatch.setattr(registry_module, "storage_stem", lambda jid: "collide-0000")
    registry = Registry(tmp_path)
    registry.register(AgentIdentity(jid=ALICE.jid, stem="collide-0000"))
    with pytest.raises(StorageError) as caught:
        registry.register(AgentIdentity(jid=BOB.jid, stem="collide-0000"))
    assert ALICE.jid in str(caught.value) and BOB.jid in str(caught.value)
    assert registry.agents() == {"collide-0000": ALICE.jid}


def test_unnormalised_identity_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidAgentId, match=r"AgentIdentity\.of"):
        Registry(tmp_path).register(AgentIdentity(jid="Alice@Example.org", stem=ALICE.stem))
    with pytest.raises(InvalidAgentId):
        Registry(tmp_path).register(AgentIdentity(jid=ALICE.jid, stem=BOB.stem))
    assert not (tmp_path / REGISTRY_NAME).exists()


def _register_many(root: str, worker: int, count: int) -> None:
    registry = Registry(root)
    registry.register(AgentIdentity.of("shared@example.org"))
    for i in range(count):
        registry.register(AgentIdentity.of(f"agent{worker}-{i}@example.org"))


@pytest.mark.slow
def test_concurrent_registration_from_processes_loses_nothing(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_register_many, args=(str(tmp_path), worker, 15))
        for worker in range(4)
    ]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=60)
    assert [p.exitcode for p in workers] == [0, 0, 0, 0]
    agents = Registry(tmp_path).agents()
    expected = {f"agent{w}-{i}@example.org" for w in range(4) for i in range(15)}
    assert set(agents.values()) == expected | {"shared@example.org"}
    assert len(agents) == 61
    assert not list(tmp_path.glob(".*.tmp"))


async def _make_interaction_file(root: Path, identity: AgentIdentity) -> None:
    async with await InteractionStore.open(
        root / identity.interactions_name, agent=identity.jid
    ) as store:
        await store.add("c", "a note")  # the first note creates the file


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(b"{not json", id="not-json"),
        pytest.param(b'{"format": "something else", "version": 1, "agents": {}}', id="wrong-tag"),
        pytest.param(
            json.dumps(
                {
                    "format": REGISTRY_FORMAT,
                    "version": REGISTRY_VERSION,
                    "agents": {BOB.stem: {"jid": ALICE.jid, "created_at": 1.0}},
                }
            ).encode(),
            id="stem-does-not-match-jid",
        ),
        pytest.param(
            json.dumps(
                {"format": REGISTRY_FORMAT, "version": REGISTRY_VERSION, "agents": []}
            ).encode(),
            id="agents-not-object",
        ),
    ],
)
async def test_damaged_registry_is_quarantined_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: bytes
) -> None:
    carol = AgentIdentity.of("carol@example.org")
    registry = Registry(tmp_path)
    for identity in (ALICE, BOB, carol):
        registry.register(identity)
    await _make_interaction_file(tmp_path, ALICE)
    await _make_interaction_file(tmp_path, BOB)
    (tmp_path / carol.database_name).write_bytes(b"")  # a memory without interaction file
    (tmp_path / REGISTRY_NAME).write_bytes(damage)

    with caplog.at_level(logging.WARNING, logger="spade_memory.storage.registry"):
        agents = Registry(tmp_path).agents()

    assert agents == {ALICE.stem: ALICE.jid, BOB.stem: BOB.jid}
    quarantined = list(tmp_path.glob(f"{REGISTRY_NAME}.corrupt-*"))
    assert len(quarantined) == 1
    assert quarantined[0].read_bytes() == damage
    assert read_document(tmp_path)["format"] == REGISTRY_FORMAT
    warnings = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "rebuilt" in warnings and carol.stem in warnings

    registry.register(carol)
    assert Registry(tmp_path).lookup(carol.jid) == carol


def test_register_recovers_a_damaged_registry_too(tmp_path: Path) -> None:
    tmp_path.joinpath(REGISTRY_NAME).write_bytes(b"\x00\x01garbage")
    Registry(tmp_path).register(ALICE)
    assert Registry(tmp_path).agents() == {ALICE.stem: ALICE.jid}
    assert len(list(tmp_path.glob(f"{REGISTRY_NAME}.corrupt-*"))) == 1


def test_interaction_file_of_another_agent_is_not_trusted(tmp_path: Path) -> None:
    # The file is named for bob's stem but records alice: it cannot prove either.
    document = {"format": "spade_memory.interactions", "version": 1, "agent": ALICE.jid}
    (tmp_path / BOB.interactions_name).write_text(json.dumps(document))
    (tmp_path / REGISTRY_NAME).write_bytes(b"broken")
    assert Registry(tmp_path).agents() == {}


def test_newer_registry_version_is_refused_and_kept(tmp_path: Path) -> None:
    raw = json.dumps({"format": REGISTRY_FORMAT, "version": 99, "agents": {}}).encode()
    (tmp_path / REGISTRY_NAME).write_bytes(raw)
    with pytest.raises(StorageError, match="upgrade"):
        Registry(tmp_path).register(ALICE)
    assert (tmp_path / REGISTRY_NAME).read_bytes() == raw


def test_registry_symlinked_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    root.mkdir()
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    (root / REGISTRY_NAME).symlink_to(outside)
    with pytest.raises(PathEscapeError):
        Registry(root).register(ALICE)
    with pytest.raises(PathEscapeError):
        Registry(root).agents()
    assert outside.read_text() == "{}"


async def test_an_agent_with_a_database_but_no_notes_is_recovered(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path, embedder=None)
    async with await MemoryManager.open(ALICE.jid, config):
        pass  # no note: no interaction file, only the database
    assert not (tmp_path / ALICE.interactions_name).exists()
    (tmp_path / BOB.database_name).write_bytes(b"not a database")
    (tmp_path / REGISTRY_NAME).write_bytes(b"broken")
    assert Registry(tmp_path).agents() == {ALICE.stem: ALICE.jid}


def test_a_database_named_for_another_agent_is_not_trusted(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / BOB.database_name) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("INSERT INTO meta VALUES ('agent', ?)", (ALICE.jid,))
    db.close()
    (tmp_path / REGISTRY_NAME).write_bytes(b"broken")
    assert Registry(tmp_path).agents() == {}


@pytest.mark.parametrize(
    "entry",
    [
        {"jid": 7, "created_at": 1.0},
        {"jid": ["alice@example.org"], "created_at": 1.0},
        {"jid": "alice@example.org", "created_at": "yesterday"},
        {"jid": "alice@example.org", "created_at": True},
        {"jid": "alice@example.org", "created_at": None},
        {"jid": "alice@example.org"},
        {"jid": "\ud800@example.org", "created_at": 1.0},
        "alice@example.org",
    ],
)
def test_a_wrong_type_in_an_entry_is_damage_never_an_exception(
    tmp_path: Path, entry: object
) -> None:
    document = {
        "format": REGISTRY_FORMAT,
        "version": REGISTRY_VERSION,
        "agents": {ALICE.stem: entry},
    }
    (tmp_path / REGISTRY_NAME).write_text(json.dumps(document), "utf-8")
    assert Registry(tmp_path).agents() == {}  # nothing that proves alice is there: rebuilt empty
    assert len(list(tmp_path.glob(f"{REGISTRY_NAME}.corrupt-*"))) == 1
    Registry(tmp_path).register(ALICE)
    assert Registry(tmp_path).agents() == {ALICE.stem: ALICE.jid}


def _registry_with(agents: object, **fields: object) -> bytes:
    document = {"format": REGISTRY_FORMAT, "version": REGISTRY_VERSION, "agents": agents}
    document.update(fields)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        pytest.param(b"[1, 2]", "no format tag", id="not-an-object"),
        pytest.param(b"\xff\xfe", "not valid JSON", id="not-utf8"),
        pytest.param(_registry_with({}, version=True), "unknown format version", id="bool-version"),
        pytest.param(_registry_with({}, version=1.0), "unknown format version", id="float-version"),
        pytest.param(
            b'{"format": "spade_memory.registry", "version": 1}',
            "agents: field required",
            id="no-agents",
        ),
        pytest.param(_registry_with(None), "agents: expected an object", id="agents-null"),
        pytest.param(
            _registry_with({ALICE.stem: {"jid": ALICE.jid, "created_at": 10**400}}),
            "created_at: expected a finite number",
            id="huge-integer",
        ),
        pytest.param(
            _registry_with({ALICE.stem: {"jid": ALICE.jid, "created_at": 1.0}}).replace(
                b"1.0", b"Infinity"
            ),
            "created_at: expected a finite number",
            id="infinity",
        ),
        pytest.param(
            _registry_with({ALICE.stem: {"jid": ALICE.jid, "created_at": "1"}}),
            "created_at: expected a number, got '1' (str)",
            id="number-as-text",
        ),
        pytest.param(
            _registry_with({ALICE.stem: {"jid": 7, "created_at": 1.0}}),
            "jid: expected a string, got 7 (int)",
            id="jid-not-text",
        ),
        pytest.param(
            _registry_with({ALICE.stem: {"created_at": 1.0}}), "jid: field required", id="no-jid"
        ),
        pytest.param(
            _registry_with({BOB.stem: {"jid": ALICE.jid, "created_at": 1.0}}),
            "does not match its jid",
            id="stem-of-another-jid",
        ),
        pytest.param(
            _registry_with({"\ud800": {"jid": ALICE.jid, "created_at": 1.0}}),
            "lone surrogate",
            id="stem-not-unicode",
        ),
        pytest.param(
            _registry_with({"../escape": {"jid": ALICE.jid, "created_at": 1.0}}),
            "does not match its jid",
            id="stem-is-a-path",
        ),
    ],
)
def test_a_malformed_registry_is_refused_saying_where_and_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: bytes, reason: str
) -> None:
    (tmp_path / REGISTRY_NAME).write_bytes(damage)
    with caplog.at_level(logging.WARNING, logger="spade_memory.storage"):
        assert Registry(tmp_path).agents() == {}
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert reason in logged
    assert [p.read_bytes() for p in tmp_path.glob(f"{REGISTRY_NAME}.corrupt-*")] == [damage]


def test_a_registry_entry_may_hold_an_integer_time_and_keys_it_does_not_name(
    tmp_path: Path,
) -> None:
    entry = {"jid": ALICE.jid, "created_at": 1700000000, "note": "kept by a newer writer"}
    (tmp_path / REGISTRY_NAME).write_bytes(_registry_with({ALICE.stem: entry}, extra=[1]))
    assert Registry(tmp_path).agents() == {ALICE.stem: ALICE.jid}
    assert not list(tmp_path.glob(f"{REGISTRY_NAME}.corrupt-*"))
