"""Commits a damaged write-ahead log would drop without a word.

SQLite replays a write-ahead log frame by frame and stops at the first frame
whose checksum fails: every commit after it is silently left out, as if it had
never been made. A crash leaves only a torn tail (nothing intact after the torn
frame), but a flipped byte in the middle of the log leaves intact frames after
it, and their commits are lost with no error.

:func:`dropped_commits` finds them: each frame's checksum is computed from the
checksum its predecessor stores (not from the running value SQLite carries), so
an intact frame after a damaged one still checks out. A commit frame of this
log's generation (its salts match the header) that checks out after the first
damaged frame is an acknowledged commit SQLite would drop.

The checksum is SQLite's: over 32-bit words in pairs ``(x, y)``,
``s0 += x + s1; s1 += y + s0``. That step is linear, ``s' = M s + (x, x + y)``
with ``M = [[1, 1], [1, 2]]`` (mod 2**32), so a frame's checksum is the powers of
``M`` applied to its words: computed for every frame at once with numpy, a log
of 1,000 frames takes milliseconds.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["DroppedCommits", "dropped_commits", "frame_checksums"]

_HEADER_SIZE = 32
_FRAME_HEADER = 24
_MAGIC_BIG = 0x377F0683
_MASK = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class DroppedCommits:
    """What a damaged log holds beyond the point where SQLite stops reading it.

    Attributes:
        first_damaged: the number (from 1) of the first frame that fails its checks.
        frames: how many frames the log holds.
        commits: how many intact commit frames follow the damaged one (each one
            is a transaction SQLite would drop).
    """

    first_damaged: int
    frames: int
    commits: int


@functools.lru_cache(maxsize=8)
def _powers(pairs: int) -> NDArray[np.uint64]:
    """``M**k`` for ``k`` in ``0..pairs``, as rows ``(a, b, c, d)`` (mod 2**32)."""
    rows = np.zeros((pairs + 1, 4), dtype=np.uint64)
    a, b, c, d = 1, 0, 0, 1
    for k in range(pairs + 1):
        rows[k] = (a, b, c, d)
        a, b, c, d = (a + c) & _MASK, (b + d) & _MASK, (a + 2 * c) & _MASK, (b + 2 * d) & _MASK
    return rows


def frame_checksums(
    words: NDArray[np.uint32], seeds: NDArray[np.uint32]
) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """SQLite's checksum of each row of ``words``, each started from its own seed.

    Args:
        words: ``(frames, 2 * pairs)`` 32-bit words, already in the log's byte order.
        seeds: ``(frames, 2)``: the checksum each row starts from.

    Returns:
        The two checksum words of each row.
    """
    values = words.astype(np.uint64)
    x = values[:, 0::2]
    xy = x + values[:, 1::2]
    pairs = x.shape[1]
    powers = _powers(pairs)
    # the pair i is multiplied by M**(pairs - 1 - i)
    step = powers[pairs - 1 :: -1] if pairs else powers[:0]
    a, b, c, d = (step[:, n] for n in range(4))
    whole = powers[pairs]
    s0, s1 = seeds[:, 0].astype(np.uint64), seeds[:, 1].astype(np.uint64)
    with np.errstate(over="ignore"):  # wraps mod 2**64, a multiple of 2**32
        first = (x * a).sum(axis=1) + (xy * b).sum(axis=1) + whole[0] * s0 + whole[1] * s1
        second = (x * c).sum(axis=1) + (xy * d).sum(axis=1) + whole[2] * s0 + whole[3] * s1
    return first & _MASK, second & _MASK


def dropped_commits(data: bytes) -> DroppedCommits | None:
    """The commits SQLite would drop from the log ``data``; ``None`` when there are none.

    A log whose header is invalid is left to :func:`~spade_memory.storage.wal.check_wal`;
    a log that is intact, or torn only at its end (what a crash leaves), drops
    nothing that was acknowledged.
    """
    if len(data) < _HEADER_SIZE:
        return None
    magic, _, page_size, _, salt1, salt2, check1, check2 = struct.unpack_from(">8I", data)
    if magic not in (_MAGIC_BIG, _MAGIC_BIG - 1) or page_size < 512 or page_size & (page_size - 1):
        return None
    frame_size = _FRAME_HEADER + page_size
    count = (len(data) - _HEADER_SIZE) // frame_size
    if count == 0:
        return None
    frames = np.frombuffer(data, dtype=np.uint8, offset=_HEADER_SIZE, count=count * frame_size)
    frames = frames.reshape(count, frame_size)
    head = frames[:, :_FRAME_HEADER].copy().view(">u4").astype(np.uint32)  # (count, 6)
    order = ">u4" if magic == _MAGIC_BIG else "<u4"
    body = np.concatenate((frames[:, :8], frames[:, _FRAME_HEADER:]), axis=1)
    words = np.ascontiguousarray(body).view(order).astype(np.uint32)
    seeds = np.empty((count, 2), dtype=np.uint32)
    seeds[0] = (check1, check2)
    seeds[1:] = head[:-1, 4:6]
    first, second = frame_checksums(words, seeds)
    intact = (
        (head[:, 2] == salt1)
        & (head[:, 3] == salt2)
        & (head[:, 0] != 0)
        & (first == head[:, 4])
        & (second == head[:, 5])
    )
    damaged = np.flatnonzero(~intact)
    if not damaged.size:
        return None
    start = int(damaged[0])
    after = intact[start + 1 :] & (head[start + 1 :, 1] != 0)  # intact commit frames
    commits = int(after.sum())
    if not commits:
        return None
    return DroppedCommits(first_damaged=start + 1, frames=count, commits=commits)
