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

A ``spade-memory/...`` message the receiver does not speak (another version, or
sharing turned off there) is answered ``not-understood`` with a reason, on the
same protocol and thread.

Parsing is strict: unknown keys, wrong types, NaN, duplicate keys, NUL characters
and oversized bodies are refused with a :class:`~spade_memory.errors.ProtocolError`
naming the problem; nothing else is raised for any input.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError
from spade.message import Message
from spade.template import Template

from ...errors import ProtocolError
from ...limits import LIMITS
from ...tools.validation import inline_schema, json_depth
from ...validation import JSONRejected, loads_strict

__all__ = [
    "ANSWER_PERFORMATIVES",
    "FAILURE",
    "INFORM",
    "IN_REPLY_TO",
    "MAX_BODY_CHARS",
    "MAX_QUERY_CHARS",
    "MEMORY_PROTOCOL_PREFIX",
    "NOT_UNDERSTOOD",
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
    "is_memory_protocol",
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
    "wire_bytes",
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
NOT_UNDERSTOOD = "not-understood"
ANSWER_PERFORMATIVES = frozenset({INFORM, REFUSE, FAILURE, NOT_UNDERSTOOD})
MEMORY_PROTOCOL_PREFIX = "spade-memory/"

MAX_BODY_CHARS = LIMITS.body_chars
MAX_QUERY_CHARS = LIMITS.query_chars
MAX_LIMIT = LIMITS.search_limit
MAX_REASON_CHARS = LIMITS.reason_chars
_MIN_CLIPPED_CHARS = LIMITS.min_shared_content_chars


# -- messages ----------------------------------------------------------------


def protocol_template() -> Template:
    """A SPADE template matching every message of either protocol."""
    return Template(metadata={PROTOCOL: QUERY_PROTOCOL}) | Template(
        metadata={PROTOCOL: SHARE_PROTOCOL}
    )


def is_protocol_message(msg: Message) -> bool:
    """Whether ``msg`` carries the metadata of the query or share protocol."""
    return msg.get_metadata(PROTOCOL) in (QUERY_PROTOCOL, SHARE_PROTOCOL)


def is_memory_protocol(msg: Message) -> bool:
    """Whether ``msg`` names a ``spade-memory/...`` protocol, known or not (another version)."""
    protocol = msg.get_metadata(PROTOCOL)
    return isinstance(protocol, str) and protocol.lower().startswith(MEMORY_PROTOCOL_PREFIX)


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


# -- body models -----------------------------------------------------------------


# What JSON leaves raw with ensure_ascii=False and XML 1.0 cannot carry: a stanza
# holding one ends the sender's XMPP stream (the server closes it).
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def _dumps(value: object) -> str:
    """``value`` as compact JSON that an XML stanza can carry (escaped where not)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return _NOT_XML.sub(lambda match: f"\\u{ord(match[0]):04x}", text)


def _clean(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError("text", "must not hold NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError("text", "holds invalid Unicode (a lone surrogate)") from None
    return value


def _filled(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("text", "must not be empty")
    return value


def _category_name(value: str) -> str:
    if not value.isidentifier() or value != value.lower():
        raise PydanticCustomError(
            "text", "must be a lower-case category name, got {value}", {"value": repr(value)}
        )
    return value


def _text(limit: int) -> Any:
    """A string of at most ``limit`` characters, without NUL or lone surrogates (may be empty)."""
    return Annotated[str, AfterValidator(_clean), Field(max_length=limit)]


def _filled_text(limit: int) -> Any:
    """:func:`_text` that is not empty nor only whitespace."""
    return Annotated[str, AfterValidator(_clean), AfterValidator(_filled), Field(max_length=limit)]


_Id = Annotated[int, Field(ge=1, le=2**63 - 1)]
_Category = Annotated[
    str,
    AfterValidator(_clean),
    Field(max_length=LIMITS.category_chars),
    AfterValidator(_filled),
    AfterValidator(_category_name),
]
_Unit = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class _Body(BaseModel):
    """A protocol body: strict JSON types, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    what: ClassVar[str] = "body"
    nested: ClassVar[Mapping[str, str]] = {}


class _QueryBody(_Body):
    what = "query"

    query: _filled_text(LIMITS.query_chars)  # type: ignore[valid-type]
    category: _Category | None = None
    limit: Annotated[int, Field(ge=1, le=LIMITS.search_limit)] | None = None


def _provenance_value(value: object) -> str | float | None:
    """A provenance field: ``null``, a short string or a finite number."""
    if value is None:
        return None
    if isinstance(value, str):
        if len(value) > LIMITS.jid_chars:
            raise PydanticCustomError(
                "text",
                "is {chars} characters; at most {limit} are accepted",
                {"chars": len(value), "limit": LIMITS.jid_chars},
            )
        return _clean(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError("text", "must be a number")
    number = float(value)
    if not math.isfinite(number) or not -1e18 <= number <= 1e18:
        raise PydanticCustomError("text", "must be a number from -1e+18 to 1e+18")
    return number


_ProvenanceValue = Annotated[Any, AfterValidator(_provenance_value)]


class _ResultBody(_Body):
    what = "result"

    id: _Id
    category: _Category
    content: _filled_text(LIMITS.body_chars)  # type: ignore[valid-type]
    score: Annotated[float, Field(ge=-1e9, le=1e9, allow_inf_nan=False)]
    truncated: bool = False
    provenance: Annotated[
        dict[str, _ProvenanceValue],
        Field(max_length=LIMITS.provenance_fields),
    ] = {}  # pydantic copies a mutable default per instance


class _AnswerBody(_Body):
    what = "answer"
    nested = {"results": "result"}

    results: Annotated[list[_ResultBody], Field(max_length=LIMITS.search_limit)]
    truncated: bool = False
    omitted: Annotated[int, Field(ge=0, le=LIMITS.omitted_results)] = 0


class _MemoryBody(_Body):
    what = "shared memory"

    id: _Id
    uid: _filled_text(LIMITS.uid_chars)  # type: ignore[valid-type]
    category: _Category
    content: _filled_text(LIMITS.body_chars)  # type: ignore[valid-type]
    context: _text(LIMITS.body_chars) | None = None  # type: ignore[valid-type]
    confidence: _Unit | None = None
    importance: _Unit | None = None
    created_at: Annotated[float, Field(ge=0, le=1e11, allow_inf_nan=False)]


class _ShareBody(_Body):
    what = "share"
    nested = {"memory": "shared memory"}

    memory: _MemoryBody


class _ReceiptBody(_Body):
    what = "receipt"

    stored_id: _Id


class _ReasonBody(_Body):
    what = "reason"

    reason: _filled_text(LIMITS.body_chars)  # type: ignore[valid-type]


_SCHEMAS: dict[type[_Body], dict[str, Any]] = {}


def _schema(model: type[_Body]) -> dict[str, Any]:
    """``model``'s JSON schema, references resolved (for the words of its errors)."""
    if model not in _SCHEMAS:
        raw = model.model_json_schema()
        _SCHEMAS[model] = inline_schema(raw, raw.get("$defs", {}))
    return _SCHEMAS[model]


_BodyT = TypeVar("_BodyT", bound=_Body)


def _load(model: type[_BodyT], body: object) -> _BodyT:
    """Read ``body`` as ``model``: size and depth first, then strict JSON, then the model.

    Raises:
        ProtocolError: the first problem, in words naming the field.
    """
    what = model.what
    if not isinstance(body, str) or not body.strip():
        raise ProtocolError(f"a {what} needs a JSON object as its body; the body is empty")
    if len(body) > MAX_BODY_CHARS:
        raise ProtocolError(
            f"the {what} body is {len(body)} characters; at most {MAX_BODY_CHARS} are accepted"
        )
    if json_depth(body) > LIMITS.argument_depth:
        raise ProtocolError(f"the {what} body is nested too deeply")
    try:
        parsed = loads_strict(body)
    except JSONRejected as exc:
        raise ProtocolError(_rejection(exc, what)) from None
    if not isinstance(parsed, dict):
        raise ProtocolError(f"the {what} body must be a JSON object")
    try:
        return model.model_validate(parsed)
    except ValidationError as exc:
        raise ProtocolError(_problem(model, exc)) from None


def _rejection(exc: JSONRejected, what: str) -> str:
    """The words of a refused body."""
    if exc.reason == "constant":
        return f"the body holds {exc.detail}, which is not a JSON number"
    if exc.reason == "duplicate":
        return f"the body gives {exc.detail!r} twice"
    if exc.reason == "depth":
        return f"the {what} body is nested too deeply"
    return f"the {what} body is not JSON ({exc.detail} at {exc.position})"


def _problem(model: type[_Body], exc: ValidationError) -> str:
    """The first problem of ``exc`` in the protocol's words."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = tuple(first["loc"])
    kind = first["type"]
    if kind in ("extra_forbidden", "missing"):
        parent = loc[:-1]
        same = sorted(
            str(e["loc"][-1])
            for e in errors
            if e["type"] == kind and tuple(e["loc"][:-1]) == parent
        )
        what = model.nested.get(str(parent[0]), model.what) if parent else model.what
        words = "has unknown fields" if kind == "extra_forbidden" else "lacks the fields"
        return f"the {what} {words} {same}"
    names = [part for part in loc if isinstance(part, str)]
    name = names[-1] if names else "the body"
    if loc[-1] == "provenance":
        return f"provenance must be an object of at most {LIMITS.provenance_fields} fields"
    if name == "results" and len(loc) == 1:
        return f"results must be a list of at most {LIMITS.search_limit} memories"
    if loc[:1] == ("results",) and len(loc) == 2:
        return "each result must be an object"
    if name == "memory" and len(loc) == 1:
        return "memory must be an object"
    spec = _spec(_schema(model), loc)
    value = first.get("input")
    if kind == "text":
        return f"{name} {first['msg']}"
    if kind in ("too_long", "string_too_long") and isinstance(value, str):
        limit = (first.get("ctx") or {}).get("max_length")
        return f"{name} is {len(value)} characters; at most {limit} are accepted"
    kinds = {s.get("type") for s in [spec, *spec.get("anyOf", [])]}
    if "boolean" in kinds:
        prefix = "a result's " if loc[:1] == ("results",) else ""
        return f"{prefix}{name} must be true or false"
    if "integer" in kinds:
        low, high = _bounds(spec)
        return f"{name} must be an integer from {low:.0f} to {high:.0f}"
    if "number" in kinds:
        low, high = _bounds(spec)
        if kind == "float_type" or low is None or high is None:
            return f"{name} must be a number"
        return f"{name} must be a number from {low:g} to {high:g}"
    if "string" in kinds:
        return f"{name} must be a string"
    return f"{name} is not valid: {first['msg']}"


def _bounds(spec: Mapping[str, Any]) -> tuple[float | None, float | None]:
    for option in [spec, *spec.get("anyOf", [])]:
        if "minimum" in option or "maximum" in option:
            return option.get("minimum"), option.get("maximum")
    return None, None


def _spec(schema: Mapping[str, Any], loc: Sequence[int | str]) -> Mapping[str, Any]:
    node: Mapping[str, Any] = schema
    for part in loc:
        if isinstance(part, int):
            node = node.get("items", {})
        elif "properties" in node:
            node = node["properties"].get(part, {})
        else:
            node = node.get("additionalProperties", {})
            if not isinstance(node, Mapping):
                return {}
    return node


def _longer(name: str, value: str | None, limit: int) -> None:
    if value is not None and len(value) > limit:
        raise ProtocolError(f"{name} is {len(value)} characters; at most {limit} are accepted")


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
    data = _load(_QueryBody, body)
    return MemoryQuery(
        query=data.query, category=data.category, limit=5 if data.limit is None else data.limit
    )


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


# What each character becomes in an XML text node, in bytes more than its own one.
_XML_EXTRA = {"&": 4, "<": 3, ">": 3, '"': 5, "'": 5}


def wire_bytes(body: str) -> int:
    """The bytes ``body`` takes in a stanza: UTF-8, with XML's escapes (``&quot;``...)."""
    return len(body.encode("utf-8")) + sum(body.count(c) * extra for c, extra in _XML_EXTRA.items())


def build_answer(results: Sequence[SharedResult], *, max_bytes: int, max_chars: int) -> str:
    """The ``inform`` body for ``results``, at most ``max_bytes`` as sent
    (:func:`wire_bytes`).

    Each content is cut to ``max_chars``; results that do not fit are left out
    (the last one kept may be cut further). The body says what was cut.
    """
    envelope = wire_bytes(_dumps({"results": [], "truncated": True, "omitted": 10**6}))
    budget = max_bytes - envelope
    kept: list[dict[str, Any]] = []
    cut = False
    for result in results:
        if len(result.content) > max_chars:
            result = replace(result, content=_clip(result.content, max_chars), truncated=True)
        item = result.as_dict()
        size = wire_bytes(_dumps(item)) + 1
        chars = len(result.content)
        while size > budget and chars > _MIN_CLIPPED_CHARS:
            chars //= 2
            item = replace(result, content=_clip(result.content, chars), truncated=True).as_dict()
            size = wire_bytes(_dumps(item)) + 1
        if size > budget:
            break
        cut = cut or bool(item["truncated"])
        kept.append(item)
        budget -= size
    omitted = len(results) - len(kept)
    return _dumps({"results": kept, "truncated": cut or omitted > 0, "omitted": omitted})


def parse_answer(body: object) -> QueryAnswer:
    """Read an ``inform`` answer to a query strictly.

    Raises:
        ProtocolError: what is wrong with it.
    """
    data = _load(_AnswerBody, body)
    results = tuple(
        SharedResult(
            id=item.id,
            category=item.category,
            content=item.content,
            score=item.score,
            provenance=dict(item.provenance),
            truncated=item.truncated,
        )
        for item in data.results
    )
    return QueryAnswer(results=results, truncated=data.truncated, omitted=data.omitted)


def reason_body(reason: str) -> str:
    """The body of a ``refuse`` or ``failure``."""
    return _dumps({"reason": _clip(reason, MAX_REASON_CHARS)})


def parse_reason(body: object) -> str:
    """The reason of a ``refuse`` or ``failure``, or a short note when it gives none."""
    try:
        return str(_load(_ReasonBody, body).reason)[:MAX_REASON_CHARS]
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
    memory = _load(_ShareBody, body).memory
    _longer("content", memory.content, max_content_chars)
    _longer("context", memory.context, max_content_chars)
    return SharedMemory(
        id=memory.id,
        uid=memory.uid,
        category=memory.category,
        content=memory.content,
        context=memory.context,
        confidence=1.0 if memory.confidence is None else memory.confidence,
        importance=0.5 if memory.importance is None else memory.importance,
        created_at=memory.created_at,
    )


def receipt_body(stored_id: int) -> str:
    """The ``inform`` body acknowledging a share."""
    return _dumps({"stored_id": stored_id})


def parse_receipt(body: object) -> int:
    """The id the receiver stored a shared memory under.

    Raises:
        ProtocolError: what is wrong with the body.
    """
    return _load(_ReceiptBody, body).stored_id
