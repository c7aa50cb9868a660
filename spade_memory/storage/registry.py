"""The memory root's registry: which file stem belongs to which agent.

``.memory_metadata.json`` under the memory root maps each file stem to the bare
JID it was derived from::

    {"format": "spade_memory.registry", "version": 1,
     "agents": {"alice_example_org-0123abcd...": {"jid": "alice@example.org",
                                                  "created_at": 1700000000.0}}}

A stem is a one-way function of the JID, so this file is the only way back from the
files in the root to their agents (for listing, export and the command line). Every
change is a read-modify-write under an exclusive ``flock`` on
``.memory_metadata.lock``, written atomically, so agents in several processes may
register at once. A damaged registry is quarantined and rebuilt from the agent JIDs
recorded inside the ``*_interactions.json`` files.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import InvalidAgentId, PathEscapeError, StorageError
from ..identity import AgentIdentity, normalize_jid, resolve_inside, storage_stem
from . import files
from .interaction import read_agent_of

__all__ = ["LOCK_NAME", "REGISTRY_FORMAT", "REGISTRY_NAME", "REGISTRY_VERSION", "Registry"]

logger = logging.getLogger(__name__)

REGISTRY_NAME = ".memory_metadata.json"
LOCK_NAME = ".memory_metadata.lock"
REGISTRY_FORMAT = "spade_memory.registry"
REGISTRY_VERSION = 1
_INTERACTIONS_SUFFIX = "_interactions.json"

Entries = dict[str, dict[str, Any]]


class _Damaged(Exception):
    """The registry file cannot be used; the message says why."""


class Registry:
    """The stem → JID registry of one memory root.

    Args:
        root: the memory root folder (created on the first registration).
        clock: the time source of ``created_at``.
    """

    def __init__(self, root: Path | str, *, clock: Callable[[], float] = time.time) -> None:
        self._root = Path(root).expanduser()
        self._clock = clock

    @property
    def root(self) -> Path:
        return self._root

    @property
    def path(self) -> Path:
        """The registry file."""
        return self._root / REGISTRY_NAME

    def register(self, identity: AgentIdentity) -> None:
        """Record that ``identity.stem`` belongs to ``identity.jid``; idempotent.

        Raises:
            StorageError: the stem is already registered to a different JID, or the
                registry could not be written.
            InvalidAgentId: the identity is not a normalised one.
        """
        self._check_identity(identity)
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"could not create the memory root {self._root}: {exc}") from exc
        with self._locked():
            entries = self._read_locked()
            current = entries.get(identity.stem)
            if current is not None:
                if current["jid"] != identity.jid:
                    raise StorageError(
                        f"file stem {identity.stem!r} is registered to {current['jid']!r}, not "
                        f"{identity.jid!r}; the two agents cannot share the memory root "
                        f"{self._root}. Give one of them another root"
                    )
                return
            entries[identity.stem] = {"jid": identity.jid, "created_at": float(self._clock())}
            self._write(entries)
        logger.info("registered agent %s as %s in %s", identity.jid, identity.stem, self._root)

    def agents(self) -> dict[str, str]:
        """Every registered agent: ``{stem: bare JID}``."""
        try:
            entries = self._read_unlocked()
        except _Damaged:
            with self._locked():
                entries = self._read_locked()
        return {stem: str(entry["jid"]) for stem, entry in sorted(entries.items())}

    def lookup(self, jid: Any) -> AgentIdentity | None:
        """The registered identity of ``jid``, or ``None`` if it is not registered.

        Raises:
            InvalidAgentId: ``jid`` is not a valid JID.
        """
        identity = AgentIdentity.of(jid)
        return identity if self.agents().get(identity.stem) == identity.jid else None

    # -- internals -------------------------------------------------------------------

    @staticmethod
    def _check_identity(identity: AgentIdentity) -> None:
        if not isinstance(identity, AgentIdentity):
            raise InvalidAgentId(f"expected an AgentIdentity, got {type(identity).__name__}")
        if normalize_jid(identity.jid) != identity.jid or storage_stem(identity.jid) != (
            identity.stem
        ):
            raise InvalidAgentId(
                f"identity {identity!r} is not normalised; build it with AgentIdentity.of(jid)"
            )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock_path = resolve_inside(self._root, LOCK_NAME)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StorageError(f"could not open the registry lock {lock_path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read_unlocked(self) -> Entries:
        """Read the registry; raise ``_Damaged`` if it is damaged (caller takes the lock)."""
        path = resolve_inside(self._root, REGISTRY_NAME)
        try:
            with open(path, "rb") as handle:
                version = _file_version(os.fstat(handle.fileno()))
                known = _DECODED.get(str(path))
                if known is not None and known[0] == version:
                    return dict(known[1])  # unchanged since decoded (entries never mutate)
                raw = handle.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StorageError(f"could not read the agent registry {path}: {exc}") from exc
        entries = _decode(raw, path)
        _DECODED[str(path)] = (version, dict(entries))
        return entries

    def _read_locked(self) -> Entries:
        """Read the registry under the lock, recovering it if it is damaged."""
        try:
            return self._read_unlocked()
        except _Damaged as exc:
            return self._recover(str(exc))

    def _recover(self, reason: str) -> Entries:
        path = resolve_inside(self._root, REGISTRY_NAME)
        try:
            moved = files.quarantine(path, reason)
        except OSError as exc:
            raise StorageError(
                f"the agent registry {path} is damaged ({reason}) and could not be moved "
                f"aside ({exc}); move it away by hand"
            ) from exc
        entries = self._rebuild()
        self._write(entries)
        logger.warning(
            "the agent registry %s was damaged (%s); moved it to %s and rebuilt it from the "
            "interaction files: %d agents recovered",
            path,
            reason,
            moved,
            len(entries),
        )
        return entries

    def _rebuild(self) -> Entries:
        """Entries for every interaction file whose recorded agent matches its stem."""
        entries: Entries = {}
        lost: list[str] = []
        try:
            names = sorted(p.name for p in self._root.iterdir())
        except OSError as exc:
            raise StorageError(f"could not list the memory root {self._root}: {exc}") from exc
        for name in names:
            if not name.endswith(_INTERACTIONS_SUFFIX) or name.startswith("."):
                continue
            stem = name[: -len(_INTERACTIONS_SUFFIX)]
            try:
                path = resolve_inside(self._root, name)
            except PathEscapeError:
                lost.append(stem)
                continue
            recorded = read_agent_of(path)
            try:
                jid = normalize_jid(recorded) if recorded is not None else None
            except InvalidAgentId:
                jid = None
            if jid is None or storage_stem(jid) != stem:
                lost.append(stem)
                continue
            try:
                created = path.stat().st_mtime
            except OSError:
                created = float(self._clock())
            entries[stem] = {"jid": jid, "created_at": created}
        for name in names:
            if name.endswith("_base_memory.db"):
                stem = name[: -len("_base_memory.db")]
                if stem not in entries and stem not in lost:
                    lost.append(stem)
        if lost:
            logger.warning(
                "could not recover the agent of these file stems in %s: %s",
                self._root,
                ", ".join(lost),
            )
        return entries

    def _write(self, entries: Entries) -> None:
        document = {
            "format": REGISTRY_FORMAT,
            "version": REGISTRY_VERSION,
            "agents": {stem: entries[stem] for stem in sorted(entries)},
        }
        data = json.dumps(document, ensure_ascii=False, indent=1).encode("utf-8")
        path = resolve_inside(self._root, REGISTRY_NAME)
        files.atomic_write_bytes(path, data)
        with contextlib.suppress(OSError):  # still under the lock: nobody else wrote it
            _DECODED[str(path)] = (_file_version(path.stat()), dict(entries))


# The last registry decoded per path, with the file's identity at that time: opening
# many agents under one root reads the same, growing registry again and again.
_DECODED: dict[str, tuple[tuple[int, int, int, int], Entries]] = {}


def _file_version(stat: os.stat_result) -> tuple[int, int, int, int]:
    """What changes whenever the file is replaced or rewritten."""
    return (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=1 << 16)
def _entry_is_valid(stem: str, jid: str) -> bool:
    """Whether ``jid`` is normalised and ``stem`` is its file stem (pure, so cached).

    Every registration reads the whole registry; without the cache, checking each
    entry again (JID normalisation and hashing, ~40 µs) made opening 1,000 agents'
    memories take 74 s in the registry alone.
    """
    try:
        return normalize_jid(jid) == jid and storage_stem(jid) == stem
    except InvalidAgentId:
        return False


def _decode(raw: bytes, path: Path) -> Entries:
    try:
        document = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _Damaged(f"not valid JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != REGISTRY_FORMAT:
        raise _Damaged(f"no format tag {REGISTRY_FORMAT!r}")
    version = document.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > REGISTRY_VERSION:
        raise StorageError(
            f"the agent registry {path} has format version {version}, newer than this "
            f"spade_memory understands ({REGISTRY_VERSION}); upgrade spade_memory"
        )
    if version != REGISTRY_VERSION:
        raise _Damaged(f"unknown format version {version!r}")
    agents = document.get("agents")
    if not isinstance(agents, dict):
        raise _Damaged("'agents' is not an object")
    entries: Entries = {}
    for stem, entry in agents.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("jid"), str):
            raise _Damaged(f"entry {stem[:80]!r} has no jid")
        created = entry.get("created_at")
        if (
            isinstance(created, bool)
            or not isinstance(created, int | float)
            or not math.isfinite(created)
        ):
            raise _Damaged(f"entry {stem[:80]!r} has a bad created_at")
        jid = entry["jid"]
        if not _entry_is_valid(stem, jid):
            raise _Damaged(f"entry {stem[:80]!r} does not match its jid {jid[:80]!r}")
        entries[stem] = {"jid": jid, "created_at": float(created)}
    return entries
