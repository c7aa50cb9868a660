"""Benchmark plumbing: config overrides, BENCHMARKS.md sections, JSON output, a tiny real run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.data import parse_locomo
from benchmarks.harness import System, build_memory, parse_overrides, parse_variant, query_memory
from benchmarks.locomo import run_spade_memory, score_system
from benchmarks.metrics import aggregate
from benchmarks.report import command_line, replace_section, update_markdown, write_json


def test_parse_overrides_converts_to_the_field_types() -> None:
    overrides = parse_overrides(
        ["fusion_bm25_weight=0.3", "fusion_mode=rrf", "recall_candidate_multiplier=5"]
    )
    assert overrides == {
        "fusion_bm25_weight": 0.3,
        "fusion_mode": "rrf",
        "recall_candidate_multiplier": 5,
    }
    assert parse_overrides([]) == {}


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["fusion_bm25_weight"], "key=value"),
        (["no_such_knob=1"], "not a RetrievalConfig or RetrievalTuning field"),
        (["rerank_depth=0"], "rerank_depth"),
        (["recall_candidate_multiplier=2.5"], "takes a int"),
        (["fusion_bm25_weight=1.5"], r"\[0, 1\]"),
        (["fusion_mode=max"], "fusion_mode"),
    ],
)
def test_parse_overrides_refuses_bad_pairs(pairs: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_overrides(pairs)


def test_parse_variant() -> None:
    assert parse_variant("lean:mmr_lambda=1.0, agreement_bonus=0") == (
        "lean",
        {"mmr_lambda": 1.0, "agreement_bonus": 0.0},
    )
    assert parse_variant("plain:") == ("plain", {})
    # a knob of RetrievalConfig.tuning, by its flat name
    assert parse_variant("deep:rerank_depth=80,vector_fill=true") == (
        "deep",
        {"rerank_depth": 80, "vector_fill": True},
    )
    with pytest.raises(ValueError, match="label"):
        parse_variant("mmr_lambda=1.0")


def test_system_overrides_win_over_the_base() -> None:
    system = System("v", overrides={"fusion_bm25_weight": 0.0})
    config = system.retrieval({"fusion_bm25_weight": 0.3, "mmr_lambda": 1.0})
    assert (config.fusion_bm25_weight, config.mmr_lambda) == (0.0, 1.0)
    assert system.label() == "fusion_bm25_weight=0.0"
    assert System("d").label() == "defaults"
    tuned = System("t", overrides={"rerank_depth": 10}).retrieval({"mmr_lambda": 1.0})
    assert (tuned.tuning.rerank_depth, tuned.mmr_lambda) == (10, 1.0)


def test_replace_section_appends_then_replaces_in_place() -> None:
    document = "# Benchmarks\n\nIntro.\n"
    first = replace_section(document, "locomo", "table one", heading="LoCoMo")
    assert first == (
        "# Benchmarks\n\nIntro.\n\n## LoCoMo\n\n<!-- locomo:start -->\ntable one\n"
        "<!-- locomo:end -->\n"
    )
    with_other = first + "\n## Other\n\nkept\n"
    second = replace_section(with_other, "locomo", "table two\n", heading="ignored")
    assert "table one" not in second
    assert second.count("## LoCoMo") == 1
    assert second.endswith("<!-- locomo:end -->\n\n## Other\n\nkept\n")
    assert replace_section(second, "locomo", "table two", heading="x") == second


def test_replace_section_refuses_broken_markers_and_names() -> None:
    with pytest.raises(ValueError, match="markers"):
        replace_section("<!-- cmrc:end -->\n<!-- cmrc:start -->\n", "cmrc", "x", heading="C")
    with pytest.raises(ValueError, match="markers"):
        replace_section("<!-- cmrc:start -->\n", "cmrc", "x", heading="C")
    with pytest.raises(ValueError, match="section name"):
        replace_section("", "Bad Name", "x", heading="C")


def test_update_markdown_and_write_json(tmp_path: Path) -> None:
    target = tmp_path / "BENCHMARKS.md"
    update_markdown("cmrc", "| a |", heading="CMRC", path=target)
    update_markdown("locomo", "| b |", heading="LoCoMo", path=target)
    update_markdown("cmrc", "| c |", heading="CMRC", path=target)
    text = target.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n")
    assert "| c |" in text and "| a |" not in text and "| b |" in text
    assert text.index("## CMRC") < text.index("## LoCoMo")
    written = write_json("demo", {"value": 1}, directory=tmp_path / "results")
    payload = json.loads(written.read_text(encoding="utf-8"))
    assert payload["benchmark"] == "demo" and payload["value"] == 1
    assert written.parent == tmp_path / "results"


def test_command_line_leaves_out_write_md_and_note() -> None:
    argv = ["--write-md", "--note", "on a quiet machine", "--systems", "a b", "--note=x"]
    assert command_line("benchmarks.cmrc", argv) == (
        ".venv/bin/python -m benchmarks.cmrc --systems 'a b'"
    )


def _conversation() -> list[dict[str, object]]:
    topics = [
        "I adopted a puppy named Biscuit from the shelter",
        "my sister is getting married in Lisbon next spring",
        "I started learning the violin at the community center",
        "the marathon training is going well, twenty miles last week",
        "our basement flooded after the storm",
        "I finally finished painting the sunset over the lake",
    ]
    turns = [
        {"dia_id": f"D1:{n}", "speaker": "Ann" if n % 2 else "Bob", "text": text}
        for n, text in enumerate(topics, start=1)
    ]
    return [
        {
            "sample_id": "tiny",
            "conversation": {"session_1_date_time": "1 May 2023", "session_1": turns},
            "qa": [
                {"question": "What is the puppy called?", "evidence": ["D1:1"], "category": 4},
                {
                    "question": "Where is the sister getting married?",
                    "evidence": ["D1:2"],
                    "category": 1,
                },
                {"question": "What did Bob paint?", "evidence": ["D1:6"], "category": 5},
                {"question": "Unanswerable?", "evidence": ["D7:7"], "category": 2},
            ],
        }
    ]


async def test_a_tiny_locomo_run_shares_one_index_per_embedder() -> None:
    conversations = parse_locomo(_conversation())
    systems = [
        System("keyword", embedder=None),
        System("hashed", embedder="hashing"),
        System("hashed-rrf", embedder="hashing", overrides={"fusion_mode": "rrf"}),
    ]
    results = await run_spade_memory(conversations, systems, base_overrides={"mmr_lambda": 1.0})
    assert results["hashed-rrf"].index_shared_with == "hashed"
    assert results["keyword"].index_shared_with is None
    for result in results.values():
        rankings = result.rankings["tiny"]
        assert len(rankings) == 4 and len(result.query_seconds) == 4
        assert rankings[0][0] == "D1:1"  # "puppy" names one turn only
        scores = score_system(conversations, result)
        assert [s.group for s in scores] == ["4", "1", "5"]  # no gold left: not scored
        assert aggregate(scores).hit10 == 1.0


async def test_query_memory_calls_prepare_before_each_search(tmp_path: Path) -> None:
    batches = [[{"content": "Alice likes green tea.", "metadata": {"id": "a"}}]]
    await build_memory(tmp_path, None, batches)
    seen: list[tuple[bool, str]] = []

    def prepare(manager: object, query: str) -> None:
        seen.append((hasattr(manager, "search"), query))

    system = System("kw", embedder=None)
    queries = ["green tea", "coffee"]
    run = await query_memory(tmp_path, system, queries, key="id", limit=3, prepare=prepare)
    assert seen == [(True, "green tea"), (True, "coffee")]
    assert run.rankings[0] == ["a"] and len(run.seconds) == 2
