"""Messages of a conversation, made the way the conversation store keeps them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest

from spade_memory.models import ConversationMessage

MakeMessage = Callable[..., ConversationMessage]

PARTNER = "alice@example.org"
AGENT = "helper@example.org"
NOON = datetime(2023, 5, 8, 13, 56).timestamp()  # local time: 1:56 pm on 8 May, 2023


def message(
    id: int,
    role: str = "user",
    text: str = "hello there, a message",
    at: float | None = None,
    sender: str | None = None,
) -> ConversationMessage:
    """One message, by default the partner's, a minute after the one before."""
    return ConversationMessage(
        id=id,
        conversation_id="alice@example.org|helper@example.org",
        role=role,  # type: ignore[arg-type]
        sender=sender or (PARTNER if role == "user" else AGENT),
        text=text,
        at=NOON + 60 * id if at is None else at,
    )


@pytest.fixture
def make_message() -> MakeMessage:
    return message
