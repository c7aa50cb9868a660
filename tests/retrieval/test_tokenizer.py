"""The tokenizer: CJK segmentation, normalisation, stemming, stopwords, robustness."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spade_memory.text.tokenizer import (
    CHINESE_STOPWORDS,
    ENGLISH_STOPWORDS,
    MAX_TOKEN_CHARS,
    Tokenizer,
    get_tokenizer,
    stem,
)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    tokenizer = get_tokenizer()
    tokenizer.warm_up()
    return tokenizer


def _valid(token: str) -> bool:
    return 0 < len(token) <= MAX_TOKEN_CHARS and all(ch.isalnum() for ch in token)


# --- English and other alphabetic scripts -------------------------------------


def test_shared_instance_is_one() -> None:
    assert get_tokenizer() is get_tokenizer()


@pytest.mark.parametrize(
    "family",
    [
        ["name", "names", "named", "naming"],
        ["rotate", "rotates", "rotated", "rotating", "rotation"],
        ["connect", "connected", "connecting", "connection", "connections"],
        ["password", "passwords"],
        ["like", "likes", "liked", "liking"],
    ],
)
def test_inflections_meet_one_stem(tok: Tokenizer, family: list[str]) -> None:
    stems = {tuple(tok.tokenize(word)) for word in family}
    assert len(stems) == 1, stems
    assert len(next(iter(stems))) == 1


def test_stemming_keeps_unrelated_words_apart() -> None:
    assert stem("general") != stem("generous")
    assert stem("rotate") != stem("rot")
    assert stem("name") != stem("nam")


def test_stem_leaves_non_words_alone() -> None:
    for word in ("30", "x86", "ok", "café", "数据"):
        assert stem(word) == word


def test_sentence_keeps_numbers_and_drops_stopwords(tok: Tokenizer) -> None:
    tokens = tok.tokenize("The staging database password rotates every 30 days, since 2024!")
    assert "30" in tokens and "2024" in tokens
    assert "the" not in tokens
    assert stem("password") in tokens and stem("rotates") in tokens
    assert tok.tokenize("the password of the agent") == [stem("password"), stem("agent")]


def test_query_of_only_stopwords_keeps_them(tok: Tokenizer) -> None:
    assert tok.tokenize("who is it") == ["who", "is", "it"]
    assert tok.query_terms("Who is it? Who!") == ["who", "is", "it"]
    assert tok.tokenize("的 了 是") == ["的", "了", "是"]


def test_case_fullwidth_and_accents_fold(tok: Tokenizer) -> None:
    assert tok.tokenize("ＡＢＣ") == ["abc"]
    assert tok.tokenize("ＡＢＣ１２３") == tok.tokenize("abc123") == ["abc123"]
    assert tok.tokenize("CAFÉ") == tok.tokenize("cafe")
    assert tok.tokenize("cafe\u0301") == tok.tokenize("café")
    assert tok.tokenize("Straße") == tok.tokenize("STRASSE")


def test_punctuation_and_underscores_split(tok: Tokenizer) -> None:
    assert tok.tokenize("alpha-beta_gamma/delta.epsilon") == [
        stem(w) for w in ("alpha", "beta", "gamma", "delta", "epsilon")
    ]


def test_marks_do_not_split_words(tok: Tokenizer) -> None:
    (token,) = tok.tokenize("हिन्दी")
    assert _valid(token)


@pytest.mark.parametrize(
    "hidden",
    ["\u00ad", "\u200c", "\u200d", "\u2060", "\ufeff", "\u202e", "\u2066", "\U000e0041"],
)
def test_an_invisible_format_character_does_not_split_a_word(tok: Tokenizer, hidden: str) -> None:
    assert tok.tokenize(f"the pass{hidden}word rotates") == tok.tokenize("the password rotates")
    assert tok.tokenize(f"密{hidden}码是多少") == tok.tokenize("密码是多少")


_BREAKS = "\u200b\u0600\u0601\u0602\u0603\u0604\u0605\u06dd\u070f\u0890\u0891\u08e2"
_BREAKS += "\U000110bd\U000110cd"  # the zero-width space, and signs written before numbers


def test_every_format_character_is_dropped_but_the_word_breaks(tok: Tokenizer) -> None:
    formats = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert len(formats) > 100
    for char in formats:
        expected = ["pass", "word"] if char in _BREAKS else ["password"]
        assert tok.tokenize(f"pass{char}word") == expected, f"U+{ord(char):04X}"


def test_long_tokens_are_cut(tok: Tokenizer) -> None:
    assert tok.tokenize("x" * 500) == ["x" * MAX_TOKEN_CHARS]
    assert tok.tokenize("가" * 500)[0] == "가" * MAX_TOKEN_CHARS
    assert all(len(t) <= MAX_TOKEN_CHARS for t in tok.tokenize("数据" * 500))


def test_query_terms_are_distinct_in_first_order(tok: Tokenizer) -> None:
    text = "green tea, green apples and tea"
    terms = tok.query_terms(text)
    assert terms == list(dict.fromkeys(tok.tokenize(text)))
    assert len(terms) == len(set(terms)) < len(tok.tokenize(text))


# --- Chinese, Japanese, Korean ---------------------------------------------------


def test_chinese_words_and_bigrams(tok: Tokenizer) -> None:
    tokens = tok.tokenize("数据库密码每30天轮换一次")
    for expected in ("数据库", "数据", "密码", "轮换", "30"):
        assert expected in tokens
    assert "库密" in tokens  # a bigram jieba does not emit as a word
    assert all(_valid(t) for t in tokens)


def test_chinese_stopwords_dropped(tok: Tokenizer) -> None:
    tokens = tok.tokenize("我的密码是什么")
    assert "密码" in tokens
    assert not {"的", "是", "什么", "我"} & set(tokens)


def test_single_cjk_character_run(tok: Tokenizer) -> None:
    assert tok.tokenize("x猫y") == ["x", "猫", "y"]


def test_query_meets_longer_chinese_document(tok: Tokenizer) -> None:
    document = set(tok.tokenize("测试环境的数据库密码每三十天轮换一次"))
    assert {"密码", "轮换"} <= set(tok.query_terms("密码轮换")) & document


def test_korean_particle_still_shares_bigrams(tok: Tokenizer) -> None:
    document = tok.tokenize("데이터베이스의 비밀번호")
    query = tok.query_terms("데이터베이스")
    assert len(set(query) & set(document)) >= len(query) - 1
    assert all(_valid(t) for t in document)


def test_japanese_kana_and_kanji(tok: Tokenizer) -> None:
    tokens = tok.tokenize("東京タワーに行きました")
    assert "東京" in tokens and "タワ" in tokens
    assert tok.tokenize("ﾀﾜｰ") == tok.tokenize("タワー")  # halfwidth katakana folds
    assert all(_valid(t) for t in tokens)


@pytest.mark.slow
def test_jieba_is_quiet_and_thread_safe_on_first_use() -> None:
    """In a fresh process: threads race to the first CJK text; nothing is printed."""
    script = """
