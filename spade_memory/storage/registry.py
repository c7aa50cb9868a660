"""The memory root's registry: which file stem belongs to which agent.

``.memory_metadata.json`` under the memory root maps each file stem to the bare
JID it was derived from::

    {"format": "spade_memory.registry", "version": 1,
     "agents": {"alice_example_org-0123abcd...": {"jid": "alice@example.org",
                                                  "created_at": 1700000000.0}}}

A stem is a one-way function of the JID, so this file is the only way back from the
files in the root to their agents (for listing, export and the command line). Every
change is a read-modify-write under an exclusive lock on
``.memory_metadata.lock``, written atomically, so agents in several processes may
register at once. Registrations that arrive together in one process are written
together (group commit): one rewrite and one pair of disk syncs for the batch, and
each caller returns only once the write that holds its entry is durable.

A damaged registry is quarantined and rebuilt from the agent JIDs recorded inside
the ``*_interactions.json`` files and the ``*_base_memory.db`` databases, then the
backups under ``backup/`` and quarantined notes files (for agents whose database
and notes are gone). A registry that is missing from a root holding such files is
rebuilt the same way when it is first read, so that deleting it does not make a
known agent look new.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InvalidAgentId, PathEscapeError, StorageError
from ..identity import (
    AgentIdentity,
    normalize_jid,
    resolve_inside,
    storage_stem,
)
from . import files
from .batching import Pending, ThreadBatcher

__all__ = ["LOCK_NAME", "REGISTRY_FORMAT", "REGISTRY_NAME", "REGISTRY_VERSION", "Registry"]

logger = logging.getLogger(__name__)

REGISTRY_NAME = ".memory_metadata.json"
LOCK_NAME = ".memory_metadata.lock"
REGISTRY_FORMAT = "spade_memory.registry"
REGISTRY_VERSION = 1
_INTERACTIONS_SUFFIX = "_interactions.json"
_DATABASE_SUFFIX = "_base_memory.db"

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

        Blocks until the entry is durable. Threads of one process that register at
        the same time share one write (group commit).

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
        # Already there (the common case on every later open): no lock, no write.
        with contextlib.suppress(_Damaged):
            if self._known(self._read_unlocked(), identity):
                return
        _committer(self._root).submit((self, identity))

    def unregister(self, identity: AgentIdentity) -> bool:
        """Remove ``identity``'s entry (of a memory being removed); whether it was there.

        Raises:
            StorageError: the stem is registered to a different JID (left as it is),
                or the registry could not be written.
            InvalidAgentId: the identity is not a normalised one.
        """
        self._check_identity(identity)
        if not self._root.is_dir():
            return False
        with self._locked():
            entries = self._read_locked()
            if not self._known(entries, identity):
                return False
            del entries[identity.stem]
            self._write(entries)
        logger.info("unregistered agent %s (%s) in %s", identity.jid, identity.stem, self._root)
        return True

    def registered(self, identity: AgentIdentity) -> bool:
        """Whether ``identity`` is registered; reads only, unless the registry is damaged.

        A damaged registry is moved aside and rebuilt here (under its lock), as any
        other access would.

        Raises:
            StorageError: the stem is registered to a different JID, or the registry
                could not be read.
            InvalidAgentId: the identity is not a normalised one.
        """
        self._check_identity(identity)
        try:
            entries = self._read_unlocked()
        except _Damaged:
            with self._locked():
                entries = self._read_locked()
        if not entries and not os.path.lexists(self.path):
            entries = self._rebuild_missing()
        return self._known(entries, identity)

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

    def _known(self, entries: Entries, identity: AgentIdentity) -> bool:
        """Whether ``entries`` register ``identity``; raise if its stem is another's."""
        current = entries.get(identity.stem)
        if current is None:
            return False
        if current["jid"] != identity.jid:
            raise StorageError(
                f"file stem {identity.stem!r} is registered to {current['jid']!r}, not "
                f"{identity.jid!r}; the two agents cannot share the memory root "
                f"{self._root}. Give one of them another root"
            )
        return True

    def _add_all(self, identities: list[AgentIdentity]) -> dict[str, StorageError]:
        """Register ``identities`` in one locked read-modify-write.

        Returns the refusals (a stem registered to another JID) by JID; the other
        identities are durable when this returns.

        Raises:
            StorageError: the registry could not be read or written; none was added.
        """
        refused: dict[str, StorageError] = {}
        added: list[AgentIdentity] = []
        with self._locked():
            entries = self._read_locked()
            for identity in identities:
                try:
                    if self._known(entries, identity):
                        continue
                except StorageError as exc:
                    refused[identity.jid] = exc
                    continue
                entries[identity.stem] = {"jid": identity.jid, "created_at": float(self._clock())}
                added.append(identity)
            if added:
                self._write(entries)
        for identity in added:
            logger.info("registered agent %s as %s in %s", identity.jid, identity.stem, self._root)
        return refused

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

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return files.exclusive_lock(resolve_inside(self._root, LOCK_NAME), what="the registry lock")

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
            "interaction files and databases: %d agents recovered",
            path,
            reason,
            moved,
            len(entries),
        )
        return entries

    def _rebuild_missing(self) -> Entries:
        """Rebuild a registry that is gone from the files of the root (under its lock).

        A root holding no agent's files (a new root) is left without a registry,
        and without a lock file: reading takes no lock.
        """
        if not self._root.is_dir() or not self._rebuild(report=False):
            return {}
        with self._locked():
            entries = self._read_locked()
            if entries or os.path.lexists(self.path) or not self._root.is_dir():
                return entries
            entries = self._rebuild()
            if entries:
                self._write(entries)
                logger.warning(
                    "the agent registry %s was missing; rebuilt it from the interaction "
                    "files, databases and backups of %s: %d agents recovered",
                    self.path,
                    self._root,
                    len(entries),
                )
            return entries

    def _rebuild(self, *, report: bool = True) -> Entries:
        """Entries for every interaction file or database whose recorded agent matches its stem.

        ``report``: log the stems whose agent could not be recovered.

        Interaction files are read first; a database answers for a stem that has none
        (an agent that never wrote a note) or whose notes did not name its agent.
        """
        # imported here: only a damaged or missing registry is rebuilt, and reading the
        # notes files loads their document models (pydantic)
        from .backup_files import backup_folder, list_backups
        from .interaction import read_agent_of

        entries: Entries = {}
        lost: list[str] = []
        try:
            names = sorted(p.name for p in self._root.iterdir())
        except OSError as exc:
            raise StorageError(f"could not list the memory root {self._root}: {exc}") from exc
        sources: tuple[tuple[str, Callable[[Path], str | None]], ...] = (
            (_INTERACTIONS_SUFFIX, read_agent_of),
            (_DATABASE_SUFFIX, _owner_of_database),
        )
        for suffix, owner_of in sources:
            for name in names:
                if not name.endswith(suffix) or name.startswith("."):
                    continue
                stem = name[: -len(suffix)]
                if stem in entries:
                    continue
                if stem in lost:
                    lost.remove(stem)
                entry = self._recovered(name, stem, owner_of)
                if entry is None:
                    lost.append(stem)
                else:
                    entries[stem] = entry
        # An agent whose database and notes are gone may have backups (whose
        # databases record their owner) or a quarantined notes file.
        for info in list_backups(self._root):
            if info.stem in entries or info.kind == "pre-restore":
                continue
            entry = self._recovered(
                info.path.name, info.stem, _owner_of_database, backup_folder(self._root)
            )
            if entry is not None:
                entries[info.stem] = entry
                if info.stem in lost:
                    lost.remove(info.stem)
        for name in names:
            stem, _, rest = name.partition(_INTERACTIONS_SUFFIX + ".corrupt-")
            if not rest or stem in entries:
                continue
            entry = self._recovered(name, stem, read_agent_of)
            if entry is not None:
                entries[stem] = entry
        if lost and report:
            logger.warning(
                "could not recover the agent of these file stems in %s: %s",
                self._root,
                ", ".join(lost),
            )
        return entries

    def _recovered(
        self,
        name: str,
        stem: str,
        owner_of: Callable[[Path], str | None],
        folder: Path | None = None,
    ) -> dict[str, Any] | None:
        """The entry of file ``name`` (in the root, or in ``folder`` of it) if the agent
        ``owner_of`` reads from it matches ``stem``."""
        try:
            path = resolve_inside(folder or self._root, name)
        except PathEscapeError:
            return None
        recorded = owner_of(path)
        try:
            jid = normalize_jid(recorded) if recorded is not None else None
        except InvalidAgentId:
            jid = None
        if jid is None or storage_stem(jid) != stem:
            return None
        try:
            created = path.stat().st_mtime
        except OSError:
            created = float(self._clock())
        return {"jid": jid, "created_at": created}

    def _write(self, entries: Entries) -> None:
        data = _encode(entries)
        path = resolve_inside(self._root, REGISTRY_NAME)
        files.atomic_write_bytes(path, data)
        with contextlib.suppress(OSError):  # still under the lock: nobody else wrote it
            _DECODED[str(path)] = (_file_version(path.stat()), dict(entries))


