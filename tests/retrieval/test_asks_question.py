"""One rule for "this memory asks": the neighbour share and the second stage agree."""

from __future__ import annotations

import sqlite3

import pytest

from spade_memory.retrieval.rerank import asks_question

_MARKS = ("?", "\uff1f")


@pytest.mark.parametrize(
    "content",
    ["Really?", "Really?  ", "Really?\n", "真的吗？", "真的吗？ ", "Fine.", "Fine. ?", "", "?"],
)
def test_asks_question_agrees_with_the_sql_the_second_stage_reads(content: str) -> None:
    with sqlite3.connect(":memory:") as db:
        (last,) = db.execute("SELECT substr(rtrim(?), -1)", (content,)).fetchone()
    assert asks_question(content) == (last in _MARKS)
