"""Benchmark dataset loaders and LoCoMo evidence normalisation, on hand-made data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.cmrc import cmrc_batches
from benchmarks.data import (
    CMRC_FILE,
    DATA_ENV,
    LOCOMO_FILE,
    DataError,
    Turn,
    load_cmrc,
    load_locomo,
    normalise_evidence,
    parse_cmrc,
    parse_locomo,
    resolve_data_dir,
    resolve_evidence,
)
from benchmarks.locomo import locomo_batches


@pytest.mark.parametrize(
    ("raw", "ids", "malformed"),
    [
        (["D1:3"], ["D1:3"], []),
        (["D8:6; D9:17"], ["D8:6", "D9:17"], []),
        (["D:11:26"], ["D11:26"], []),
        ([" D3:4 ", "D 3 : 5"], ["D3:4", "D3:5"], []),
        (["D01:02", "D1:2"], ["D1:2"], []),
        (["D2:1,D2:2"], ["D2:1", "D2:2"], []),
        (["D"], [], ["D"]),
        (["D4:1; see above"], ["D4:1"], ["see", "above"]),
        ([], [], []),
    ],
)
def test_normalise_evidence(raw: list[str], ids: list[str], malformed: list[str]) -> None:
    assert normalise_evidence(raw) == (ids, malformed)


_ids = st.lists(st.tuples(st.integers(0, 99), st.integers(0, 999)), min_size=1, max_size=6)


@given(_ids, st.sampled_from(["; ", ";", " ", ", ", " ;  "]), st.booleans())
def test_normalise_evidence_recovers_every_id(
    pairs: list[tuple[int, int]], separator: str, stray_colon: bool
) -> None:
    colon = ":" if stray_colon else ""
    entry = separator.join(f"D{colon}{session}:{turn}" for session, turn in pairs)
    expected = list(dict.fromkeys(f"D{session}:{turn}" for session, turn in pairs))
    assert normalise_evidence([entry]) == (expected, [])


def test_resolve_evidence_drops_ids_the_conversation_lacks() -> None:
    gold, dropped = resolve_evidence(["D1:1; D9:9", "D", "D:1:2"], {"D1:1", "D1:2"})
    assert gold == ["D1:1", "D1:2"]
    assert dropped == ["D", "D9:9"]


def test_turn_content_includes_the_photo_caption() -> None:
    assert Turn("D1:1", "Ann", "Look!", "a photo of a cat").content == (
        "Ann: Look! [shares photo: a photo of a cat]"
    )
    assert Turn("D1:2", "Bob", "Nice.").content == "Bob: Nice."


def _locomo_sample() -> list[dict[str, Any]]:
    def turn(dia_id: str, speaker: str, text: str, **extra: Any) -> dict[str, Any]:
        return {"dia_id": dia_id, "speaker": speaker, "text": text, **extra}

    return [
        {
            "sample_id": "conv-x",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bob",
                "session_10_date_time": "9:00 am on 3 June, 2023",
                "session_10": [turn("D10:1", "Ann", "I sold my bike.")],
                "session_2_date_time": "1:00 pm on 2 May, 2023",
                "session_2": [
                    turn("D2:1", "Bob", "Guess what?"),
                    turn("D2:2", "Ann", "Show me", blip_caption="a photo of a red bike"),
                ],
                "session_3_date_time": "a date with no session",
            },
            "qa": [
                {"question": "What colour was the bike?", "answer": "red",
                 "evidence": ["D2:2"], "category": 4},
                {"question": "When was it sold?", "answer": "June 2023",
                 "evidence": ["D10:1; D10:7", "D"], "category": 2},
                {"question": "Who sold a car?", "adversarial_answer": "Ann",
                 "evidence": ["D:2:1"], "category": 5},
            ],
        },
        {"sample_id": "conv-y", "conversation": {}, "qa": []},
    ]  # fmt: skip


def test_parse_locomo_orders_sessions_and_checks_evidence() -> None:
    conversations = parse_locomo(_locomo_sample())
    assert [c.sample_id for c in conversations] == ["conv-x", "conv-y"]
    conversation = conversations[0]
    assert [s.id for s in conversation.sessions] == ["session_2", "session_10"]
    assert conversation.sessions[0].date == "1:00 pm on 2 May, 2023"
    assert conversation.turn_ids == {"D2:1", "D2:2", "D10:1"}
    assert conversation.turn_count == 3
    assert conversation.sessions[0].turns[1].caption == "a photo of a red bike"
    first, second, third = conversation.questions
    assert (first.gold, first.category, first.answer) == (("D2:2",), 4, "red")
    assert second.gold == ("D10:1",)
    assert second.dropped == ("D", "D10:7")
    assert (third.gold, third.answer) == (("D2:1",), "Ann")
    assert conversation.dropped_evidence == 2
    assert conversations[1].sessions == () and conversations[1].questions == ()


def test_parse_locomo_refuses_other_shapes() -> None:
    with pytest.raises(DataError):
        parse_locomo({"qa": []})
    with pytest.raises(DataError):
        parse_locomo([{"qa": []}])


def test_locomo_batches_store_one_session_per_batch() -> None:
    conversation = parse_locomo(_locomo_sample())[0]
    batches = locomo_batches(conversation)
    assert [len(batch) for batch in batches] == [2, 1]
    assert batches[0][1] == {
        "content": "Ann: Show me [shares photo: a photo of a red bike]",
        "context": "1:00 pm on 2 May, 2023",
        "metadata": {"dia_id": "D2:2"},
        "source_conversation": "session_2",
    }


def _write(path: Path, content: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content, ensure_ascii=False), encoding="utf-8")


def test_data_dir_from_argument_then_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    explicit = tmp_path / "explicit"
    explicit.mkdir()
    from_env = tmp_path / "env"
    from_env.mkdir()
    monkeypatch.setenv(DATA_ENV, str(from_env))
    assert resolve_data_dir(explicit) == explicit.resolve()
    assert resolve_data_dir() == from_env.resolve()
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "missing"))
    with pytest.raises(DataError, match="--data"):
        resolve_data_dir()


def test_load_locomo_reads_the_file_and_limits(tmp_path: Path) -> None:
    _write(tmp_path / LOCOMO_FILE, _locomo_sample())
    assert [c.sample_id for c in load_locomo(tmp_path, limit=1)] == ["conv-x"]
    with pytest.raises(DataError, match="not found"):
        load_locomo(tmp_path / "nowhere")


def _squad() -> dict[str, Any]:
    return {
        "version": "v1.0",
        "data": [
            {
                "id": "A1",
                "title": "猫",
                "paragraphs": [
                    {
                        "id": "A1_P1",
                        "context": "猫是一种小型食肉动物。",
                        "qas": [
                            {"id": "Q1", "question": "猫是什么动物？", "answers": []},
                            {"id": "Q2", "question": "  ", "answers": []},
                        ],
                    },
                    {
                        "context": "家猫常被人类饲养。",
                        "qas": [{"id": "Q3", "question": "谁养猫？"}],
                    },
                ],
            }
        ],
    }


def test_parse_cmrc_paragraphs_and_questions() -> None:
    data = parse_cmrc(_squad())
    assert [p.id for p in data.paragraphs] == ["A1_P1", "A1#1"]
    assert data.paragraphs[0].title == "猫"
    assert [(q.id, q.paragraph_id) for q in data.questions] == [("Q1", "A1_P1"), ("Q3", "A1#1")]
    limited = parse_cmrc(_squad(), limit=1)
    assert [p.id for p in limited.paragraphs] == ["A1_P1"]
    assert [q.id for q in limited.questions] == ["Q1"]
    batches = cmrc_batches(data, size=1)
    assert [b[0]["metadata"]["paragraph_id"] for b in batches] == ["A1_P1", "A1#1"]


def test_parse_cmrc_refuses_bad_data(tmp_path: Path) -> None:
    with pytest.raises(DataError):
        parse_cmrc([])
    duplicated = _squad()
    duplicated["data"][0]["paragraphs"][1]["id"] = "A1_P1"
    with pytest.raises(DataError, match="unique"):
        parse_cmrc(duplicated)
    _write(tmp_path / CMRC_FILE, _squad())
    assert len(load_cmrc(tmp_path).questions) == 2
