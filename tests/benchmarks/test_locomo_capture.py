"""LoCoMo through capture: session dates, speakers, hits mapped to turns through sources,
their scores, and the cost benchmark's windows."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from benchmarks.data import Conversation, Question, Session, Turn
from benchmarks.locomo_capture import (
    capture_conversation,
    parse_session_date,
    score_capture,
    score_hits,
    speaker_jid,
    subset_aggregates,
    turn_text,
)
from benchmarks.metrics import score_question
from benchmarks.perf_common import TextGenerator
from benchmarks.perf_formation import ROUNDS, measure_append, measure_formation, window_lines
from spade_memory.models import ConversationMessage


def test_a_session_date_is_read_as_a_local_time() -> None:
    assert parse_session_date("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56)
    assert parse_session_date("12:06 am on 11 November,  2022") == datetime(2022, 11, 11, 0, 6)
    with pytest.raises(ValueError):
        parse_session_date("sometime in May")


def test_a_speaker_jid_gives_the_name_back_as_the_messages_speaker() -> None:
    jid = speaker_jid("Caroline")
    assert jid == "caroline@locomo.example"
    message = ConversationMessage(
        id=1, conversation_id="c", role="user", sender=jid, text="hi", at=0.0
    )
    assert message.speaker == "Caroline"


def test_a_turns_text_keeps_its_photo_caption() -> None:
    turn = Turn(dia_id="D1:1", speaker="Ann", text="Look!", caption="a red kite")
    assert turn_text(turn) == "Look! [shares photo: a red kite]"
    assert f"Ann: {turn_text(turn)}" == turn.content


def test_one_turn_per_hit_scores_as_the_stored_turns_do() -> None:
    ranking = ["D1:3", "D1:1", "D1:2", "D1:1", "D2:5"]
    gold = ("D1:2", "D2:5", "D9:9")
    hits = [(item,) for item in ranking]
    assert score_hits(hits, gold, group="1") == score_question(ranking, gold, group="1")


def test_a_hit_counts_as_every_turn_among_its_sources() -> None:
    hits: list[tuple[str, ...]] = [(), ("D1:1", "D1:4"), ("D1:2",)]
    score = score_hits(hits, ("D1:4", "D1:2"), group="4")
    assert score.recall10 == 1.0 and score.hit1 == 0.0 and score.mrr10 == 0.5
    assert score_hits(hits[:2], ("D1:4", "D1:2"), group="4").recall10 == 0.5
    with pytest.raises(ValueError):
        score_hits(hits, (), group="4")


def _conversation() -> Conversation:
    lines = [
        ("D1:1", "Ann", "Hi Bob!"),
        ("D1:2", "Bob", "Hey Ann, how was the weekend?"),
        ("D1:3", "Ann", "I adopted a puppy called Biscuit on Saturday."),
        ("D1:4", "Bob", "A puppy! I went sailing on the lake with my brother."),
    ]
    first = Session(
        "session_1",
        "1:56 pm on 8 May, 2023",
        tuple(Turn(dia_id=i, speaker=s, text=t) for i, s, t in lines),
    )
    second = Session(
        "session_2",
        "10:00 am on 20 May, 2023",
        (
            Turn("D2:1", "Ann", "Biscuit chewed my violin case.", caption="a puppy"),
            Turn("D2:2", "Bob", "Thanks!"),
        ),
    )
    questions = (
        Question(text="What is the name of Ann's puppy?", category=4, gold=("D1:3",)),
        Question(text="Where did Bob go sailing?", category=1, gold=("D1:4",)),
        Question(text="What did Biscuit chew?", category=2, gold=("D2:1",)),
        Question(text="Unscored", category=5, gold=()),
    )
    return Conversation("conv-x", (first, second), questions)


async def test_capture_maps_every_hit_to_its_dialog_turns(tmp_path: Path) -> None:
    conversation = _conversation()
    run = await capture_conversation(tmp_path, conversation, "hashing")
    assert run.messages == conversation.turn_count
    assert run.memories >= 4  # the small talk is not formed; statements may be
    assert len(run.hits) == len(conversation.questions)
    known = conversation.turn_ids
    assert all(set(hit) <= known and hit for hits in run.hits for hit in hits)
    assert not any("D2:2" in hit for hits in run.hits for hit in hits)  # "Thanks!"
    for question, hits in zip(conversation.questions[:3], run.hits, strict=False):
        assert question.gold[0] in {item for hit in hits[:3] for item in hit}
    scores = score_capture([conversation], {conversation.sample_id: run})
    assert [score.group for _, score in scores] == ["4", "1", "2"]
    figures = subset_aggregates([conversation], scores)
    assert list(figures) == ["all"]  # subsets need conversations 0-4
    assert figures["all"]["1-4"].count == 3 and figures["all"]["1-4"].recall10 == 1.0


def test_a_cost_window_has_ten_rounds_some_saying_something() -> None:
    lines = window_lines(TextGenerator(seed=3), 0)
    assert [role for role, _ in lines] == ["user", "assistant"] * ROUNDS
    assert sum(text.startswith(("I ", "My ")) for _, text in lines) >= 3


async def test_the_cost_benchmark_forms_one_window_each_time(tmp_path: Path) -> None:
    append = await measure_append(tmp_path / "append", appends=12, embedder="none")
    assert append["count"] == 12 and append["p50_ms"] > 0
    figures = await measure_formation(tmp_path / "form", size=40, windows=2, embedder="none")
    assert figures["count"] == 2 and figures["reference"]["count"] == 2
    assert figures["memories_per_window"] >= 2 * ROUNDS
    assert figures["memories_after"] >= 40 + 3 * 2 * ROUNDS
