"""The LoCoMo reach analysis: how missed evidence is linked, and the named-speaker oracle."""

from __future__ import annotations

from benchmarks.data import Conversation, Question, Session, Turn
from benchmarks.locomo_reach import (
    Reach,
    classify_missed,
    measure_conversation,
    named_speakers,
    reach_table,
    speaker_oracle,
)
from spade_memory.retrieval.graph import hub_threshold
from spade_memory.text.extraction import get_extractor


def test_a_shared_rare_entity_links_a_missed_turn() -> None:
    kind = classify_missed({"paris", "alice"}, {"paris", "bob"}, {}, {"paris": 2, "alice": 90}, 20)
    assert kind == "rare entity"


def test_a_shared_hub_or_speaker_links_nothing() -> None:
    counts = {"alice": 90, "speaker:alice": 3}
    assert classify_missed({"alice"}, {"alice"}, {}, counts, 20) == "speaker only"
    assert classify_missed({"speaker:alice"}, {"speaker:alice"}, {}, counts, 20) == "speaker only"


def test_an_entity_one_typed_relation_away_is_a_hop() -> None:
    neighbours = {"alice": {"acme"}}
    counts = {"alice": 90, "acme": 3}
    assert classify_missed({"alice"}, {"acme"}, neighbours, counts, 20) == "typed hop"
    # a hub at the far end of the relation links nothing either
    assert classify_missed({"alice"}, {"acme"}, neighbours, {**counts, "acme": 50}, 20) == (
        "speaker only"
    )


def test_an_entity_of_the_best_hits_is_feedback() -> None:
    counts = {"alice": 90, "lisbon": 3}
    kind = classify_missed({"alice"}, {"lisbon"}, {}, counts, 20, feedback_keys={"lisbon"})
    assert kind == "top-5 entity"
    assert classify_missed({"alice"}, {"lisbon"}, {}, counts, 20) == "speaker only"
    hub_only = classify_missed({"alice"}, {"alice"}, {}, counts, 20, feedback_keys={"alice"})
    assert hub_only == "speaker only"


def test_named_speakers_are_whole_words_in_any_case() -> None:
    assert named_speakers("What did JOHN paint?", ["John", "Jon"]) == ["John"]
    assert named_speakers("Did Jon and Gina dance?", ["Gina", "Jon", "John"]) == ["Gina", "Jon"]
    assert named_speakers("What is new?", ["Jon"]) == []


def test_the_oracle_puts_the_named_speakers_turns_first() -> None:
    said_by = {"a": "Ann", "b": "Bo", "c": "Ann", "d": "Bo"}
    assert speaker_oracle(["a", "b", "c", "d"], said_by, ["Bo"], k=3) == ["b", "d", "a"]
    assert speaker_oracle(["a", "b"], said_by, [], k=3) is None
    assert speaker_oracle(["a", "b"], said_by, ["Ann", "Bo"], k=3) is None


def _conversation() -> Conversation:
    lines = [
        ("D1:1", "Alice", "I moved to Lisbon last spring."),
        ("D1:2", "Bob", "Lisbon is lovely. I went swimming today."),
        ("D1:3", "Alice", "I painted a sunset yesterday."),
        ("D1:4", "Bob", "Nice one, Alice."),
    ]
    turns = tuple(Turn(dia_id=i, speaker=s, text=t) for i, s, t in lines)
    questions = (
        Question(text="Where does Alice live now?", category=4, gold=("D1:1",)),
        Question(text="What did Bob do in Lisbon?", category=1, gold=("D1:2", "D1:3")),
        Question(text="Unscored", category=2, gold=()),
    )
    return Conversation("c1", (Session("session_1", "", turns),), questions)


def test_measure_counts_missed_evidence_and_scores_the_oracle() -> None:
    conversation = _conversation()
    reach = Reach()
    top10 = [["D1:1"], ["D1:4", "D1:1"], []]
    top50 = [["D1:1", "D1:2"], ["D1:4", "D1:1", "D1:3", "D1:2"], []]
    measure_conversation(
        conversation, top10, top50, reach, extractor=get_extractor(), hub_fraction=0.2
    )
    assert dict(reach.evidence) == {4: 1, 1: 2}
    assert dict(reach.missed) == {1: 2}
    # "Lisbon" is named by two turns, below the hub size of a tiny memory
    assert hub_threshold(4, 0.2) >= 2
    assert reach.rare[1] == 1  # D1:2 says Lisbon, as the question does
    assert reach.feedback[1] == 1  # D1:3 names Alice, as D1:4 does (no hub in 4 turns)
    assert reach.document == {4: [1.0], 1: [0.0]}
    # Bob is named: his turns come first, D1:2 (gold) and D1:4 (not), then the rest
    assert reach.oracle[1] == [1.0]
    table = reach_table(reach)
    assert "1 multi-hop" in table and "+1.000" in table
