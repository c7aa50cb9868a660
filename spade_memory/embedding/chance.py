"""How similar an embedder finds unrelated texts: its chance level.

Raw cosine similarity is not comparable across embedders: multilingual-e5 puts
unrelated sentences near 0.75, feature hashing near 0. The chance level is the
mean similarity of a fixed set of unrelated reference sentences (several
languages) under the embedder; similarity measured above it,
``(cosine - chance) / (1 - chance)``, means the same under any of them.
Consolidation merges near-duplicates by it, and the search's relevance floor
keeps only vector matches clearly above it.

Texts of one script sit nearer each other than texts of mixed ones (under
multilingual-e5, unrelated Chinese sentences are about 0.86 alike, English ones
0.77), so the floor measures a query against the chance level of its own script
(:func:`chance_by_script`, the script told by
:func:`~spade_memory.text.scripts.script_of`): the mean similarity of unrelated sentences written in
it (:data:`SCRIPT_TEXTS`).
"""

from __future__ import annotations

import threading

import numpy as np
from numpy.typing import NDArray

from ..models import Embedder
from .calls import embed_documents

__all__ = [
    "REFERENCE_TEXTS",
    "SCRIPTS",
    "SCRIPT_TEXTS",
    "above_chance",
    "achance_similarity",
    "chance_by_script",
    "chance_similarity",
]

REFERENCE_TEXTS: tuple[str, ...] = (
    "The quarterly budget review moved to Thursday afternoon.",
    "Penguins huddle together to survive the Antarctic winter.",
    "She prefers her coffee black with no sugar.",
    "The server restarts automatically after a kernel update.",
    "Grandfather planted the apple orchard in 1962.",
    "The violin concerto ends with a fast, joyful movement.",
    "明天上午十点在三楼会议室开项目周会。",
    "这家餐厅的麻婆豆腐非常辣。",
    "Der Zug nach Hamburg hat zwanzig Minuten Verspätung.",
    "Las entradas para el concierto se agotaron en una hora.",
)
"""Sentences about unrelated things, in several languages."""

SCRIPT_TEXTS: dict[str, tuple[str, ...]] = {
    "latin": (
        *REFERENCE_TEXTS[:6],
        "The hiking trail was closed after the heavy rain.",
        "My neighbour repairs old radios in his garage.",
        "The museum opens a new exhibition of Japanese prints.",
        "He forgot his umbrella on the bus this morning.",
    ),
    "cjk": (
        *REFERENCE_TEXTS[6:8],
        "暴雨过后，山里的登山步道暂时关闭了。",
        "我的邻居在车库里修理旧收音机。",
        "博物馆下个月举办日本版画展览。",
        "他今天早上把雨伞忘在公交车上了。",
        "这座古桥建于明朝，已有五百多年历史。",
        "小猫喜欢在阳光下的窗台上睡觉。",
        "新的地铁线路预计明年年底通车。",
        "她每天早上练习半小时钢琴。",
    ),
}
"""Unrelated sentences per script: ``latin`` (English and its neighbours) and
``cjk`` (Chinese, Japanese)."""

SCRIPTS: tuple[str, ...] = tuple(SCRIPT_TEXTS)
"""The scripts a chance level is measured for."""


_CEILING = 0.95  # an embedder that finds everything alike still leaves room above chance
_LEVELS: dict[str, float] = {}
_LOCK = threading.Lock()


def _mean_similarity(vectors: NDArray[np.float32]) -> float:
    matrix = np.asarray(vectors, dtype=np.float32)
    sims = matrix @ matrix.T
    count = len(matrix)
    mean = float((sims.sum() - np.trace(sims)) / (count * (count - 1)))
    return min(_CEILING, max(0.0, mean))


def _known(fingerprint: str) -> float | None:
    with _LOCK:
        return _LEVELS.get(fingerprint)


def _keep(fingerprint: str, value: float) -> float:
    with _LOCK:
        _LEVELS[fingerprint] = value
    return value


def chance_similarity(embedder: Embedder) -> float:
    """The mean similarity of unrelated sentences under ``embedder``, in [0, 0.95]
    (kept per fingerprint for the process; blocking: call it in a thread)."""
    fingerprint = embedder.fingerprint
    known = _known(fingerprint)
    if known is not None:
        return known
    vectors = embedder.embed_documents(list(REFERENCE_TEXTS))
    return _keep(fingerprint, _mean_similarity(vectors))


async def achance_similarity(embedder: Embedder) -> float:
    """:func:`chance_similarity` from async code (an async embedder is awaited, a
    blocking one runs in a thread)."""
    fingerprint = embedder.fingerprint
    known = _known(fingerprint)
    if known is not None:
        return known
    vectors = await embed_documents(embedder, list(REFERENCE_TEXTS))
    return _keep(fingerprint, _mean_similarity(vectors))


async def chance_by_script(embedder: Embedder, script: str) -> float:
    """The mean similarity of unrelated sentences written in ``script`` (one of
    :data:`SCRIPTS`) under ``embedder``, in [0, 0.95] (kept per fingerprint for
    the process).

    Raises:
        ValueError: ``script`` is not one of :data:`SCRIPTS`.
    """
    if script not in SCRIPT_TEXTS:
        raise ValueError(f"no chance level for script {script!r}; one of {', '.join(SCRIPTS)}")
    key = f"{script}:{embedder.fingerprint}"
    known = _known(key)
    if known is not None:
        return known
    # measured inside the first search of each script: it does not wait for queries
    vectors = await embed_documents(embedder, list(SCRIPT_TEXTS[script]), behind_queries=False)
    return _keep(key, _mean_similarity(vectors))


def above_chance(cosine: float, chance: float) -> float:
    """``cosine`` measured above ``chance``: ``(cosine - chance) / (1 - chance)``
    (0 at chance, 1 for identical texts, negative below chance)."""
    return (cosine - chance) / (1.0 - chance)
