"""The memory-sharing protocol: message format, building, strict parsing, bounded answers.

Every protocol message is an XMPP message with a JSON object as its body and
SPADE metadata:

- ``protocol``: :data:`QUERY_PROTOCOL` (``spade-memory/query/1``) or
  :data:`SHARE_PROTOCOL` (``spade-memory/share/1``);
- ``performative``: FIPA-ACL, see below;
- the XMPP thread: a fresh id per request, repeated by its answer;
- ``in-reply-to`` on answers: the thread again (LLM conversation behaviours drop
  messages carrying it, so an answer is never answered).

A query is ``query-ref`` with body ``{"query": str, "category": str | null,
"limit": int}``. The owner answers ``inform`` with ``{"results": [{"id", "category",
"content", "score", "truncated", "provenance"}], "truncated": bool, "omitted": int}``,
or ``refuse`` / ``failure`` with ``{"reason": str}``.

A share is ``request`` with body ``{"memory": {"id", "uid", "category", "content",
"context", "confidence", "importance", "created_at"}}``. The receiver answers
``inform`` with ``{"stored_id": int}``, or ``refuse`` / ``failure`` with a reason.

Parsing is strict: unknown keys, wrong types, NaN, duplicate keys, NUL characters
and oversized bodies are refused with a :class:`~spade_memory.errors.ProtocolError`
naming the problem; nothing else is raised for any input.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from spade.message import Message
from spade.template import Template

from ...errors import ProtocolError
from ...identity import MAX_JID_CHARS
from ...validation import JSONRejected, loads_strict

__all__ = [
    "ANSWER_PERFORMATIVES",
    "FAILURE",
    "INFORM",
    "IN_REPLY_TO",
    "MAX_BODY_CHARS",
    "MAX_QUERY_CHARS",
    "PERFORMATIVE",
    "PROTOCOL",
    "QUERY_PROTOCOL",
    "QUERY_REF",
    "REFUSE",
    "REQUEST",
    "SHARE_PROTOCOL",
    "MemoryQuery",
    "QueryAnswer",
    "SharedMemory",
    "SharedResult",
    "build_answer",
    "is_protocol_message",
    "make_answer",
    "make_request",
    "parse_answer",
    "parse_query",
    "parse_reason",
    "parse_receipt",
    "parse_shared_memory",
    "protocol_template",
    "reason_body",
    "receipt_body",
]

PROTOCOL = "protocol"
PERFORMATIVE = "performative"
IN_REPLY_TO = "in-reply-to"
QUERY_PROTOCOL = "spade-memory/query/1"
SHARE_PROTOCOL = "spade-memory/share/1"
QUERY_REF = "query-ref"
REQUEST = "request"
INFORM = "inform"
REFUSE = "refuse"
FAILURE = "failure"
ANSWER_PERFORMATIVES = frozenset({INFORM, REFUSE, FAILURE})

MAX_BODY_CHARS = 400_000
MAX_QUERY_CHARS = 1_000
MAX_LIMIT = 100
MAX_REASON_CHARS = 500
_MAX_CATEGORY_CHARS = 40
_MIN_CLIPPED_CHARS = 20


# -- messages ----------------------------------------------------------------


def protocol_template() -> Template:
    """A SPADE template matching every message of either protocol."""
    return Template(metadata={PROTOCOL: QUERY_PROTOCOL}) | Template(
        metadata={PROTOCOL: SHARE_PROTOCOL}
    )


def is_protocol_message(msg: Message) -> bool:
    """Whether ``msg`` carries the metadata of the query or share protocol."""
    return msg.get_metadata(PROTOCOL) in (QUERY_PROTOCOL, SHARE_PROTOCOL)


def make_request(to: str, protocol: str, performative: str, body: str) -> Message:
    """A new request on a fresh thread (``msg.thread`` is the id its answer repeats)."""
    thread = f"mem-{uuid.uuid4().hex}"
    msg = Message(to=to, body=body, thread=thread)
    msg.set_metadata(PROTOCOL, protocol)
    msg.set_metadata(PERFORMATIVE, performative)
    return msg


def make_answer(request: Message, performative: str, body: str) -> Message:
    """The answer to ``request``: to its sender, same protocol and thread."""
    protocol = request.get_metadata(PROTOCOL) or QUERY_PROTOCOL
    msg = Message(to=str(request.sender), body=body, thread=request.thread)
    msg.set_metadata(PROTOCOL, protocol)
    msg.set_metadata(PERFORMATIVE, performative)
    msg.set_metadata(IN_REPLY_TO, request.thread or "-")
    return msg


# -- JSON helpers ----------------------------------------------------------------


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _load_object(body: object, what: str) -> dict[str, Any]:
    if not isinstance(body, str) or not body.strip():
        raise ProtocolError(f"a {what} needs a JSON object as its body; the body is empty")
    if len(body) > MAX_BODY_CHARS:
        raise ProtocolError(
            f"the {what} body is {len(body)} characters; at most {MAX_BODY_CHARS} are accepted"
        )
    try:
        parsed = loads_strict(body)
    except JSONRejected as exc:
        raise ProtocolError(_rejection(exc, what)) from None
    if not isinstance(parsed, dict):
        raise ProtocolError(f"the {what} body must be a JSON object")
    return parsed


def _rejection(exc: JSONRejected, what: str) -> str:
    """The words of a refused body."""
    if exc.reason == "constant":
        return f"the body holds {exc.detail}, which is not a JSON number"
    if exc.reason == "duplicate":
        return f"the body gives {exc.detail!r} twice"
    if exc.reason == "depth":
        return f"the {what} body is nested too deeply"
    return f"the {what} body is not JSON ({exc.detail} at {exc.position})"


def _keys(data: Mapping[str, Any], what: str, required: set[str], optional: set[str]) -> None:
    unknown = sorted(set(data) - required - optional)
    if unknown:
        raise ProtocolError(f"the {what} has unknown fields {unknown}")
    missing = sorted(required - set(data))
    if missing:
        raise ProtocolError(f"the {what} lacks the fields {missing}")


def _text(data: Mapping[str, Any], key: str, *, limit: int, empty: bool = False) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ProtocolError(f"{key} must be a string")
    if not empty and not value.strip():
        raise ProtocolError(f"{key} must not be empty")
    if len(value) > limit:
        raise ProtocolError(f"{key} is {len(value)} characters; at most {limit} are accepted")
    if "\x00" in value:
        raise ProtocolError(f"{key} must not hold NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProtocolError(f"{key} holds invalid Unicode (a lone surrogate)") from None
    return value


def _optional_text(data: Mapping[str, Any], key: str, *, limit: int) -> str | None:
    if data.get(key) is None:
        return None
    return _text(data, key, limit=limit, empty=True)


def _integer(data: Mapping[str, Any], key: str, *, low: int, high: int) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(f"{key} must be an integer from {low} to {high}")
    return value


def _number(data: Mapping[str, Any], key: str, *, low: float, high: float) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolError(f"{key} must be a number")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise ProtocolError(f"{key} must be a number from {low:g} to {high:g}")
    return number


def _category(data: Mapping[str, Any], key: str) -> str:
    value = _text(data, key, limit=_MAX_CATEGORY_CHARS)
    if not value.isidentifier() or value != value.lower():
        raise ProtocolError(f"{key} must be a lower-case category name, got {value!r}")
    return value


# -- queries ---------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryQuery:
    """A question to another agent's memory."""

    query: str
    category: str | None = None
    limit: int = 5

    def to_body(self) -> str:
        """The JSON body; the query is checked by parsing it back."""
        body = _dumps({"query": self.query, "category": self.category, "limit": self.limit})
        parse_query(body)
        return body