import json, logging, sys, threading
root_level = logging.getLogger().level
from spade_memory.text.tokenizer import get_tokenizer
tok = get_tokenizer()
text = "数据库密码每30天轮换一次，爱丽丝喜欢喝绿茶"
barrier = threading.Barrier(6)
results = []
def work():
    barrier.wait()
    results.append(tok.tokenize(text))
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({
    "same": all(r == results[0] for r in results), "n": len(results),
    "root": logging.getLogger().level == root_level,
    "others": [n for n, l in logging.Logger.manager.loggerDict.items()
               if isinstance(l, logging.Logger) and l.level and n.startswith("spade_memory")],
}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stderr == ""
    report = json.loads(done.stdout)
    assert report == {"same": True, "n": 6, "root": True, "others": []}


# --- robustness and speed ------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\x00\x00",
        "a\x00b",
        "lone \ud800 surrogate \udfff",
        "emoji 😀👍🏽 family 👨‍👩‍👧",
        "שלום עולם مرحبا بالعالم",
        "e\u0301\u0302\u0303 \u0301\u0301",
        "\u200b\u200d\ufeff zero width",
        "﷽ ㍿ ﬁ",
        "\U0002a700\U000323af\U0003134f",
        "tab\tnew\nline\r\n",
    ],
)
def test_strange_text_never_breaks_the_invariant(tok: Tokenizer, text: str) -> None:
    tokens = tok.tokenize(text)
    assert all(_valid(t) for t in tokens)
    assert tokens == tok.tokenize(text)


