"""Typo tolerance: a query term no memory holds is also searched as the held terms
one typo away from it; a held term, a short one or a Chinese one never is."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory import MemoryConfig, MemoryManager, RetrievalConfig, RetrievalTuning
from spade_memory.text.spelling import closest, english_words, respellable, respellings
from spade_memory.text.tokenizer import get_tokenizer

TEXTS = (
    "Joanna finished her first screenplay in January.",
    "Melanie painted a sunrise by the lake.",
    "Caroline went to a pottery workshop with her kids.",
    "Nate bought a new card for his video games.",
    "Nate keeps his turtles in a large tank.",
)


def _keyword_config(root: Path, respellings_kept: int = 2, **tuned: int) -> MemoryConfig:
    tuning = RetrievalTuning(typo_respellings=respellings_kept, **tuned)
    return MemoryConfig(
        root=root, embedder=None, retrieval=RetrievalConfig(cache_ttl_seconds=0.0, tuning=tuning)
    )


async def _found(memory: MemoryManager, query: str) -> list[str]:
    return [hit.memory.content for hit in await memory.search(query, limit=10)]


@pytest.mark.parametrize(
    ("word", "typed"),
    [
        ("finished", "finiqsh"),  # insertion, then stemmed: finish
        ("painted", "paitned"),  # transposition
        ("workshop", "wrkshop"),  # deletion
        ("pottery", "pottary"),  # substitution
        ("joanna", "jqanna"),  # a name
    ],
)
def test_respellings_hold_the_word_as_indexed(word: str, typed: str) -> None:
    (indexed,) = get_tokenizer().tokenize(word)
    assert get_tokenizer().tokenize(typed) != [indexed]
    assert get_tokenizer().tokenize(respellings(typed)[indexed]) == [indexed]


def test_respellings_are_one_edit_away() -> None:
    found = respellings("cart")
    assert {"art", "cat", "card", "cart", "crat", "cast"} - {"cart"} <= set(found)
    assert found["card"] == "card" and found["cast"] == "cast"
    assert "cart" not in found
    assert "cards" not in found  # two edits
    assert not set(found) & {"the", "and"}  # stopwords are no terms
    assert respellings("paitned")["paint"] == "painted"  # the edit, then its stem


@settings(deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=10))
def test_every_respelling_is_an_index_term(word: str) -> None:
    for term, edit in respellings(word).items():
        assert term and term.isascii() and term.isalpha() and term != word
        assert abs(len(edit) - len(word)) <= 1 and edit != word


def test_only_long_latin_terms_are_respelt() -> None:
    assert respellable("pottery", 4)
    assert respellable("pots", 4)
    assert not respellable("pot", 4)  # shorter than asked
    assert respellable("pot", 3)
    assert not respellable("陶艺课", 1)  # Chinese: bigrams already match the other characters
    assert not respellable("2023", 1)
    assert not respellable("Pottery", 4)  # words are respelt lower-cased
    assert not respellable("about", 1)  # a stopword


def test_closest_keeps_the_most_frequent_held_ones() -> None:
    assert closest({"card": 3, "cart": 9, "care": 0, "cast": 3}, 2) == ["cart", "card"]
    assert closest({"card": 0}, 2) == []
    assert closest({"card": 5}, 0) == []


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("When did Joanna finiqsh her screenplay?", TEXTS[0]),
        ("Who paitned a sunrise?", TEXTS[1]),
        ("a pottery wrkshop", TEXTS[2]),
        ("turtels", TEXTS[4]),
    ],
)
async def test_a_misspelt_query_finds_the_memory(tmp_path: Path, query: str, expected: str) -> None:
    async with await MemoryManager.open("typos@x.example", _keyword_config(tmp_path)) as memory:
        await memory.store_many([{"content": text} for text in TEXTS])
        assert (await _found(memory, query))[0] == expected


async def test_without_respellings_the_typo_finds_nothing(tmp_path: Path) -> None:
    config = _keyword_config(tmp_path, respellings_kept=0)
    async with await MemoryManager.open("typos@x.example", config) as memory:
        await memory.store_many([{"content": text} for text in TEXTS])
        assert await _found(memory, "turtels") == []
        assert await _found(memory, "turtles") == [TEXTS[4]]


async def test_a_held_or_unrelated_term_is_not_respelt(tmp_path: Path) -> None:
    async with await MemoryManager.open("typos@x.example", _keyword_config(tmp_path)) as memory:
        await memory.store_many([{"content": text} for text in TEXTS])
        # "cart" is one edit from the held "card", but "card" is what was typed
        assert await _found(memory, "card") == [TEXTS[3]]
        # words no memory holds, none of them one typo from a held one
        assert await _found(memory, "quantum chromodynamics") == []
        assert await _found(memory, "golf") == []
        # a short unseen word is left alone, though "tank" is one edit away
        assert await _found(memory, "tan") == []


async def test_an_accented_word_is_one_word_never_respelt(tmp_path: Path) -> None:
    """ "Málaga" is one word, as the index reads it, not "m" and a "laga" to respell."""
    async with await MemoryManager.open("typos@x.example", _keyword_config(tmp_path)) as memory:
        flight = "Our flight to Málaga leaves on Tuesday"
        await memory.store_many([{"content": flight}, {"content": "The saga continues"}])
        assert await _found(memory, "Málaga") == [flight]
        assert await _found(memory, "Malaga") == [flight]


async def test_a_word_of_the_dictionary_is_meant_as_typed(tmp_path: Path) -> None:
    """A real word the memory lacks is no typo of a held one: "cart" is one edit
    from the held "card" but is searched as typed; "cadr" is respelt."""
    assert {"cart", "travel", "joanna"} <= english_words()
    assert not {"cadr", "recieve", "paitned"} & english_words()
    async with await MemoryManager.open("typos@x.example", _keyword_config(tmp_path)) as memory:
        await memory.store_many([{"content": text} for text in TEXTS])
        assert await _found(memory, "cart") == []
        assert await _found(memory, "cadr") == [TEXTS[3]]


async def test_the_second_stage_reads_the_respelt_words(tmp_path: Path) -> None:
    """The lexical second stage scores a typo as the word it was respelt to, as the
    other routes read it, not as a word no memory holds."""
    async with await MemoryManager.open("typos@x.example", _keyword_config(tmp_path)) as memory:
        await memory.store_many([{"content": text} for text in TEXTS])

        async def signals(query: str) -> dict[str, float]:
            (hit, *_) = await memory.search(query, limit=10, explain=True)
            assert hit.memory.content == TEXTS[1] and hit.explanation is not None
            return {key: hit.explanation.rerank[key] for key in ("coverage", "lexical")}

        assert await signals("Who paitned a sunrise?") == await signals("Who painted a sunrise?")


async def test_the_relevance_floor_weighs_a_typo_as_the_word_meant(tmp_path: Path) -> None:
    """With the floor on, a question whose telling word is misspelt is still answered:
    as typed, the typo is a word no memory holds, and the question would hold nothing."""
    for respelt, answered in ((2, True), (0, False)):
        config = MemoryConfig(
            root=tmp_path / str(respelt),
            embedder=None,
            retrieval=RetrievalConfig(
                cache_ttl_seconds=0.0,
                relevance_floor=True,
                tuning=RetrievalTuning(typo_respellings=respelt),
            ),
        )
        async with await MemoryManager.open("typos@x.example", config) as memory:
            await memory.store_many([{"content": text} for text in TEXTS])
            assert await _found(memory, "Who painted it?") == [TEXTS[1]]
            assert await _found(memory, "Who paitned it?") == ([TEXTS[1]] if answered else [])


async def test_the_shortest_word_respelt_is_a_knob(tmp_path: Path) -> None:
    config = _keyword_config(tmp_path, typo_min_chars=3)
    assert RetrievalConfig.from_knobs({"typo_min_chars": 3}).tuning.typo_min_chars == 3
    async with await MemoryManager.open("typos@x.example", config) as memory:
        await memory.store_many([{"content": text} for text in TEXTS])
        assert await _found(memory, "tnk") == [TEXTS[4]]  # "tank", one edit away
        assert await _found(memory, "tk") == []  # shorter still


async def test_a_term_stored_later_is_found_as_typed(tmp_path: Path) -> None:
    async with await MemoryManager.open("typos@x.example", _keyword_config(tmp_path)) as memory:
        await memory.store_many([{"content": text} for text in TEXTS])
        assert await _found(memory, "tanks") == [TEXTS[4]]  # the stem is held
        assert await _found(memory, "pottary") == [TEXTS[2]]
        await memory.store("Pottary is the name of Nate's new turtle.")
        assert (await _found(memory, "pottary"))[0] == "Pottary is the name of Nate's new turtle."


@pytest.mark.parametrize("respelt", [0, 2])
async def test_the_query_vector_reads_the_respelt_words(tmp_path: Path, respelt: int) -> None:
    config = MemoryConfig(
        root=tmp_path,
        embedder="hashing",
        retrieval=RetrievalConfig(
            cache_ttl_seconds=0.0, tuning=RetrievalTuning(typo_respellings=respelt)
        ),
    )
    async with await MemoryManager.open("typos@x.example", config) as memory:
        await memory.store_many([{"content": text} for text in TEXTS])
        await memory.flush()

        async def cosine(query: str) -> float:
            for hit in await memory.search(query, limit=10, explain=True):
                if hit.memory.content == TEXTS[4]:
                    assert hit.explanation is not None and hit.explanation.vector_score
                    return hit.explanation.vector_score
            raise AssertionError(f"{query!r} did not find the turtles")

        typed = await cosine("Where does Nate keep his turtels?")
        meant = await cosine("Where does Nate keep his turtles?")
        if respelt:
            assert typed == pytest.approx(meant, abs=1e-6)
        else:
            assert typed < meant - 0.05
