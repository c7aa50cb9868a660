"""Registry group commit: registrations that arrive together share one durable write."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from spade_memory.errors import StorageError
from spade_memory.identity import AgentIdentity
from spade_memory.storage import registry as registry_module
from spade_memory.storage.registry import REGISTRY_NAME, Registry

CALLERS = 6


class HeldWrites:
    """Wraps the registry's atomic write: counts writes and holds the first one until
    ``waiting`` other callers have joined the next batch, so they must share a write."""

    def __init__(self, root: Path, waiting: int, real: Callable[..., None]) -> None:
        self.root = root
        self.waiting = waiting
        self.real = real
        self.writes: list[set[str]] = []
        self.fail: OSError | None = None
        self.lock = threading.Lock()

    def __call__(self, path: Path, data: bytes, **options: Any) -> None:
        with self.lock:
            first = not self.writes
            self.writes.append(set(json.loads(data)["agents"]))
        if first:
            committer = registry_module._committer(self.root)
            deadline = time.monotonic() + 30
            while len(committer.queue) < self.waiting:  # queued for the next write
                assert time.monotonic() < deadline, "the other callers never joined the next batch"
                time.sleep(0.001)
        elif self.fail is not None:
            raise StorageError(f"could not write {path}: {self.fail}") from self.fail
        self.real(path, data, **options)


def register_all(root: Path, identities: list[AgentIdentity]) -> list[BaseException | None]:
    def one(identity: AgentIdentity) -> BaseException | None:
        try:
            Registry(root).register(identity)
        except BaseException as exc:
            return exc
        # Acknowledged: the entry is in the file on disk already.
        document = json.loads((root / REGISTRY_NAME).read_bytes())
        assert identity.stem in document["agents"]
        return None

    with ThreadPoolExecutor(len(identities)) as pool:
        return list(pool.map(one, identities))


def identities(count: int) -> list[AgentIdentity]:
    return [AgentIdentity.of(f"agent{number}@example.org") for number in range(count)]


def test_concurrent_registrations_share_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldWrites(tmp_path, CALLERS - 1, registry_module.files.atomic_write_bytes)
    monkeypatch.setattr(registry_module.files, "atomic_write_bytes", held)
    agents = identities(CALLERS)
    assert register_all(tmp_path, agents) == [None] * CALLERS
    assert len(held.writes) == 2, held.writes
    assert len(held.writes[0]) == 1 and len(held.writes[1]) == CALLERS
    assert Registry(tmp_path).agents() == {a.stem: a.jid for a in agents}


def test_a_refused_stem_fails_only_its_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents = identities(CALLERS)
    impostor = AgentIdentity(jid="mallory@example.org", stem=agents[-1].stem)
    monkeypatch.setattr(Registry, "_check_identity", staticmethod(lambda identity: None))
    Registry(tmp_path).register(agents[-1])
    held = HeldWrites(tmp_path, CALLERS - 2, registry_module.files.atomic_write_bytes)
    monkeypatch.setattr(registry_module.files, "atomic_write_bytes", held)
    # The impostor is refused at once (the stem is registered already); the others
    # share the writes.
    outcomes = register_all(tmp_path, [*agents[:-1], impostor])
    assert outcomes[:-1] == [None] * (CALLERS - 1)
    assert isinstance(outcomes[-1], StorageError) and "mallory" in str(outcomes[-1])
    assert len(held.writes) == 2
    assert Registry(tmp_path).agents() == {a.stem: a.jid for a in agents}


def test_a_failed_write_fails_every_caller_in_its_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldWrites(tmp_path, CALLERS - 1, registry_module.files.atomic_write_bytes)
    held.fail = OSError(28, "No space left on device")
    monkeypatch.setattr(registry_module.files, "atomic_write_bytes", held)
    agents = identities(CALLERS)
    outcomes = dict(zip(agents, register_all(tmp_path, agents), strict=True))
    (first,) = [a for a in agents if a.stem in held.writes[0]]
    assert outcomes.pop(first) is None  # the first batch was written
    failed = list(outcomes.values())
    assert all(isinstance(e, StorageError) for e in failed), failed
    assert all("No space left" in str(e) for e in failed)
    assert len({id(e) for e in failed}) == len(failed), "callers share one exception object"
    assert Registry(tmp_path).agents() == {first.stem: first.jid}
    held.fail = None
    late = next(iter(outcomes))
    Registry(tmp_path).register(late)  # the registry is usable after the failure
    assert late.jid in Registry(tmp_path).agents().values()


def test_two_jids_of_one_stem_in_one_batch_refuse_only_the_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents = identities(CALLERS)
    impostor = AgentIdentity(jid="mallory@example.org", stem=agents[-1].stem)
    monkeypatch.setattr(Registry, "_check_identity", staticmethod(lambda identity: None))
    held = HeldWrites(tmp_path, CALLERS, registry_module.files.atomic_write_bytes)
    monkeypatch.setattr(registry_module.files, "atomic_write_bytes", held)
    # The first caller's write is held until all the others (the rightful owner of
    # the stem and the impostor among them) wait in one batch.
    outcomes = register_all(tmp_path, [*agents, impostor])
    assert len(held.writes) == 2 and len(held.writes[1]) == CALLERS
    contested = outcomes[-2:]
    assert sum(outcome is None for outcome in contested) == 1, contested
    winner = (agents[-1], impostor)[contested.index(None)]
    assert Registry(tmp_path).agents()[winner.stem] == winner.jid
    assert all(outcome is None for outcome in outcomes[:-2])
