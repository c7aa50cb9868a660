"""Closed windows of a conversation's pending messages: rounds, day changes, silences,
the open tail, and when it closes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.formation.windows import closed_windows, next_closing
from spade_memory.models import ConversationMessage
from tests.formation.conftest import NOON, message

HOUR = 3600.0


def ids(windows: Sequence[Sequence[ConversationMessage]]) -> list[list[int]]:
    return [[m.id for m in window] for window in windows]


def chat(*roles: str, step: float = 60.0, start: float = NOON) -> list[ConversationMessage]:
    """Messages 1..n with the given roles ("u" or "a"), ``step`` seconds apart."""
    return [
        message(i, "user" if role == "u" else "assistant", at=start + step * (i - 1))
        for i, role in enumerate(roles, start=1)
    ]


def windows_of(
    pending: list[ConversationMessage], rounds: int = 2, **kw: object
) -> list[list[int]]:
    now = kw.pop("now", pending[-1].at + 1 if pending else NOON)
    return ids(
        closed_windows(pending, window_rounds=rounds, idle_seconds=HOUR, now=now, **kw)  # type: ignore[arg-type]
    )


def test_a_window_closes_once_its_last_round_is_answered() -> None:
    pending = chat("u", "a", "u", "a", "u", "a", "u")
    assert windows_of(pending) == [[1, 2, 3, 4]]
    assert windows_of(chat("u", "a", "u", "a", "u", "a", "u", "a")) == [[1, 2, 3, 4], [5, 6, 7, 8]]


def test_the_last_round_is_complete_when_the_partner_writes_again() -> None:
    pending = chat("u", "u", "u")
    assert windows_of(pending) == [[1, 2]]
    assert windows_of(chat("u", "a", "u")) == []  # the second round waits for its answer


def test_an_answer_in_two_messages_closes_after_the_first() -> None:
    # the second part of the answer opens the next window (it counts for no round)
    assert windows_of(chat("u", "a", "a", "u"), rounds=1) == [[1, 2]]
    assert windows_of(chat("u", "a", "a", "u", "a"), rounds=1) == [[1, 2], [3, 4, 5]]


def test_the_agents_messages_before_the_partner_count_no_round() -> None:
    assert windows_of(chat("a", "a", "u", "a", "u", "a")) == [[1, 2, 3, 4, 5, 6]]


def test_a_silence_closes_a_window() -> None:
    pending = chat("u", "a")
    later = message(3, "user", at=pending[-1].at + HOUR + 1)
    assert windows_of([*pending, later], rounds=10) == [[1, 2]]
    exactly = message(3, "user", at=pending[-1].at + HOUR)
    assert windows_of([*pending, exactly], rounds=10) == []


def test_a_new_day_closes_a_window() -> None:
    late = datetime(2023, 5, 8, 23, 58).timestamp()
    pending = [
        message(1, "user", at=late),
        message(2, "assistant", at=late + 60),
        message(3, "user", at=late + 180),  # 00:01 the next day
    ]
    assert (datetime.fromtimestamp(late + 180) - timedelta(days=1)).day == 8
    assert windows_of(pending, rounds=10) == [[1, 2]]


def test_the_open_tail_closes_after_a_silence_or_when_asked() -> None:
    pending = chat("u", "a", "u")
    assert windows_of(pending, rounds=10) == []
    assert windows_of(pending, rounds=10, now=pending[-1].at + HOUR) == [[1, 2, 3]]
    assert windows_of(pending, rounds=10, everything=True) == [[1, 2, 3]]
    assert windows_of(chat("u", "a", "u", "a", "u"), everything=True) == [[1, 2, 3, 4], [5]]


def test_nothing_pending_closes_nothing() -> None:
    assert windows_of([], everything=True) == []
    assert next_closing([], idle_seconds=HOUR) is None


def test_next_closing_is_the_last_message_plus_the_silence() -> None:
    pending = chat("u", "a", "u")
    assert next_closing(pending, idle_seconds=HOUR) == pending[-1].at + HOUR
    when = next_closing(pending, idle_seconds=HOUR)
    assert when is not None
    assert windows_of(pending, rounds=10, now=when) == [[1, 2, 3]]
    assert windows_of(pending, rounds=10, now=when - 1) == []


def test_window_rounds_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="window_rounds"):
        closed_windows(chat("u"), window_rounds=0, idle_seconds=HOUR, now=NOON)


_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["user", "assistant"]),
        st.sampled_from([0.0, 30.0, 600.0, HOUR - 1, HOUR, HOUR + 1, 20 * HOUR]),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_STEPS, st.integers(1, 5), st.floats(0, 3 * HOUR), st.booleans())
def test_windows_partition_a_prefix_in_order(
    steps: list[tuple[str, float]], rounds: int, wait: float, everything: bool
) -> None:
    pending: list[ConversationMessage] = []
    at = NOON
    for number, (role, gap) in enumerate(steps, start=1):
        at += gap
        pending.append(message(number, role, at=at))
    now = (pending[-1].at if pending else NOON) + wait
    windows = closed_windows(
        pending, window_rounds=rounds, idle_seconds=HOUR, now=now, everything=everything
    )
    flat = [m for window in windows for m in window]
    assert flat == pending[: len(flat)]
    assert all(window for window in windows)
    assert all(sum(m.role == "user" for m in window) <= rounds for window in windows)
    if everything:
        assert flat == pending
    for window in windows:  # no window spans a silence or a day change
        for before, after in pairwise(window):
            assert after.at - before.at <= HOUR
            assert (
                datetime.fromtimestamp(after.at).date() == datetime.fromtimestamp(before.at).date()
            )
    # closing again what was left closes the same way: what is closed stays closed
    rest = pending[len(flat) :]
    again = closed_windows(rest, window_rounds=rounds, idle_seconds=HOUR, now=now)
    assert again == [] or everything
