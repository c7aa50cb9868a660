"""Entity and relation extraction: English, Chinese, quoted terms, mentions, dates."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.errors import InvalidToolInput
from spade_memory.text.extraction import (
    EntityExtractor,
    canonical_key,
    canonical_relation,
    check_graph_input,
    get_extractor,
    split_sentences,
)

X = EntityExtractor()


def keys(text: str) -> dict[str, str]:
    return {entity.key: entity.type for entity in X.extract(text).entities}


def typed(text: str, **explicit: object) -> set[tuple[str, str, str]]:
    extraction = X.extract(text, **explicit)  # type: ignore[arg-type]
    return {
        (r.source, r.relation, r.target) for r in extraction.relations if r.relation != "related_to"
    }


def test_english_capitalised_spans_without_sentence_initial_common_words() -> None:
    found = keys("Yesterday Alice met Bob at the Bank of America in Paris. Thanks for that.")
    assert {"alice", "bob", "bank of america", "paris"} <= set(found)
    assert "yesterday" not in found and "thanks" not in found
    assert found["paris"] == "place"


def test_a_lone_capitalised_opening_word_needs_evidence_it_is_a_name() -> None:
    assert keys("Long time no see.") == {}
    assert "alice" in keys("Alice lives in Paris.")  # a verb follows
    assert "caroline" in keys("Caroline: we went to the beach.")  # a speaker label
    assert "bob" in keys("Bob's team ships on Fridays.")  # possessive


def test_quoted_terms_mentions_and_jids() -> None:
    found = keys('Ping @carol or dave@example.org about "Project Falcon" and 《三体》.')
    assert found["carol"] == "mention"
    assert found["dave@example.org"] == "jid"
    assert found["project falcon"] == "term"
    assert found["三体"] == "work"


def test_chinese_people_places_and_organisations() -> None:
    found = keys("张伟在北京的阿里巴巴工作。小明和小红在腾讯公司一起工作。")
    assert found["张伟"] == "person"
    assert found["北京"] == "place"
    assert found["腾讯公司"] == "organization"  # the suffix joins the name
    assert {"小明", "小红"} <= set(found)
    assert "和小红" not in found


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("We met on May 1, 2024.", "date:2024-05-01"),
        ("We met on 1 May 2024.", "date:2024-05-01"),
        ("We met on 2024-05-01.", "date:2024-05-01"),
        ("我们2024年5月1日见面。", "date:2024-05-01"),
        ("我们二〇二四年五月一日见面。", "date:2024-05-01"),
        ("The party is on March 3rd.", "date:03-03"),
        ("See you on Monday.", "weekday:monday"),
        ("周一见。", "weekday:monday"),
        ("The call is at 3:30 pm.", "time:15:30"),
        ("下午三点半开会。", "time:15:30"),
        ("Lunch at 12:05.", "time:12:05"),
    ],
)
def test_dates_and_times_normalise_to_one_key(text: str, key: str) -> None:
    assert key in keys(text)


def test_impossible_dates_are_not_entities() -> None:
    assert not any(k.startswith("date:") for k in keys("Version 2024-13-45 shipped."))


@pytest.mark.parametrize(
    ("text", "relation"),
    [
        ("Alice works at Acme Corp.", ("alice", "works_at", "acme corp")),
        ("Alice lives in Paris.", ("alice", "lives_in", "paris")),
        ("Alice likes hiking in the mountains.", ("alice", "likes", "hiking")),
        ("Carol is a close friend of Dave.", ("carol", "friend_of", "dave")),
        ("Erin works with Frank.", ("erin", "works_with", "frank")),
        ("Grace is married to Heidi.", ("grace", "married_to", "heidi")),
        ("Dave is Alice's manager.", ("dave", "manages", "alice")),
        ("张伟在北京的阿里巴巴工作。", ("张伟", "works_at", "阿里巴巴")),
        ("李娜住在上海。", ("李娜", "lives_in", "上海")),
        ("王芳是张伟的朋友。", ("王芳", "friend_of", "张伟")),
        ("刘洋嫁给了陈静。", ("刘洋", "married_to", "陈静")),
        ("小明和小红一起工作。", ("小明", "works_with", "小红")),
    ],
)
def test_typed_relations_from_patterns(text: str, relation: tuple[str, str, str]) -> None:
    assert relation in typed(text)


def test_groups_relate_pairwise_and_to_their_team() -> None:
    found = typed("Bob and Alice are on the payments team.")
    assert ("bob", "works_with", "alice") in found
    assert ("bob", "member_of", "payments team") in found
    assert ("alice", "member_of", "payments team") in found


def test_a_pronoun_opening_a_sentence_stands_for_the_last_name() -> None:
    assert ("alice", "works_at", "acme corp") in typed(
        "Alice lives in Paris. She works at Acme Corp."
    )
    assert ("李娜", "likes", "打网球") in typed("李娜住在上海，她喜欢打网球。")


def test_entities_of_one_sentence_are_related_untyped() -> None:
    relations = X.extract("Alice and Bob visited Rome. Carol stayed home.").relations
    untyped = {frozenset((r.source, r.target)) for r in relations if r.relation == "related_to"}
    assert frozenset(("alice", "rome")) in untyped
    assert frozenset(("alice", "carol")) not in untyped  # different sentences


def test_explicit_entities_and_relations_are_added() -> None:
    extraction = X.extract(
        "the usual place",
        entities=["Blue Bottle"],
        relations=[{"source": "Zed", "relation": "Works At", "target": "Blue Bottle"}],
    )
    assert {"blue bottle", "zed"} <= extraction.keys
    assert ("zed", "works_at", "blue bottle") in {
        (r.source, r.relation, r.target) for r in extraction.relations
    }


def test_canonical_forms() -> None:
    assert canonical_key("ＡＬＩＣＥ") == canonical_key("Alice's") == "alice"
    assert canonical_key("  Bank   of America! ") == "bank of america"
    assert canonical_relation("Works-At") == "works_at"
    assert canonical_relation("!!!") == "related_to"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_canonical_key_is_idempotent_and_case_and_width_blind(text: str) -> None:
    key = canonical_key(text)
    assert canonical_key(key) == key
    assert canonical_key(text.upper()) == canonical_key(text.lower()) or not text.isascii()


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=120))
def test_extraction_never_fails_and_relations_join_known_entities(text: str) -> None:
    extraction = get_extractor().extract(text)
    known = extraction.keys
    assert all(e.key for e in extraction.entities)
    assert all(r.source in known and r.target in known for r in extraction.relations)
    assert all(r.source != r.target for r in extraction.relations)


def test_sentences_keep_abbreviations_and_addresses_whole() -> None:
    sentences = [s.strip() for _, s in split_sentences("Mr. Smith met a@b.org. 你好。Bye")]
    assert sentences == ["Mr. Smith met a@b.org.", "你好。", "Bye"]


def test_query_keys_try_lower_case_words_and_pairs() -> None:
    assert {"alice", "payments team"} <= set(X.query_keys("is alice on the payments team?"))
    assert "张伟" in X.query_keys("谁和张伟一起工作？")


@pytest.mark.parametrize(
    ("entities", "relations", "message"),
    [
        ("Alice", None, "list of names"),
        ([""], None, "non-empty"),
        (["x" * 201], None, "200"),
        (None, [{"source": "a", "target": "b"}], "exactly source, relation and target"),
        (None, [{"source": "a", "relation": "r", "target": 3}], "non-empty string"),
        (["a"] * 33, None, "at most 32"),
    ],
)
def test_bad_explicit_graph_input_is_refused(
    entities: object, relations: object, message: str
) -> None:
    with pytest.raises(InvalidToolInput, match=message):
        check_graph_input(entities, relations)


_SHARED_CUT_SAMPLE = (
    "张伟在北京的星辰科技工作，他的同事李娜住在上海浦东新区。",
    "2023年5月，欧阳明日加入了华为技术有限公司的研发部门。",
    "王小红住在杭州西湖区，每周六去图书馆看书；她喜欢研究生物学。",
    "中华人民共和国国务院新闻办公室举行发布会，介绍经济运行情况。",
    "Alice met 陈建国 at the Shenzhen office on Tuesday.",
    "Caroline went to the LGBTQ support group with Melanie last week.",
)


def test_the_shared_cut_gives_the_tokens_and_entities_of_separate_cuts() -> None:
    import jieba

    from spade_memory.text import tokenizer

    tokenizer.get_tokenizer().warm_up()
    for text in _SHARED_CUT_SAMPLE:
        tokenizer.cut_cjk.cache_clear()
        cold = X.extract(text)
        runs = [cjk for cjk, _ in tokenizer._SEGMENT.findall(text) if cjk]
        for run in runs:
            # jieba's own cut and search mode, as the tagger and the tokenizer used them
            assert tokenizer.cut_cjk(run) == tuple(jieba.cut(run, HMM=True))
            assert list(tokenizer._search_words(run)) == list(jieba.tokenize(run, mode="search"))
        tokenizer.cut_cjk.cache_clear()
        tokenizer.get_tokenizer().tokenize(text)
        assert X.extract(text) == cold  # from the cuts the tokenizer left in the cache
        assert tokenizer.cut_cjk.cache_info().hits == len(runs)
