"""Memory atoms: the fine-grained facts of a memory, each with its own lifetime.

A memory is split into atoms (one per sentence), each typed ``episode``, ``plan``,
``fact``, ``relation``, ``preference`` or ``unknown`` by cue words (English and
Chinese) and by the relations found in it. Each type has a lifetime (see
:class:`~spade_memory.config.AtomConfig`: 7, 2, 180, 90, 60 and 30 days by
default), lengthened by the memory's importance and by reinforcement (the same
fact stored again).

Statuses:

- ``active``: live; recalled into prompts.
- ``dormant``: past its lifetime; not recalled, but stored again it revives.
- ``expired``: dormant for too long; gone for good.
- ``superseded``: a newer atom claims another object for the same subject and
  predicate ("Alice lives in Berlin" after "Alice lives in Paris"); if that newer
  memory is forgotten, the older atom is active again.
- ``forgotten``: removed on request.

A memory whose atoms are all no longer live is left out of search results
rather than recalled empty (:attr:`AtomConfig.hide_expired`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import AtomConfig
from .extraction import Extraction, canonical_key, entry_summary, split_sentences
from .graph import AtomRecord, MemoryGraph, Relation
from .relations import FUNCTIONAL

__all__ = [
    "ATOM_STATUSES",
    "ATOM_TYPES",
    "Atom",
    "build_atoms",
    "classify_atom",
    "memory_graph",
    "ttl_seconds",
]

ATOM_TYPES: tuple[str, ...] = ("episode", "plan", "fact", "relation", "preference", "unknown")
ATOM_STATUSES: tuple[str, ...] = ("active", "dormant", "superseded", "expired", "forgotten")

MAX_ATOMS = 32
"""Sentences past this many join the last atom of their memory."""

_DAY = 86_400.0
_INTERPERSONAL = frozenset(
    {
        "friend_of",
        "works_with",
        "married_to",
        "sibling_of",
        "parent_of",
        "child_of",
        "manages",
        "reports_to",
        "knows",
        "member_of",
    }
)
_PREFERENCE = re.compile(
    r"\b(?:likes?|liked|loves?|enjoys?|prefers?|preferred|favou?rite|hates?|dislikes?|"
    r"can't\s+stand|fond\s+of|into)\b|喜欢|最爱|偏好|讨厌|热爱|喜爱|爱吃|爱喝",
    re.IGNORECASE,
)
_PLAN = re.compile(
    r"\b(?:will|going\s+to|gonna|plans?\s+to|planning|intends?\s+to|tomorrow|tonight|"
    r"next\s+(?:week|month|year|weekend|monday|tuesday|wednesday|thursday|friday|saturday|"
    r"sunday)|later\s+today|scheduled|upcoming|this\s+weekend)\b"
    r"|打算|计划|准备|将要|将会|明天|后天|下周|下个月|明年|待会|今晚|要去",
    re.IGNORECASE,
)
_EPISODE = re.compile(
    r"\b(?:yesterday|last\s+(?:week|night|month|year|weekend|time)|ago|earlier\s+today|"
    r"this\s+morning|went|met|visited|attended|saw|had|did|joined|finished|started)\b"
    r"|昨天|前天|上周|上个月|去年|刚才|刚刚|那天|(?:去|参加|见|看|吃|买|做|完成)了",
    re.IGNORECASE,
)
_FACT = re.compile(r"\b(?:is|are|was|were|has|have|always|never)\b|是|有", re.IGNORECASE)
# Characters IGNORECASE matches to an ASCII letter but str.lower() does not lower to one.
_FOLDED = re.compile("[\u0130\u0131\u017f\u212a]")
_WORDS = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class _Cues:
    """The cue words of one atom type, looked up by words instead of a regex scan.

    ``found`` answers as ``pattern.search(text)`` does: a one-word cue is a whole word
    of the lower-cased text (a maximal run of word characters, as between the two
    ``\\b``), a phrase is searched (on the lower-cased text) only when one of its
    words is there, and the Chinese cues are substrings. A text holding a character
    that IGNORECASE folds differently from ``str.lower`` (İ, ı, ſ, the Kelvin sign)
    is searched with ``pattern`` itself.
    """

    pattern: re.Pattern[str]
    words: frozenset[str]
    gates: frozenset[str] = frozenset()
    phrases: re.Pattern[str] | None = None
    chinese: tuple[str, ...] = ()

    def found(self, text: str, words: set[str] | None, lowered: str) -> bool:
        if words is None:
            return self.pattern.search(text) is not None
        if not words.isdisjoint(self.words):
            return True
        gated = self.phrases is not None and not words.isdisjoint(self.gates)
        if gated and self.phrases is not None and self.phrases.search(lowered) is not None:
            return True
        return not text.isascii() and any(cue in text for cue in self.chinese)


def _cues(
    pattern: re.Pattern[str], words: str, phrases: str = "", gates: str = "", chinese: str = ""
) -> _Cues:
    return _Cues(
        pattern=pattern,
        words=frozenset(words.split()),
        gates=frozenset(gates.split()),
        phrases=re.compile(rf"\b(?:{phrases})\b") if phrases else None,
        chinese=tuple(chinese.split()),
    )


_NEXT = "week|month|year|weekend|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_PREFERENCE_CUES = _cues(
    _PREFERENCE,
    "like likes liked love loves enjoy enjoys prefer prefers preferred favorite favourite "
    "hate hates dislike dislikes into",
    phrases=r"can't\s+stand|fond\s+of",
    gates="stand fond",
    chinese="喜欢 最爱 偏好 讨厌 热爱 喜爱 爱吃 爱喝",
)
_PLAN_CUES = _cues(
    _PLAN,
    "will gonna planning tomorrow tonight scheduled upcoming",
    phrases=rf"going\s+to|plans?\s+to|intends?\s+to|next\s+(?:{_NEXT})|later\s+today|"
    r"this\s+weekend",
    gates="going plan plans intend intends next later this",
    chinese="打算 计划 准备 将要 将会 明天 后天 下周 下个月 明年 待会 今晚 要去",
)
_EPISODE_CUES = _cues(
    _EPISODE,
    "yesterday ago went met visited attended saw had did joined finished started",
    phrases=r"last\s+(?:week|night|month|year|weekend|time)|earlier\s+today|this\s+morning",
    gates="last earlier this",
    chinese="昨天 前天 上周 上个月 去年 刚才 刚刚 那天 去了 参加了 见了 看了 吃了 买了 做了 完成了",
)
_FACT_CUES = _cues(_FACT, "is are was were has have always never", chinese="是 有")
_TTL_FIELDS = {
    "episode": "episode_ttl_days",
    "plan": "plan_ttl_days",
    "fact": "fact_ttl_days",
    "relation": "relation_ttl_days",
    "preference": "preference_ttl_days",
}
_CATEGORY_TYPES = {
    "fact": "fact",
    "capability": "fact",
    "pattern": "fact",
    "preference": "preference",
}


@dataclass(frozen=True, slots=True)
class Atom:
    """One fine-grained fact of a memory, with its status at the time it was read.

    Times are Unix seconds; ``subject``, ``predicate`` and ``object`` are entity keys
    and a relation name when a typed relation was found in it.
    """

    id: int
    memory_id: int
    position: int
    text: str
    type: str
    status: str
    subject: str | None
    predicate: str | None
    object: str | None
    importance: float
    reinforcements: int
    created_at: float
    reinforced_at: float
    expires_at: float
    superseded_by: int | None

    @property
    def live(self) -> bool:
        return self.status == "active"


def ttl_seconds(kind: str, importance: float, config: AtomConfig) -> float:
    """The lifetime of a fresh atom of type ``kind`` (before any reinforcement)."""
    days = float(getattr(config, _TTL_FIELDS.get(kind, "unknown_ttl_days")))
    return days * _DAY * (1.0 + config.importance_factor * max(0.0, min(1.0, importance)))


def classify_atom(text: str, relations: Sequence[Relation], *, category: str = "") -> str:
    """The type of an atom from its relations, then cue words, then its memory's category."""
    names = {relation.relation for relation in relations}
    if names & FUNCTIONAL:
        return "fact"
    # the text's words, once, for the four kinds of cue words
    lowered = text.lower() if text.isascii() or not _FOLDED.search(text) else ""
    words = set(_WORDS.findall(lowered)) if lowered else None
    if names & {"likes", "dislikes"} or _PREFERENCE_CUES.found(text, words, lowered):
        return "preference"
    if _PLAN_CUES.found(text, words, lowered):
        return "plan"
    if _EPISODE_CUES.found(text, words, lowered):
        return "episode"
    if names & _INTERPERSONAL:
        return "relation"
    if names - {"related_to"} or _FACT_CUES.found(text, words, lowered):
        return "fact"
    return _CATEGORY_TYPES.get(category, "unknown")