def parse_query(body: object) -> MemoryQuery:
    """Read a query body strictly.

    Raises:
        ProtocolError: what is wrong with it.
    """
    data = _load_object(body, "query")
    _keys(data, "query", {"query"}, {"category", "limit"})
    query = _text(data, "query", limit=MAX_QUERY_CHARS)
    category = None if data.get("category") is None else _category(data, "category")
    limit = 5 if data.get("limit") is None else _integer(data, "limit", low=1, high=MAX_LIMIT)
    return MemoryQuery(query=query, category=category, limit=limit)


# -- answers ---------------------------------------------------------------------


@dataclass(frozen=True)
class SharedResult:
    """One memory in an answer.

    Attributes:
        id: its id in the owner's memory (use it to ask again, or to cite it).
        category, content, score: as in the owner's search.
        provenance: ``owner``, ``source_sender``, ``created_at``, ``updated_at`` and,
            for a memory the owner got from another agent, ``shared_by``.
        truncated: the content was cut to fit the owner's limits.
    """

    id: int
    category: str
    content: str
    score: float
    provenance: Mapping[str, str | float | None] = field(default_factory=dict)
    truncated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "category": self.category,
            "content": self.content,
            "score": self.score,
            "truncated": self.truncated,
            "provenance": dict(self.provenance),
        }