def test_megabyte_of_mixed_text(tok: Tokenizer) -> None:
    text = ("Agents remember 数据库 things; ünïcödé 😀 \ud800 " * 30_000)[:1_000_000]
    tokens = tok.tokenize(text)
    assert tokens and all(_valid(t) for t in tokens)


def test_english_speed_at_least_one_megabyte_per_second(tok: Tokenizer) -> None:
    sentence = (
        "The quick brown fox jumps over the lazy dog while passwords rotate every "
        "thirty days and agents remember their interactions with other agents "
    )
    words = sentence.split()
    text = " ".join(words[i % len(words)] + str(i % 7) * (i % 3 == 0) for i in range(200_000))
    text = text[:1_000_000]
    tok.tokenize(text)  # warm the stem cache
    best = min(_timed(tok, text) for _ in range(3))
    assert len(text) / best >= 1_000_000, f"{len(text) / best / 1e6:.2f} MB/s"


def _timed(tok: Tokenizer, text: str) -> float:
    started = time.perf_counter()
    tok.tokenize(text)
    return time.perf_counter() - started


# --- properties -----------------------------------------------------------------

_MIXED = st.text(
    alphabet=st.one_of(
        st.characters(exclude_categories=()),  # anything, lone surrogates included
        st.sampled_from("数据库密码轮换一次的了是カタカナ한국어 "),
        st.sampled_from("abcXYZ019 -_.,'é"),
    ),
    max_size=80,
)
_ASCII = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60)


@settings(max_examples=300, deadline=None)
@given(_MIXED)
def test_property_tokens_are_clean_and_deterministic(text: str) -> None:
    tok = get_tokenizer()
    tokens = tok.tokenize(text)
    assert all(_valid(t) for t in tokens)
    assert tok.tokenize(text) == tokens


@settings(max_examples=300, deadline=None)
@given(_MIXED)
def test_property_query_terms_come_from_the_document(text: str) -> None:
    tok = get_tokenizer()
    document = tok.tokenize(text)
    terms = tok.query_terms(text)
    assert len(terms) == len(set(terms))
    assert set(terms) == set(document)


@settings(max_examples=200, deadline=None)
@given(_ASCII)
def test_property_fullwidth_equals_ascii(text: str) -> None:
    fullwidth = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)
    tok = get_tokenizer()
    assert tok.tokenize(fullwidth) == tok.tokenize(text)


@settings(max_examples=200, deadline=None)
@given(_ASCII)
def test_property_ascii_fast_path_matches_general_path(text: str) -> None:
    tok = get_tokenizer()
    # "ü" forces the Unicode path and adds the token "u"; "zq" keeps the ASCII
    # path and adds "zq". Neither is a stopword, so the rest must be the same.
    forced = tok.tokenize(text + " ü")
    plain = tok.tokenize(text + " zq")
    assert forced[-1] == "u" and plain[-1] == "zq"
    assert forced[:-1] == plain[:-1]


@settings(max_examples=200, deadline=None)
@given(_ASCII, _ASCII)
def test_property_space_separated_texts_concatenate(first: str, second: str) -> None:
    tok = get_tokenizer()
    a, b = tok.tokenize(first), tok.tokenize(second)
    if any(t not in ENGLISH_STOPWORDS for t in a) and any(t not in ENGLISH_STOPWORDS for t in b):
        assert tok.tokenize(first + " " + second) == a + b


def test_stopword_lists_are_normalised() -> None:
    tok = get_tokenizer()
    for word in ENGLISH_STOPWORDS:
        assert word == word.casefold() and word.isalnum()
    for word in CHINESE_STOPWORDS:
        assert word.isalnum()
    # a stopword on its own is kept as itself, so the lists are in token form
    for word in sorted(ENGLISH_STOPWORDS | CHINESE_STOPWORDS):
        assert word in tok.tokenize(word)


def test_bigrams_inside_stopwords_are_stopwords(tok: Tokenizer) -> None:
    assert tok.tokenize("我们的密码") == ["密码", "的密"]  # no "们的"
    tokens = tok.tokenize("为什么密码")
    assert "密码" in tokens and "为什" not in tokens
