"""Places and institutions jieba's dictionary tags as people's names, and English
names opening a sentence before an irregular past tense."""

from __future__ import annotations

import pytest

from spade_memory.text.extraction import EntityExtractor
from spade_memory.text.mentions import MentionFinder

FINDER = MentionFinder()
X = EntityExtractor()


def people(text: str) -> list[str]:
    return [m.entity.value for m in FINDER.find(text) if m.entity.type == "person"]


def keys(text: str) -> set[str]:
    return {entity.key for entity in X.extract(text).entities}


@pytest.mark.parametrize(
    ("text", "place"),
    [
        # tagged nr by jieba's dictionary, ending with a place or group character
        ("邓洁在托老所做义工。", "托老所"),
        ("周末我们去碧桂园看房。", "碧桂园"),
        ("罗浩在雷达站值班。", "雷达站"),
    ],
)
def test_a_dictionary_name_ending_with_a_place_character_is_a_topic(text: str, place: str) -> None:
    assert place not in people(text)
    assert f"topic:{place}" in keys(text)


def test_the_person_beside_the_place_is_still_a_person() -> None:
    assert people("邓洁在托老所做义工。") == ["邓洁"]
    assert people("郭守敬是天文学家。") == ["郭守敬"]  # a name of the dictionary stays one


def test_a_dictionary_name_before_an_organisation_word_names_the_organisation() -> None:
    # 玉兔 is tagged nr and starts with no surname: alone it names nobody, but
    # before 项目 it names the project, which the people who join it share
    assert "玉兔项目" in keys("郑伟加入了玉兔项目。")
    assert "玉兔项目" in keys("玉兔项目下周开评审会。")
    assert "玉兔" not in keys("玉兔是月亮上的兔子。")


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Mara fell off her bike.", "mara"),
        ("Tomas swam across the lake.", "tomas"),
        ("Nadia won the race.", "nadia"),
        ("Ines broke her phone again.", "ines"),
    ],
)
def test_a_name_opening_a_sentence_before_an_irregular_past(text: str, name: str) -> None:
    assert name in keys(text)


@pytest.mark.parametrize("text", ["Honestly broke my heart.", "Yesterday fell on a Sunday."])
def test_a_capitalised_opener_before_a_past_is_no_name(text: str) -> None:
    assert not {key for key in keys(text) if not key.startswith(("topic:", "weekday:"))}
