"""Which of a conversation's pending messages make windows that are closed, and so
ready to be formed into memories.

A *round* is one message of the partner (``role == "user"``) with the agent's
messages that follow it; it is complete once another message follows the partner's
(the agent's answer, or the partner writing again). A window closes:

- once its ``window_rounds``-th round is complete (right after the agent's first
  answer to the partner's ``window_rounds``-th message, or before the partner's next
  message);
- before a message written on another local calendar day than the one before it;
- before a silence longer than ``idle_seconds`` between two messages;
- at the end, once the last message is ``idle_seconds`` old (``now - at >=
  idle_seconds``), or at once when everything is to be formed now.

The agent's messages before the partner's first one belong to the window they
fall in and count for no round.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

from ..models import ConversationMessage

__all__ = ["closed_windows", "next_closing"]

Window = tuple[ConversationMessage, ...]


def _day(at: float) -> date | None:
    try:
        return datetime.fromtimestamp(at).date()
    except (OverflowError, OSError, ValueError):
        return None


def closed_windows(
    pending: Sequence[ConversationMessage],
    *,
    window_rounds: int,
    idle_seconds: float,
    now: float,
    everything: bool = False,
) -> list[Window]:
    """The closed windows at the head of ``pending``, oldest first.

    Args:
        pending: the conversation's messages not formed yet, in id order.
        window_rounds: the rounds that fill a window (at least 1).
        idle_seconds: a silence this long closes a window.
        now: the time to judge the last window by (seconds since the epoch).
        everything: close every window, the open one at the end included.

    Returns:
        Consecutive windows that together are a prefix of ``pending`` (all of it with
        ``everything``), none empty, each with at most ``window_rounds`` messages of
        the partner. What follows them stays pending.

    Raises:
        ValueError: ``window_rounds`` is below 1.
    """
    if window_rounds < 1:
        raise ValueError(f"window_rounds must be at least 1, got {window_rounds!r}")
    windows: list[Window] = []
    current: list[ConversationMessage] = []
    rounds = 0  # the partner's messages in the current window
    for message in pending:
        if current:
            previous = current[-1]
            apart = message.at - previous.at > idle_seconds
            new_day = _day(message.at) != _day(previous.at)
            if apart or new_day or (rounds >= window_rounds and message.role == "user"):
                windows.append(tuple(current))
                current, rounds = [], 0
        current.append(message)
        if message.role == "user":
            rounds += 1
        elif rounds >= window_rounds:  # the last round was answered: the window is full
            windows.append(tuple(current))
            current, rounds = [], 0
    if current and (everything or now - current[-1].at >= idle_seconds):
        windows.append(tuple(current))
    return windows


def next_closing(pending: Sequence[ConversationMessage], *, idle_seconds: float) -> float | None:
    """When the open window at the end of ``pending`` closes by silence: the last
    message's time plus ``idle_seconds``; ``None`` when nothing is pending.

    A new message moves it later; so ask again after each one.
    """
    if not pending:
        return None
    return pending[-1].at + idle_seconds
