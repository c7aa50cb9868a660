"""Consolidation: near-duplicate memories merged into one.

Two active memories of the same category are near-duplicates when their vectors'
similarity, measured above the embedder's chance level, reaches the threshold
(:attr:`~spade_memory.config.MaintenanceConfig.consolidation_threshold`, 0.7).
Raw cosine similarity is not comparable across embedders: multilingual-e5 puts
unrelated sentences near 0.75, feature hashing near 0. So the similarity used is
``(cosine - chance) / (1 - chance)``, where ``chance`` is the mean similarity of a
fixed set of unrelated reference sentences under the same embedder
(:mod:`spade_memory.embedding.chance`).

Each group keeps its most informative memory (most distinct tokens, then the
longest), which takes the highest importance and confidence, the summed access
count, the union of the sources (``metadata["sources"]``) and the uids of the
memories merged into it (``metadata["merged_from"]``); the others are deleted in
the same transaction. With an LLM client, the texts are merged by the model
instead; an answer that fails validation (empty, far shorter than the longest
text, or missing most of its words) falls back to the rule-based merge.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..embedding.chance import achance_similarity, chance_similarity
from ..models import Memory
from ..storage.base import IndexedText
from ..storage.given_graph import union_given
from ..storage.merges import MergedFields, active_vectors, merge_memories
from ..text.tokenizer import get_tokenizer
from .decay import is_protected

if TYPE_CHECKING:
    from ..engine import Engine
    from ..llm.messages import LLMClient

__all__ = [
    "ConsolidationResult",
    "Merge",
    "chance_similarity",
    "consolidate",
    "validate_merge",
]

logger = logging.getLogger(__name__)

_BLOCK = 1024
_MERGE_PROMPT = (
    "You merge notes that say the same thing into one note. Keep every fact that "
    "any of them states, add nothing, and answer with the merged note only: no "
    "preamble, no quotes, no list."
)


@dataclass(frozen=True, slots=True)
class Merge:
    """One group merged: the memory kept and the memories merged into it."""

    survivor: int
    merged: tuple[int, ...]
    similarity: float
    by_llm: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "survivor": self.survivor,
            "merged": list(self.merged),
            "similarity": self.similarity,
            "by_llm": self.by_llm,
        }


@dataclass(frozen=True, slots=True)
class ConsolidationResult:
    """What one consolidation run merged."""

    merges: tuple[Merge, ...] = ()
    compared: int = 0
    chance: float = 0.0
    last_seq: int = 0
    skipped: tuple[int, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "merges": [merge.to_dict() for merge in self.merges],
            "compared": self.compared,
            "chance": self.chance,
        }


def _informativeness(memory: Memory) -> tuple[int, int, int]:
    tokens = set(get_tokenizer().tokenize(memory.content))
    return len(tokens), len(memory.content), -memory.id


def validate_merge(answer: str | None, texts: Sequence[str], *, max_chars: int) -> str | None:
    """An LLM's merged text if it is usable, else ``None``.

    Usable: not empty, at most ``max_chars``, at least half as long as the longest
    text and not more than twice all of them, and holding at least half of the
    longest text's distinct tokens.
    """
    if answer is None:
        return None
    text = answer.strip().strip("\"'“”«»").strip()
    if not text or len(text) > max_chars or not texts:
        return None
    longest = max(texts, key=len)
    if len(text) < 0.5 * len(longest) or len(text) > 2 * sum(map(len, texts)) + 200:
        return None
    tokenize = get_tokenizer().tokenize
    wanted = set(tokenize(longest))
    if wanted and len(wanted & set(tokenize(text))) < 0.5 * len(wanted):
        return None
    return text


async def _llm_merge(
    llm: LLMClient, texts: Sequence[str], *, max_chars: int, timeout: float
) -> str | None:
    from ..llm.messages import ChatMessage  # the LLM clients load only when used

    listing = "\n".join(
        f"{n}. {json.dumps(text, ensure_ascii=False)}" for n, text in enumerate(texts, 1)
    )
    messages = [
        ChatMessage(role="system", content=_MERGE_PROMPT),
        ChatMessage(role="user", content=f"Merge these notes into one:\n{listing}"),
    ]
    try:
        async with asyncio.timeout(timeout):
            response = await llm.complete(messages, ())
    except Exception as exc:  # any failure of the model falls back to the rule
        logger.warning("LLM merge failed (%s); merging by rule", exc)
        return None
    if response.tool_calls:
        return None
    merged = validate_merge(response.text, texts, max_chars=max_chars)
    if merged is None:
        logger.info("LLM merge answer rejected; merging by rule")
    return merged


def _pairs(
    matrix: np.ndarray, queries: np.ndarray, chance: float, threshold: float
) -> list[tuple[int, int, float]]:
    """``(row, row, similarity)`` of rows at or above ``threshold`` (blocking)."""
    found: list[tuple[int, int, float]] = []
    scale = 1.0 - chance
    for start in range(0, len(queries), _BLOCK):
        rows = queries[start : start + _BLOCK]
        sims = (matrix[rows] @ matrix.T - chance) / scale
        hits = np.argwhere(sims >= threshold)
        for q, j in hits:
            a, b = int(rows[q]), int(j)
            if a != b:
                found.append((min(a, b), max(a, b), float(sims[q, j])))
    return found


def _groups(
    neighbours: Mapping[int, dict[int, float]], memories: Mapping[int, Memory]
) -> list[tuple[int, list[int], float]]:
    """Greedy stars: the most informative memory left takes its unclaimed neighbours."""
    order = sorted(neighbours, key=lambda i: _informativeness(memories[i]), reverse=True)
    claimed: set[int] = set()
    groups: list[tuple[int, list[int], float]] = []
    for centre in order:
        if centre in claimed:
            continue
        members = sorted(i for i in neighbours[centre] if i not in claimed and i != centre)
        if not members:
            continue
        claimed.update([centre, *members])
        groups.append((centre, members, min(neighbours[centre][i] for i in members)))
    return groups


def _merged_metadata(survivor: Memory, others: Sequence[Memory]) -> dict[str, Any]:
    metadata = dict(survivor.metadata)
    for other in others:  # what only a copy carried stays (the survivor's value wins)
        for key, value in other.metadata.items():
            metadata.setdefault(key, value)
    merged_from: list[str] = [str(u) for u in metadata.get("merged_from", []) or []]
    sources: list[dict[str, Any]] = []
    for memory in (survivor, *others):
        if memory is not survivor:
            merged_from.append(memory.uid)
            merged_from.extend(str(u) for u in memory.metadata.get("merged_from", []) or [])
        extra = memory.metadata.get("sources", [])
        for source in extra if isinstance(extra, list) else []:
            if isinstance(source, dict):
                sources.append(source)
        if memory.source_conversation or memory.source_sender:
            sources.append(
                {"conversation": memory.source_conversation, "sender": memory.source_sender}
            )
    metadata["merged_from"] = list(dict.fromkeys(merged_from))
    unique: list[dict[str, Any]] = []
    for source in sources:
        if source not in unique:
            unique.append(source)
    if unique:
        metadata["sources"] = unique
    return metadata


def _same_scope(one: Memory, other: Memory) -> bool:
    """Whether two memories are seen by the same viewers (same scope, and the same
    conversation when that scope is a conversation's)."""
    return one.scope == other.scope and (
        one.scope.visibility != "conversation"
        or one.source_conversation == other.source_conversation
    )


async def _apply(
    engine: Engine, survivor: Memory, others: Sequence[Memory], content: str, now: float
) -> bool:
    """Merge ``others`` into ``survivor`` in one transaction; False if any changed meanwhile."""
    members = [survivor, *others]
    changed_text = content != survivor.content
    tokens = graph = None
    if changed_text:
        text = IndexedText.of(content, survivor.context)
        tokens = (text.content_tokens, text.context_tokens)
        named = await engine.base.given([m.id for m in members])
        # everything named for any member, the survivor's first (as the merge keeps it)
        given = union_given(named[m.id] for m in members if m.id in named) if named else None
        graph = engine.graph_for(dataclasses.replace(survivor, content=content), given)
    metadata = json.dumps(_merged_metadata(survivor, others), ensure_ascii=False)
    accessed = [m.last_accessed for m in members if m.last_accessed is not None]
    fields = MergedFields(
        content=content,
        importance=max(m.importance for m in members),
        confidence=max(m.confidence for m in members),
        access_count=sum(m.access_count for m in members),
        last_accessed=max(accessed) if accessed else None,
        metadata=metadata,
        updated_at=now,
    )
    merged = await merge_memories(
        engine.base,
        survivor.id,
        [other.id for other in others],
        expected={m.id: m for m in members},
        fields=fields,
        text=None if tokens is None or graph is None else (*tokens, graph),
    )
    if not merged:
        return False
    if engine.indexer is not None:
        engine.indexer.remove([m.id for m in others] + ([survivor.id] if changed_text else []))
    return True


async def consolidate(
    engine: Engine,
    *,
    threshold: float,
    now: float,
    llm: LLMClient | None = None,
    after_seq: int = 0,
    llm_timeout: float = 30.0,
) -> ConsolidationResult:
    """Merge near-duplicate memories of ``engine``.

    Args:
        engine: the open memory (a memory without an embedder has nothing to compare).
        threshold: the similarity above chance, in [0, 1], from which memories merge.
        now: the time recorded as the survivors' update time.
        llm: merge the texts with this model (validated; the rule is the fallback).
        after_seq: compare only memories embedded after this vector change number
            against the rest (0: everything); :attr:`ConsolidationResult.last_seq`
            is the value to pass next time.
        llm_timeout: seconds one LLM merge may take.
    """
    indexer = engine.indexer
    if indexer is None:
        return ConsolidationResult()
    embedder = indexer.embedder
    rows = await active_vectors(engine.base, embedder.fingerprint, embedder.dim)
    last_seq = max([after_seq, *(int(r[4]) for r in rows)])
    rows = [r for r in rows if not is_protected(r[2])]
    chance = await achance_similarity(embedder)
    neighbours: dict[int, dict[int, float]] = {}
    # Only memories of one category and one scope merge: a merge never moves what
    # one person told into what another may read.
    by_category: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        by_category.setdefault((str(row[1]), str(row[5])), []).append(row)
    for group in by_category.values():
        ids = np.fromiter((int(r[0]) for r in group), dtype=np.int64, count=len(group))
        matrix = np.stack([np.frombuffer(r[3], dtype=np.float32) for r in group])
        queries = np.flatnonzero([int(r[4]) > after_seq for r in group])
        if not len(queries) or len(group) < 2:
            continue
        for a, b, sim in await asyncio.to_thread(_pairs, matrix, queries, chance, threshold):
            first, second = int(ids[a]), int(ids[b])
            neighbours.setdefault(first, {})[second] = sim
            neighbours.setdefault(second, {})[first] = sim
    memories = await engine.base.get_many(neighbours)
    neighbours = {
        i: {j: s for j, s in near.items() if j in memories}
        for i, near in neighbours.items()
        if i in memories
    }
    merges: list[Merge] = []
    skipped: list[int] = []
    for centre, members, similarity in _groups(neighbours, memories):
        survivor, others = memories[centre], [memories[i] for i in members]
        if any(not _same_scope(survivor, other) for other in others):
            skipped.append(centre)  # re-scoped since the vectors were read
            continue
        content, by_llm = survivor.content, False
        if llm is not None:
            texts = [survivor.content, *(m.content for m in others)]
            merged = await _llm_merge(
                llm, texts, max_chars=engine.config.max_content_chars, timeout=llm_timeout
            )
            if merged is not None:
                content, by_llm = merged, True
        if await _apply(engine, survivor, others, content, now):
            merges.append(Merge(centre, tuple(members), similarity, by_llm))
        else:
            skipped.append(centre)
    if merges:
        engine.notify_changed()
        logger.info("%s: consolidated %d groups of near-duplicates", engine.jid, len(merges))
    return ConsolidationResult(tuple(merges), len(rows), chance, last_seq, tuple(skipped))
