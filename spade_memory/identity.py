"""Agent identity: bare-JID normalisation, collision-free file stems, path containment.

Storage is keyed by the normalised bare JID (``local@domain``, prepped by XMPP's
rules through slixmpp; the resource never reaches a path). The file stem is a
readable slug of it plus a hash of the whole normalised JID, so ``a_b@c``,
``a@b_c`` and ``a@b/c`` never share a file, while ``Alice@Example.com/phone`` and
``alice@example.com`` always do.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InvalidAgentId, PathEscapeError
from .limits import LIMITS

__all__ = [
    "MAX_JID_CHARS",
    "AgentIdentity",
    "conversation_id_for",
    "normalize_jid",
    "resolve_inside",
    "storage_stem",
    "thread_conversation_id",
]

MAX_JID_CHARS = LIMITS.jid_chars
"""The longest JID text accepted: three parts of at most 1,023 each and two separators."""

# A bare JID that XMPP's preparation leaves as it is: lower-case ASCII letters,
# digits and ``._-`` before the ``@``, DNS labels (no ``--``) after it. Recognised without
# loading slixmpp (its whole XMPP stack comes with its JID class).
_PLAIN_BARE = re.compile(
    r"[a-z0-9._-]{1,1023}@(?=.{1,253}\Z)(?!.*--)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
    r"(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
)

_SLUG_KEEP = re.compile(r"[^a-z0-9]+")
_SLUG_MAX = 40
_HASH_CHARS = 16


def normalize_jid(jid: Any) -> str:
    """Return the normalised bare JID (``local@domain``) of ``jid``.

    Args:
        jid: a string or a slixmpp/aioxmpp JID; a resource is dropped.

    Returns:
        The bare JID, prepped (case-folded, width-mapped) by XMPP's rules.

    Raises:
        InvalidAgentId: the value is not a JID with both a local part and a domain.
    """
    text = str(jid) if not isinstance(jid, str) else jid
    if not text or "\x00" in text or len(text) > MAX_JID_CHARS:
        raise InvalidAgentId(f"not a valid agent JID: {text[:80]!r} (expected local@domain)")
    if _PLAIN_BARE.fullmatch(text):
        return text
    # stringprep is not idempotent for a few characters (e.g. a parenthesised capital
    # letter folds to "(A)"): prep again until the value is stable.
    bare = _prep_bare(text)
    for _ in range(3):
        again = _prep_bare(bare)
        if again == bare:
            return bare
        bare = again
    raise InvalidAgentId(f"not a valid agent JID: {text[:80]!r} (its normal form is unstable)")


def _prep_bare(text: str) -> str:
    # imported here: slixmpp loads its whole XMPP stack, which a program that
    # only reads a memory's files (``spade-memory ls``) does not need
    from slixmpp.jid import JID, InvalidJID

    try:
        parsed = JID(text)
    except (InvalidJID, UnicodeError, ValueError) as exc:
        raise InvalidAgentId(
            f"not a valid agent JID: {text[:80]!r} ({exc}); expected local@domain"
        ) from None
    if not parsed.local or not parsed.domain:
        raise InvalidAgentId(
            f"not a valid agent JID: {text[:80]!r} (an agent JID needs local@domain)"
        )
    bare = str(parsed.bare)
    if any(ch in bare for ch in ("/", "\x00")) or bare.count("@") != 1:
        raise InvalidAgentId(f"not a valid agent JID: {text[:80]!r}")
    return bare


def storage_stem(bare_jid: str) -> str:
    """The file stem of an already normalised bare JID: ``{slug}-{hash}``."""
    slug = _SLUG_KEEP.sub("_", bare_jid.lower()).strip("_")[:_SLUG_MAX].strip("_") or "agent"
    digest = hashlib.sha256(bare_jid.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    return f"{slug}-{digest}"


def conversation_id_for(jid_a: Any, jid_b: Any) -> str:
    """A stable conversation id for two agents, the same whichever speaks first."""
    first, second = sorted((normalize_jid(jid_a), normalize_jid(jid_b)))
    digest = hashlib.sha256(f"{first}\n{second}".encode()).hexdigest()[:24]
    return f"pair-{digest}"


_THREAD_PREFIX_CHARS = 200


def thread_conversation_id(jid_a: Any, jid_b: Any, thread: str) -> str:
    """The conversation id of XMPP ``thread`` between two agents.

    A thread id is chosen by whoever sends, so it is bound to both agents: another
    sender reusing the same thread gets another conversation. The id starts with
    the thread (its first 200 characters) for readability, then a digest of the
    two bare JIDs and the whole thread.
    """
    first, second = sorted((normalize_jid(jid_a), normalize_jid(jid_b)))
    digest = hashlib.sha256(f"{first}\n{second}\n{thread}".encode()).hexdigest()[:16]
    return f"{thread[:_THREAD_PREFIX_CHARS]}~{digest}"


def resolve_inside(root: Path, name: str) -> Path:
    """Resolve ``root / name`` and refuse it unless it stays inside ``root``.

    Symlinks are followed: a link that leads out of the root is refused, and so is
    one that leads to another file of the root (another agent's, say).

    Raises:
        PathEscapeError: the resolved path is not ``name`` inside the resolved root.
    """
    if not name or "\x00" in name or "/" in name or "\\" in name or name in (".", ".."):
        raise PathEscapeError(f"refusing storage file name {name!r}")
    real_root = root.resolve()
    candidate = (real_root / name).resolve()
    if candidate.parent != real_root:
        raise PathEscapeError(
            f"storage path {candidate} leaves the memory root {real_root}; "
            "remove the symlink or choose another root"
        )
    if candidate.name != name:
        raise PathEscapeError(
            f"storage path {real_root / name} is a symlink to {candidate.name}; remove the symlink"
        )
    return candidate


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    """The normalised identity of an agent and the names of its files."""

    jid: str
    stem: str

    @classmethod
    def of(cls, jid: Any) -> AgentIdentity:
        """Normalise ``jid`` (refusing invalid ones) and derive its file stem."""
        bare = normalize_jid(jid)
        return cls(jid=bare, stem=storage_stem(bare))

    @property
    def interactions_name(self) -> str:
        return f"{self.stem}_interactions.json"

    @property
    def database_name(self) -> str:
        return f"{self.stem}_base_memory.db"

    @property
    def snapshot_name(self) -> str:
        return f"{self.stem}_base_memory.faiss"
