"""Entities and relations found in a memory's text, without an LLM.

- Entities: the mentions :mod:`spade_memory.text.mentions` finds (names,
  places, organisations, quoted terms, @-mentions, JIDs, dates and times), then
  the topics (:mod:`spade_memory.text.topics`: "the payments team", 仓库) that
  are not names already.
- Relations between the entities of a memory: typed where a pattern shows it
  (see :mod:`spade_memory.text.relations`), else ``related_to`` between
  entities close together in one sentence.
- ``entities`` and ``relations`` a tool call passes explicitly are added as given.
- A memory written as ``"Name: text"`` also gets its speaker's node
  (:mod:`spade_memory.text.speakers`).

One entity is one node however it is written (:func:`canonical_key`).
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import InvalidToolInput
from ..limits import LIMITS
from .graph import Entity, Relation
from .mentions import (
    Mention,
    MentionFinder,
    canonical_key,
    make_entity,
    split_sentences,
)
from .relations import find_relations
from .scripts import HAN as _CJK
from .speakers import SPEAKER_TYPE, speaker_entity, speaker_keys
from .tokenizer import STOPWORDS, get_tokenizer
from .topics import TOPIC_PREFIX, TOPIC_TYPE

__all__ = [
    "GRAPH_VERSION",
    "Entity",
    "EntityExtractor",
    "Extraction",
    "Relation",
    "canonical_key",
    "canonical_relation",
    "check_graph_input",
    "entry_summary",
    "get_extractor",
    "needs_segmenter",
    "split_sentences",
]

GRAPH_VERSION = 5
"""Bumped whenever extraction changes, so stored graphs are rebuilt on open."""

MAX_ENTITIES = 32
"""At most this many entities are kept per memory (the first ones found), plus its speaker."""

MAX_EXPLICIT = LIMITS.explicit_entities
"""At most this many explicit entities, and as many relations, per memory."""

_COOCCURRENCE_WINDOW = 3
_MAX_COOCCURRENCE = 16
_APOSTROPHE = re.compile(r"['’]")
_QUERY_PUNCTUATION = re.compile(r"[^\w\s]+")
_WRITTEN_TYPES = frozenset({"jid", "mention"})  # a query names these as written
_FOLDED_TYPES = frozenset({"person", "place", "organization", "date", "time", "weekday"})


def canonical_relation(text: str) -> str:
    """A relation name as stored: ``"Works At"`` and ``"works-at"`` become ``"works_at"``."""
    return "_".join(canonical_key(text).replace("-", " ").split())[:64] or "related_to"


@dataclass(frozen=True, slots=True)
class Extraction:
    """The entities and relations of one text."""

    entities: tuple[Entity, ...]
    relations: tuple[Relation, ...]

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(entity.key for entity in self.entities)


class EntityExtractor:
    """Finds entities and relations in text. Thread-safe; one per process is enough."""

    def __init__(self) -> None:
        self._finder = MentionFinder()

    # -- public -------------------------------------------------------------

    def extract(
        self,
        text: str,
        *,
        entities: Sequence[str] = (),
        relations: Sequence[Mapping[str, str]] = (),
    ) -> Extraction:
        """The entities and relations of ``text``, plus explicit ones.

        Args:
            text: a memory's content.
            entities: names given explicitly (each becomes a node).
            relations: ``{"source", "relation", "target"}`` mappings given explicitly;
                their endpoints become nodes.
        """
        mentions, topic_mentions = self._finder.find_with_topics(text)
        found: dict[str, Entity] = {}
        for mention in mentions:
            found.setdefault(mention.entity.key, mention.entity)
        explicit: list[Relation] = []
        for name in entities:
            entity = make_entity(name, "name")
            if entity is not None:
                found.setdefault(entity.key, entity)
        for item in relations:
            source = make_entity(str(item.get("source", "")), "name")
            target = make_entity(str(item.get("target", "")), "name")
            if source is None or target is None or source.key == target.key:
                continue
            found.setdefault(source.key, source)
            found.setdefault(target.key, target)
            name = canonical_relation(str(item.get("relation", "")))
            explicit.append(Relation(source.key, name, target.key, 1.0))
        typed: list[Relation] = []
        for hit in find_relations(split_sentences(text), mentions):
            if isinstance(hit.target, str):
                phrase = make_entity(hit.target, "thing")
                if phrase is None:
                    continue
                target_key = found.setdefault(phrase.key, phrase).key
            else:
                target_key = hit.target.key
            if target_key != hit.source.key:
                typed.append(Relation(hit.source.key, hit.relation, target_key, 1.0, hit.sentence))
        topics = [m for m in topic_mentions if m.entity.key.removeprefix(TOPIC_PREFIX) not in found]
        for mention in topics:
            found.setdefault(mention.entity.key, mention.entity)
        kept = dict(itertools.islice(found.items(), MAX_ENTITIES))
        links = [r for r in (*explicit, *typed) if r.source in kept and r.target in kept]
        together = sorted([*mentions, *topics], key=lambda m: m.start) if topics else mentions
        links.extend(self._cooccurrence(together, links, kept))
        speaker = speaker_entity(text, mentions)
        if speaker is not None:
            kept[speaker.key] = speaker
        return Extraction(entities=tuple(kept.values()), relations=tuple(_dedupe(links)))

    def query_keys(self, text: str) -> list[str]:
        """Node keys a query may name, whatever its case and punctuation.

        Every non-stopword, pair and run of up to four adjacent words is tried as
        a key, so "who does alice work with" names Alice as "Who does Alice work
        with?" does: nothing hangs on capitals. A word ending in "s" is tried
        without it too ("carolines", as "Caroline's" is typed in a hurry). Then
        each key also as a speaker's (``speaker:alice``) and as a topic
        (``topic:payments team``). Handles and JIDs, which cannot be typed
        without their punctuation, come from the text as written; Chinese
        names and dates from the text without punctuation.
        """
        keys = [m.entity.key for m in self.mentions(text) if m.entity.type in _WRITTEN_TYPES]
        plain = _QUERY_PUNCTUATION.sub(" ", _APOSTROPHE.sub("", text))
        keys.extend(
            m.entity.key for m in self.mentions(plain.casefold()) if m.entity.type in _FOLDED_TYPES
        )
        words = [w for w in canonical_key(plain).split() if not _CJK.search(w)]
        for index, word in enumerate(words):
            if word not in STOPWORDS and len(word) > 1:
                keys.append(word)
                if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
                    keys.append(word[:-1])
            if index + 1 < len(words) and words[index + 1] not in STOPWORDS:
                keys.append(f"{word} {words[index + 1]}")
            for length in (3, 4):
                if index + length <= len(words):
                    keys.append(" ".join(words[index : index + length]))
        if _CJK.search(plain):
            tokenizer = get_tokenizer()
            keys.extend(t for t in tokenizer.tokenize(plain) if len(t) >= 2 and _CJK.search(t))
        unique = list(dict.fromkeys(k for k in keys if k))
        return [*unique, *speaker_keys(unique)]

    def mentions(self, text: str) -> list[Mention]:
        """Every entity mention in ``text`` with its span, in order, overlaps removed."""
        return self._finder.find(text)

    # -- co-occurrence ---------------------------------------------------------

    @staticmethod
    def _cooccurrence(
        mentions: Sequence[Mention], typed: Sequence[Relation], kept: Mapping[str, Entity]
    ) -> list[Relation]:
        linked = {frozenset((r.source, r.target)) for r in typed}
        by_sentence: dict[int, list[str]] = {}
        for mention in mentions:
            if mention.entity.key in kept:
                by_sentence.setdefault(mention.sentence, []).append(mention.entity.key)
        links: list[Relation] = []
        # each sentence's distinct entities, in order; a sentence of one links nothing
        sentences = [
            (sentence, unique)
            for sentence, keys in by_sentence.items()
            if len(unique := list(dict.fromkeys(keys))) > 1
        ]
        # Neighbours first (each entity with the next one), then the one after, ...:
        # linear in the entities, and capped, so a long text adds few weak edges.
        for distance in range(1, _COOCCURRENCE_WINDOW + 1):
            for sentence, unique in sentences:
                for a, b in zip(unique, unique[distance:], strict=False):
                    if len(links) >= _MAX_COOCCURRENCE:
                        return links
                    pair = frozenset((a, b))
                    if pair not in linked:
                        linked.add(pair)
                        links.append(Relation(a, "related_to", b, 0.5, sentence))
        return links


def _dedupe(relations: Iterable[Relation]) -> list[Relation]:
    seen: set[tuple[str, str, str]] = set()
    kept: list[Relation] = []
    for relation in relations:
        marker = (relation.source, relation.relation, relation.target)
        if marker not in seen:
            seen.add(marker)
            kept.append(relation)
    return kept


_SHARED_LOCK = threading.Lock()
_shared: EntityExtractor | None = None


def needs_segmenter(text: str) -> bool:
    """Whether extracting from ``text`` cuts Chinese with jieba (slow the first time)."""
    return bool(_CJK.search(text))


def get_extractor() -> EntityExtractor:
    """The extractor shared by everything in this process."""
    global _shared
    with _SHARED_LOCK:
        if _shared is None:
            _shared = EntityExtractor()
        return _shared


def _name(label: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidToolInput(f"{label} must be a non-empty string, got {value!r}")
    if len(value) > LIMITS.entity_chars or "\x00" in value:
        raise InvalidToolInput(
            f"{label} must be at most {LIMITS.entity_chars} characters without NUL bytes"
        )
    return value.strip()


def check_graph_input(
    entities: object, relations: object
) -> tuple[tuple[str, ...], tuple[dict[str, str], ...]]:
    """Check explicit ``entities`` (names) and ``relations`` ({source, relation, target}).

    Raises:
        InvalidToolInput: not lists of the right shape; says what is accepted.
    """
    names: list[str] = []
    if entities is not None:
        if isinstance(entities, str) or not isinstance(entities, Sequence):
            raise InvalidToolInput("entities must be a list of names, e.g. ['Alice', 'Acme']")
        if len(entities) > MAX_EXPLICIT:
            raise InvalidToolInput(f"at most {MAX_EXPLICIT} entities per memory")
        names = [_name(f"entities[{i}]", value) for i, value in enumerate(entities)]
    links: list[dict[str, str]] = []
    if relations is not None:
        if isinstance(relations, str) or not isinstance(relations, Sequence):
            raise InvalidToolInput("relations must be a list of {source, relation, target} objects")
        if len(relations) > MAX_EXPLICIT:
            raise InvalidToolInput(f"at most {MAX_EXPLICIT} relations per memory")
        for i, item in enumerate(relations):
            if not isinstance(item, Mapping) or set(item) != {"source", "relation", "target"}:
                raise InvalidToolInput(
                    f"relations[{i}] must be an object with exactly source, relation and "
                    f"target, e.g. {{'source': 'Alice', 'relation': 'works at', "
                    f"'target': 'Acme'}}; got {item!r}"
                )
            links.append({k: _name(f"relations[{i}].{k}", item[k]) for k in sorted(item)})
    return tuple(names), tuple(links)


_SUMMARY_CHARS = 400  # trigram rows grow with the text: entries stay short


def entry_summary(extraction: Extraction) -> str:
    """The text of a memory's graph entry: its relations as phrases, then its entities.

    ``"Bob works with Alice. Bob member of payments team. Bob; Alice; payments team"``.
    It is what the trigram search and the entry vector see: shorter than the memory
    and about its entities only (topics are left out: their words are the
    memory's own, which the document route searches already). (Embedding the
    memory's own text instead, reusing its document vector, measured worse on both
    LoCoMo and the relations set.)
    """
    entities = [e for e in extraction.entities if e.type not in (SPEAKER_TYPE, TOPIC_TYPE)]
    values = {entity.key: entity.value for entity in entities}
    phrases = [
        f"{values[r.source]} {r.relation.replace('_', ' ')} {values[r.target]}."
        for r in extraction.relations
        if r.relation != "related_to" and r.source in values and r.target in values
    ]
    names = "; ".join(entity.value for entity in entities)
    return " ".join([*dict.fromkeys(phrases), names]).strip()[:_SUMMARY_CHARS]
