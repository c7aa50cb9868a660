"""Rules formation: a statement read from a turn kept as an episode weighs as that episode."""

from __future__ import annotations

from spade_memory.formation.offline import form_offline
from spade_memory.models import ConversationMessage, Role
from spade_memory.text.statements import KINDS


def _message(text: str, *, role: Role = "user") -> ConversationMessage:
    return ConversationMessage(
        id=1,
        conversation_id="c",
        role=role,
        sender="alice@example.org",
        text=text,
        at=1_683_554_160.0,
    )


def test_a_statement_takes_the_importance_of_its_episode() -> None:
    formed = form_offline([_message("I prefer green tea.")], categories=("fact", "preference"))
    episode, statement = formed
    assert episode.kind == "episode" and statement.kind == "preference"
    assert statement.importance == episode.importance < KINDS["preference"][1]
    assert statement.sources == episode.sources == (1,)


def test_without_episodes_a_statement_keeps_its_kinds_importance() -> None:
    formed = form_offline(
        [_message("I prefer green tea.")], categories=("fact", "preference"), episodes="none"
    )
    assert [(m.kind, m.importance) for m in formed] == [("preference", KINDS["preference"][1])]