def _fact_key(text: str) -> str:
    """What identifies a fact said again: a short hash of its canonical words."""
    canonical = canonical_key(text) or text
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=12).hexdigest()


def build_atoms(
    content: str,
    extraction: Extraction,
    *,
    category: str,
    importance: float,
    config: AtomConfig,
) -> tuple[AtomRecord, ...]:
    """Split ``content`` into typed atoms, with the claims its typed relations make."""
    sentences = [sentence.strip() for _, sentence in split_sentences(content)]
    pieces = [(i, s) for i, s in enumerate(sentences) if s]
    if len(pieces) > MAX_ATOMS:
        head, tail = pieces[: MAX_ATOMS - 1], pieces[MAX_ATOMS - 1 :]
        pieces = [*head, (tail[0][0], " ".join(s for _, s in tail))]
    by_sentence: dict[int, list[Relation]] = {}
    for relation in extraction.relations:
        if relation.clause is not None and relation.relation != "related_to":
            by_sentence.setdefault(relation.clause, []).append(relation)
    atoms: list[AtomRecord] = []
    lifetimes: dict[str, float] = {}  # each type's, worked out once per memory
    for position, (index, text) in enumerate(pieces):
        relations = by_sentence.get(index, [])
        kind = classify_atom(text, relations, category=category)
        lifetime = lifetimes.get(kind)
        if lifetime is None:
            lifetime = lifetimes[kind] = ttl_seconds(kind, importance, config)
        claim = next((r for r in relations if r.relation in FUNCTIONAL), None)
        claim = claim or (relations[0] if relations else None)
        atoms.append(
            AtomRecord(
                position=position,
                text=text[:2_000],
                key=_fact_key(text),
                type=kind,
                importance=importance,
                ttl_seconds=lifetime,
                subject=claim.source if claim else None,
                predicate=claim.relation if claim else None,
                object=claim.target if claim else None,
                functional=claim is not None and claim.relation in FUNCTIONAL,
            )
        )
    return tuple(atoms)


def memory_graph(
    content: str,
    extraction: Extraction,
    *,
    category: str,
    importance: float,
    config: AtomConfig,
) -> MemoryGraph:
    """Everything the graph tables hold for one memory: entities, relations, entry, atoms."""
    relation_type = next(
        (r.relation for r in extraction.relations if r.relation != "related_to"), None
    )
    return MemoryGraph(
        entities=extraction.entities,
        relations=extraction.relations,
        summary=entry_summary(extraction),
        relation_type=relation_type,
        atoms=build_atoms(
            content, extraction, category=category, importance=importance, config=config
        ),
        reinforcement_factor=config.reinforcement_factor,
        dormant_fraction=config.dormant_fraction,
    )
