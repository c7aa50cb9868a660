"""The CJK character ranges are defined once (``text.scripts``): with kana for telling
a text's script, without them where Chinese is meant."""

from __future__ import annotations

import re
from pathlib import Path

from spade_memory.text.extraction import needs_segmenter
from spade_memory.text.scripts import CJK_RUN, HAN, HAN_RUN, script_of

PACKAGE = Path(__file__).resolve().parents[2] / "spade_memory"

# Modules with character classes of their own, and why.
OWN_RANGES = {
    "text/scripts.py": "the definitions",
    "text/tokenizer.py": "finer classes for cutting text (iteration marks, extension B+)",
    "testing/scripted_llm.py": "a layer below text: it cannot import it",
}

_RANGE = re.compile(r"\\u(?:3040|3400|4e00|9fff)", re.IGNORECASE)


def test_the_ranges_are_defined_once() -> None:
    defining = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if _RANGE.search(path.read_text(encoding="utf-8"))
    }
    assert defining <= set(OWN_RANGES), sorted(defining - set(OWN_RANGES))


def test_kana_count_as_cjk_script_but_not_as_chinese() -> None:
    kana = "ありがとうございます"
    assert script_of(kana) == "cjk" and CJK_RUN.fullmatch(kana)
    assert HAN.search(kana) is None and HAN_RUN.search(kana) is None
    assert not needs_segmenter(kana)
    assert needs_segmenter("谢谢你") and needs_segmenter("東京へ行きます")
    assert HAN_RUN.findall("東京へ行きます") == ["東京", "行"]
    assert CJK_RUN.findall("東京へ行きます, ok") == ["東京へ行きます"]
    assert script_of("plain English") == "latin" and not HAN.search("plain English")