@dataclass(frozen=True)
class QueryAnswer:
    """The results of a query, and whether the owner left some out to stay small."""

    results: tuple[SharedResult, ...]
    truncated: bool = False
    omitted: int = 0


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(chars - 1, 0)] + "…"


def build_answer(results: Sequence[SharedResult], *, max_bytes: int, max_chars: int) -> str:
    """The ``inform`` body for ``results``, at most ``max_bytes`` of UTF-8.

    Each content is cut to ``max_chars``; results that do not fit are left out
    (the last one kept may be cut further). The body says what was cut.
    """
    envelope = len(_dumps({"results": [], "truncated": True, "omitted": 10**6}).encode())
    budget = max_bytes - envelope
    kept: list[dict[str, Any]] = []
    cut = False
    for result in results:
        if len(result.content) > max_chars:
            result = replace(result, content=_clip(result.content, max_chars), truncated=True)
        item = result.as_dict()
        size = len(_dumps(item).encode()) + 1
        chars = len(result.content)
        while size > budget and chars > _MIN_CLIPPED_CHARS:
            chars //= 2
            item = replace(result, content=_clip(result.content, chars), truncated=True).as_dict()
            size = len(_dumps(item).encode()) + 1
        if size > budget:
            break
        cut = cut or bool(item["truncated"])
        kept.append(item)
        budget -= size
    omitted = len(results) - len(kept)
    return _dumps({"results": kept, "truncated": cut or omitted > 0, "omitted": omitted})


def _provenance(value: object) -> dict[str, str | float | None]:
    if not isinstance(value, dict) or len(value) > 16:
        raise ProtocolError("provenance must be an object of at most 16 fields")
    cleaned: dict[str, str | float | None] = {}
    for key, item in value.items():
        if item is None or isinstance(item, str):
            cleaned[key] = None if item is None else _text(value, key, limit=MAX_JID_CHARS)
        else:
            cleaned[key] = _number(value, key, low=-1e18, high=1e18)
    return cleaned


