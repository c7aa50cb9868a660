"""Strict JSON parsing shared by tool arguments and sharing messages."""

from __future__ import annotations

import pytest

from spade_memory.validation import JSONRejected, loads_strict


@pytest.mark.parametrize(
    ("text", "reason", "detail"),
    [
        ('{"a": NaN}', "constant", "NaN"),
        ('{"a": -Infinity}', "constant", "-Infinity"),
        ('{"a": 1, "a": 2}', "duplicate", "a"),
        ('{"a": {"b": 1, "b": 1}}', "duplicate", "b"),
        ('{"a": ', "syntax", "Expecting value"),
        ("[" * 100_000 + "]" * 100_000, "depth", ""),
    ],
)
def test_what_json_forbids_is_refused_with_its_reason(text: str, reason: str, detail: str) -> None:
    with pytest.raises(JSONRejected) as refused:
        loads_strict(text)
    assert refused.value.reason == reason
    assert refused.value.detail == detail


def test_valid_json_parses_as_json_does() -> None:
    assert loads_strict('{"a": [1, 2.5, "x", null, true], "b": {"c": "d"}}') == {
        "a": [1, 2.5, "x", None, True],
        "b": {"c": "d"},
    }
    with pytest.raises(JSONRejected) as refused:
        loads_strict('{"a": 1} x')
    assert refused.value.reason == "syntax" and refused.value.position == 9
