"""The exceptions spade_memory raises, as one tree.

```
SpadeMemoryError
├── ConfigError                 a MemoryConfig value is out of range or contradictory
├── InvalidAgentId              a JID that fails normalisation; nothing was touched
├── PathEscapeError             a path would leave the memory root (e.g. a symlink out)
├── InvalidToolInput            a tool or API call with bad arguments; nothing was written
├── MemoryNotFound              no memory with that id (or uid) for this agent
├── ScopeDenied                 the memory is visible to the asker, but not theirs to change
├── StoreClosedError            the store or manager was closed and refuses further use
├── StorageError                the storage layer failed (I/O, SQLite, FAISS)
│   ├── StorageCorrupted        a file failed to load; it was quarantined, not replaced
│   │   └── MemoryLost          an agent's memory is gone and was not restored; nothing opened
│   └── MigrationError          a schema migration failed; the backup was restored
├── BudgetExceeded              a per-request tool budget (calls, time, output) ran out
├── LLMError                    the LLM endpoint failed or answered something unusable
│   └── FormationFailed         an LLM formed no usable memories from a window; rules did
├── EmbeddingError              an embedding endpoint answered something unusable
│   └── EmbeddingUnavailable    it did not answer (down, rate limited, refused): try later
├── XMPPServerError             the embedded XMPP server could not start
├── AskFailed                   an ask() got no answer: the message bounced, the agent stopped
└── SharingError                asking or sharing another agent's memory failed
    ├── SharingRefused          the other agent refused (not allowed, rate limit)
    ├── SharingTimeout          no answer in time (no such agent, offline, not sharing)
    └── ProtocolError           a memory-sharing message broke the protocol
```

Every message says what was wrong and, where there is one, what to do about it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "AskFailed",
    "BudgetExceeded",
    "ConfigError",
    "EmbeddingError",
    "EmbeddingUnavailable",
    "FormationFailed",
    "InvalidAgentId",
    "InvalidToolInput",
    "LLMError",
    "MemoryLost",
    "MemoryNotFound",
    "MigrationError",
    "PathEscapeError",
    "ProtocolError",
    "ScopeDenied",
    "SharingError",
    "SharingRefused",
    "SharingTimeout",
    "SpadeMemoryError",
    "StorageCorrupted",
    "StorageError",
    "StoreClosedError",
    "XMPPServerError",
]


class SpadeMemoryError(Exception):
    """Base class of every error raised by spade_memory."""


class ConfigError(SpadeMemoryError, ValueError):
    """A configuration value is out of range or contradicts another."""


class InvalidAgentId(SpadeMemoryError, ValueError):
    """A JID could not be normalised to a bare ``local@domain`` id."""


class PathEscapeError(SpadeMemoryError):
    """A storage path would resolve outside the memory root."""


class InvalidToolInput(SpadeMemoryError, ValueError):
    """Arguments to a tool or API call are invalid; nothing was written."""


class MemoryNotFound(SpadeMemoryError, LookupError):
    """No memory with the given id exists for this agent."""


class ScopeDenied(SpadeMemoryError, PermissionError):
    """A conversation partner asked to change a memory it may see but does not own."""


class StoreClosedError(SpadeMemoryError):
    """The store was closed; open a new one instead of reusing it."""


class StorageError(SpadeMemoryError):
    """The storage layer failed; the previous state is intact."""


class StorageCorrupted(StorageError):
    """A stored file could not be read; it was moved aside, never replaced.

    Attributes:
        path: the damaged file as it was found.
        quarantined_to: where the damaged file was moved, if it was moved.
    """

    def __init__(
        self, message: str, *, path: Path | None = None, quarantined_to: Path | None = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.quarantined_to = quarantined_to


class MemoryLost(StorageCorrupted):
    """A known agent's database or notes file is gone (deleted, or moved aside as
    damaged by an earlier open) and no backup was restored; nothing was opened.

    The message names what is gone, where the damaged copy was moved, the newest
    good backup and the command that restores it, or how to start empty instead.

    Attributes:
        backup: the newest good backup of the lost file, if there is one.
        restore_command: the ``spade-memory`` command that restores it, if there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        path: Path | None = None,
        quarantined_to: Path | None = None,
        backup: Path | None = None,
        restore_command: str | None = None,
    ) -> None:
        super().__init__(message, path=path, quarantined_to=quarantined_to)
        self.backup = backup
        self.restore_command = restore_command


class MigrationError(StorageError):
    """A schema migration failed and the database was restored from its backup."""


class BudgetExceeded(SpadeMemoryError):
    """A per-request tool budget (calls, seconds or output characters) is spent."""


class LLMError(SpadeMemoryError):
    """The LLM endpoint failed, timed out, or answered something unusable."""


class FormationFailed(LLMError):
    """An LLM asked to form memories from a window of a conversation failed, timed
    out, or answered something unusable (the message says what); the window is
    formed by rules instead."""


class EmbeddingError(SpadeMemoryError):
    """An embedding endpoint answered something unusable (wrong dimension, malformed
    vectors, a refused input); the texts stay stored and are found by keywords."""


class EmbeddingUnavailable(EmbeddingError):
    """An embedding endpoint did not answer in time, was rate limited, or refused the
    key or model; the memory embeds again later, when it answers."""


class XMPPServerError(SpadeMemoryError, RuntimeError):
    """The embedded XMPP server could not start (port taken, one already running)."""


class AskFailed(SpadeMemoryError):
    """An agent's ``ask()`` ended without an answer: the server bounced the message
    (no such agent, not reachable), or the asking agent stopped."""


class SharingError(SpadeMemoryError):
    """Asking another agent's memory, or sharing a memory with it, failed."""


class SharingRefused(SharingError):
    """The other agent refused: not allowed, a private category, or a rate limit."""


class SharingTimeout(SharingError, TimeoutError):
    """No answer in time: the agent may not exist, be offline or not share its memory."""


class ProtocolError(SharingError, ValueError):
    """A memory-sharing message is malformed; the reason says which part."""