def parse_answer(body: object) -> QueryAnswer:
    """Read an ``inform`` answer to a query strictly.

    Raises:
        ProtocolError: what is wrong with it.
    """
    data = _load_object(body, "answer")
    _keys(data, "answer", {"results"}, {"truncated", "omitted"})
    raw = data["results"]
    if not isinstance(raw, list) or len(raw) > MAX_LIMIT:
        raise ProtocolError(f"results must be a list of at most {MAX_LIMIT} memories")
    results: list[SharedResult] = []
    for item in raw:
        if not isinstance(item, dict):
            raise ProtocolError("each result must be an object")
        _keys(item, "result", {"id", "category", "content", "score"}, {"truncated", "provenance"})
        truncated = item.get("truncated", False)
        if not isinstance(truncated, bool):
            raise ProtocolError("a result's truncated must be true or false")
        results.append(
            SharedResult(
                id=_integer(item, "id", low=1, high=2**63 - 1),
                category=_category(item, "category"),
                content=_text(item, "content", limit=MAX_BODY_CHARS),
                score=_number(item, "score", low=-1e9, high=1e9),
                provenance=_provenance(item.get("provenance", {})),
                truncated=truncated,
            )
        )
    truncated = data.get("truncated", False)
    if not isinstance(truncated, bool):
        raise ProtocolError("truncated must be true or false")
    omitted = 0 if "omitted" not in data else _integer(data, "omitted", low=0, high=10**6)
    return QueryAnswer(results=tuple(results), truncated=truncated, omitted=omitted)


def reason_body(reason: str) -> str:
    """The body of a ``refuse`` or ``failure``."""
    return _dumps({"reason": _clip(reason, MAX_REASON_CHARS)})


def parse_reason(body: object) -> str:
    """The reason of a ``refuse`` or ``failure``, or a short note when it gives none."""
    try:
        data = _load_object(body, "reason")
        return _text(data, "reason", limit=MAX_BODY_CHARS)[:MAX_REASON_CHARS]
    except ProtocolError:
        return "no reason given"


# -- shares ----------------------------------------------------------------------


@dataclass(frozen=True)
class SharedMemory:
    """One memory sent to another agent, as the sender has it."""

    id: int
    uid: str
    category: str
    content: str
    context: str | None
    confidence: float
    importance: float
    created_at: float

    def to_body(self) -> str:
        """The JSON body of the ``request``."""
        return _dumps(
            {
                "memory": {
                    "id": self.id,
                    "uid": self.uid,
                    "category": self.category,
                    "content": self.content,
                    "context": self.context,
                    "confidence": self.confidence,
                    "importance": self.importance,
                    "created_at": self.created_at,
                }
            }
        )


def parse_shared_memory(body: object, *, max_content_chars: int) -> SharedMemory:
    """Read a share body strictly; content longer than ``max_content_chars`` is refused.

    Raises:
        ProtocolError: what is wrong with it.
    """
    data = _load_object(body, "share")
    _keys(data, "share", {"memory"}, set())
    memory = data["memory"]
    if not isinstance(memory, dict):
        raise ProtocolError("memory must be an object")
    _keys(
        memory,
        "shared memory",
        {"id", "uid", "category", "content", "created_at"},
        {"context", "confidence", "importance"},
    )
    return SharedMemory(
        id=_integer(memory, "id", low=1, high=2**63 - 1),
        uid=_text(memory, "uid", limit=64),
        category=_category(memory, "category"),
        content=_text(memory, "content", limit=max_content_chars),
        context=_optional_text(memory, "context", limit=max_content_chars),
        confidence=_optional_unit(memory, "confidence", 1.0),
        importance=_optional_unit(memory, "importance", 0.5),
        created_at=_number(memory, "created_at", low=0, high=1e11),
    )


def _optional_unit(data: Mapping[str, Any], key: str, default: float) -> float:
    if data.get(key) is None:
        return default
    return _number(data, key, low=0.0, high=1.0)


def receipt_body(stored_id: int) -> str:
    """The ``inform`` body acknowledging a share."""
    return _dumps({"stored_id": stored_id})


def parse_receipt(body: object) -> int:
    """The id the receiver stored a shared memory under.

    Raises:
        ProtocolError: what is wrong with the body.
    """
    data = _load_object(body, "receipt")
    _keys(data, "receipt", {"stored_id"}, set())
    return _integer(data, "stored_id", low=1, high=2**63 - 1)