def _owner_of_database(path: Path) -> str | None:
    """The normalised owner JID recorded in a memory database, or ``None`` if unreadable."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'agent'").fetchone()
    except sqlite3.Error:
        return None
    finally:
        db.close()
    if row is None or not isinstance(row[0], str):
        return None
    try:
        return normalize_jid(row[0])
    except InvalidAgentId:
        return None


_Registration = tuple[Registry, AgentIdentity]


def _write_registrations(batch: list[Pending[_Registration, None]]) -> None:
    """Write a batch of registrations; the registry that joined first writes (its
    clock stamps the batch). A refusal fails only its own caller."""
    registry = batch[0].item[0]
    refused = registry._add_all([identity for _, identity in (p.item for p in batch)])
    for pending in batch:
        refusal = refused.get(pending.item[1].jid)
        if refusal is None:
            pending.resolve(None)
        else:
            pending.fail(StorageError(str(refusal)))  # one exception per caller


_COMMITTERS: dict[str, ThreadBatcher[_Registration, None]] = {}
_COMMITTERS_LOCK = threading.Lock()


def _committer(root: Path) -> ThreadBatcher[_Registration, None]:
    """Group commit of the registrations of one memory root in this process."""
    key = os.path.abspath(root)
    with _COMMITTERS_LOCK:
        committer = _COMMITTERS.get(key)
        if committer is None:
            committer = _COMMITTERS[key] = ThreadBatcher(
                _write_registrations, what="register agents"
            )
        return committer


# The last registry decoded per path, with the file's identity at that time: opening
# many agents under one root reads the same, growing registry again and again.
_DECODED: dict[str, tuple[tuple[int, int, int, int], Entries]] = {}


def _file_version(stat: os.stat_result) -> tuple[int, int, int, int]:
    """What changes whenever the file is replaced or rewritten."""
    return (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _encode(entries: Entries) -> bytes:
    """The registry file: one agent a line, sorted by stem.

    Each line is encoded once per process and cached (entries never change once
    written): ``json.dumps`` with ``indent`` runs in pure Python, and encoding the
    whole registry again for each new agent took most of the time of opening
    1,000 agents' memories.
    """
    head = json.dumps({"format": REGISTRY_FORMAT, "version": REGISTRY_VERSION})
    lines = [
        _entry_line(stem, entries[stem]["jid"], entries[stem]["created_at"])
        for stem in sorted(entries)
    ]
    if not lines:
        return f'{head[:-1]}, "agents": {{}}}}\n'.encode()
    body = ",\n".join(lines)
    return f'{head[:-1]}, "agents": {{\n{body}\n}}}}\n'.encode()


@functools.lru_cache(maxsize=1 << 16)
def _entry_line(stem: str, jid: str, created_at: float) -> str:
    entry = json.dumps({"jid": jid, "created_at": float(created_at)}, ensure_ascii=False)
    return f" {json.dumps(stem, ensure_ascii=False)}: {entry}"


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
    """The entries of the registry file ``raw``, checked as strictly as the document
    models of the other files (:mod:`spade_memory.documents`): a value of the wrong
    type is refused, never converted; an integer is a number, a boolean is not;
    numbers are finite; text is valid Unicode. Keys the format does not name are
    ignored. Plain Python, so that reading the registry (``spade-memory ls``) does
    not load pydantic.

    Raises:
        _Damaged: the file is not a registry, saying where and why.
        StorageError: it is one of a newer format version.
    """
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
    if type(version) is not int or version != REGISTRY_VERSION:  # not True, not 1.0
        raise _Damaged(f"unknown format version {version!r}")
    if "agents" not in document:
        raise _Damaged("agents: field required")
    agents = _checked(document["agents"], dict, "agents", "an object")
    entries: Entries = {}
    for stem, entry in agents.items():
        where = f"agents[{_shown(stem, 40)}]"
        _unicode(stem, where)
        fields = _checked(entry, dict, where, "an object")
        for name in ("jid", "created_at"):
            if name not in fields:
                raise _Damaged(f"{where}.{name}: field required")
        jid = _unicode(_checked(fields["jid"], str, f"{where}.jid", "a string"), f"{where}.jid")
        created_at = _number(fields["created_at"], f"{where}.created_at")
        if not _entry_is_valid(stem, jid):
            raise _Damaged(f"entry {stem[:80]!r} does not match its jid {jid[:80]!r}")
        entries[stem] = {"jid": jid, "created_at": created_at}
    return entries


def _checked(value: Any, kind: type[Any], where: str, expected: str) -> Any:
    """``value`` if it is of ``kind``; else the registry is damaged there."""
    if not isinstance(value, kind):
        found = f"{_shown(value)} ({type(value).__name__})"
        raise _Damaged(f"{where}: expected {expected}, got {found}")
    return value


def _unicode(text: str, where: str) -> str:
    """``text`` if it can be written as UTF-8 (JSON's ``\\ud800`` escapes cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _Damaged(f"{where}: text holds a lone surrogate (invalid Unicode)") from None
    return text


def _number(value: Any, where: str) -> float:
    """``value`` as a float if it is a finite number (an integer is one, a boolean is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Damaged(f"{where}: expected a number, got {_shown(value)} ({type(value).__name__})")
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        number = math.inf
    if not math.isfinite(number):
        raise _Damaged(f"{where}: expected a finite number, got {_shown(value)}")
    return number


def _shown(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
