"""Shared pieces of the reliability battery: sizes, configs, file fingerprints, fault injection.

Imported by the battery's tests and by ``crash_child.py`` (run as a subprocess),
so it must import nothing from pytest.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import sys
import threading
import traceback
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spade_memory.config import MemoryConfig, StorageConfig
from spade_memory.embedding.hashing import HashingEmbedder

HEAVY = os.environ.get("SPADE_MEMORY_HEAVY", "") == "1"

CRASH_DIM = 32


def notes_in_files(path: Path, agent: str) -> dict[str, list[str]]:
    """The note contents an interaction file and its journal hold, by conversation."""
    from spade_memory.storage.interaction_file import open_file

    conversations, _ = open_file(path, agent)
    return {c: [n.content for n in notes] for c, notes in conversations.items()}


def sized(ci: int, heavy: int) -> int:
    """``heavy`` when ``SPADE_MEMORY_HEAVY=1``, else the CI size ``ci``."""
    return heavy if HEAVY else ci


def token(seq: int) -> str:
    """A word the tokenizer keeps whole and that appears in exactly one stored text."""
    return f"zq{seq:08d}x"


_WORDS = (
    "amber",
    "river",
    "falcon",
    "orchard",
    "lantern",
    "copper",
    "meadow",
    "harbor",
    "signal",
    "quarry",
    "willow",
    "ember",
    "granite",
    "velvet",
    "summit",
    "thistle",
    "cobalt",
    "prairie",
    "beacon",
    "saffron",
)


def memory_text(seq: int) -> str:
    """The content of the memory numbered ``seq`` (deterministic, holds ``token(seq)``)."""
    words = " ".join(_WORDS[(seq * 7 + i * 3) % len(_WORDS)] for i in range(6))
    return f"record {token(seq)} says {words} number {seq}"


def note_text(seq: int) -> str:
    """The content of the interaction note numbered ``seq``."""
    return f"note {token(seq)} about the {_WORDS[seq % len(_WORDS)]} plan"


def crash_config(
    root: Path, *, snapshot_min_changes: int = 64, synchronous: str = "NORMAL"
) -> MemoryConfig:
    """A file memory whose FAISS snapshot is rewritten often (crash and disk-full tests).

    ``synchronous="NORMAL"`` survives the death of the process (the crash tests kill
    processes, they do not cut the power) and keeps the CI run fast; heavy runs
    use the default ``"FULL"``.
    """
    return MemoryConfig(
        root=root,
        embedder=HashingEmbedder(dim=CRASH_DIM),
        storage=StorageConfig(
            synchronous=synchronous,  # type: ignore[arg-type]
            snapshot_min_changes=snapshot_min_changes,
            snapshot_debounce_seconds=0,
            snapshot_growth_ratio=0,
            embed_batch_size=16,
        ),
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_states(root: Path, names: Iterable[str] | None = None) -> dict[str, tuple[int, str]]:
    """``{name: (mtime_ns, sha256)}`` of the files in ``root`` (``-shm`` files excluded).

    A ``-shm`` file is SQLite's shared-memory index; readers write to it, so it
    says nothing about what was stored.
    """
    wanted = set(names) if names is not None else None
    states: dict[str, tuple[int, str]] = {}
    for entry in sorted(root.iterdir()):
        if not entry.is_file() or entry.name.endswith("-shm"):
            continue
        if wanted is not None and entry.name not in wanted:
            continue
        states[entry.name] = (entry.stat().st_mtime_ns, digest(entry))
    return states


# -- fault injection into spade_memory.storage.files -----------------------------------


@dataclass
class FileOps:
    """Stands in for the ``os`` module inside ``spade_memory.storage.files``.

    Every attribute is the real ``os`` one, except ``open``, ``write``, ``fsync`` and
    ``replace``, which go through :meth:`hook` first. Subclasses decide what a
    hook does (fail, pause); ``paths`` maps open descriptors to their paths, so a
    hook knows which file a ``write`` or ``fsync`` is for.
    """

    paths: dict[int, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def hook(self, op: str, path: str, proceed: Callable[[], Any]) -> Any:
        return proceed()

    def open(self, path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
        fd = os.open(path, flags, mode, *args, **kwargs)
        with self.lock:
            self.paths[fd] = os.fspath(path)
        return fd

    def close(self, fd: int) -> None:
        with self.lock:
            self.paths.pop(fd, None)
        os.close(fd)

    def write(self, fd: int, data: Any) -> int:
        return int(self.hook("write", self.paths.get(fd, ""), lambda: os.write(fd, data)))

    def fsync(self, fd: int) -> None:
        self.hook("fsync", self.paths.get(fd, ""), lambda: os.fsync(fd))

    def replace(self, src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        self.hook("replace", os.fspath(dst), lambda: os.replace(src, dst, *args, **kwargs))


class FailingFileOps(FileOps):
    """Fails the ``k``-th call of ``op`` (on files whose path ``matches``) with ``error``.

    Once ``persistent``, every later matching call fails too, until :meth:`heal`.
    """

    def __init__(
        self,
        op: str,
        k: int,
        *,
        error: int = errno.ENOSPC,
        persistent: bool = False,
        matches: Callable[[str], bool] = lambda path: True,
    ) -> None:
        super().__init__()
        self.op = op
        self.k = k
        self.error = error
        self.persistent = persistent
        self.matches = matches
        self.seen = 0
        self.failures = 0
        self.healed = False

    def heal(self) -> None:
        """Space came back: no call fails any more."""
        self.healed = True

    def hook(self, op: str, path: str, proceed: Callable[[], Any]) -> Any:
        if op == self.op and not self.healed and self.matches(path):
            with self.lock:
                self.seen += 1
                fail = self.seen == self.k or (self.persistent and self.seen >= self.k)
                if fail:
                    self.failures += 1
            if fail:
                raise OSError(self.error, os.strerror(self.error), path)
        return proceed()


def fork_run(
    work: Callable[[dict[str, Any]], Coroutine[Any, Any, None]], spec: dict[str, Any]
) -> int:
    """Fork a child that runs ``work(spec)`` in its own event loop; the child's pid.

    The child exits 0 when the work ends, 1 (after printing the traceback) when it
    raises; it never returns into the caller's code.
    """
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        asyncio.run(work(spec))
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
