"""One tokenizer for documents and queries, for Chinese, Japanese, Korean and the rest.

- Han and kana runs: jieba in search mode, plus the character bigrams of the run
  (a run of one character gives that character).
- Hangul runs: the run itself plus its bigrams (Korean glues particles to words).
- Everything else: NFKC normalisation (fullwidth "ＡＢＣ" becomes "abc"), case folding,
  accents dropped, split on whatever is not a letter or a digit, then a light
  Porter-style stemmer, so "named" meets "name" and "rotation" meets "rotates".
- English and Chinese stopwords are dropped, unless a text holds nothing else.
- Invisible format characters (a soft hyphen, a joiner) are dropped first, so they
  do not split a word; the zero-width space separates words, as it means to.

Every token is non-empty, at most :data:`MAX_TOKEN_CHARS` long, and made only of
characters for which ``str.isalnum()`` holds, so tokens joined with spaces index
cleanly with SQLite FTS5's ``ascii`` tokenizer. Any ``str`` is accepted.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from .scripts import HAN_RANGES

__all__ = [
    "CHINESE_STOPWORDS",
    "ENGLISH_STOPWORDS",
    "MAX_TOKEN_CHARS",
    "STOPWORDS",
    "TOKENIZER_VERSION",
    "Tokenizer",
    "cut_cjk",
    "get_tokenizer",
    "stem",
    "use_dictionary_cache",
]

logger = logging.getLogger(__name__)

TOKENIZER_VERSION = 2
"""Bumped whenever the tokens of some text change, so indexes built on them rebuild
(2: invisible format characters no longer split a word)."""

MAX_TOKEN_CHARS = 64
"""Longer tokens are cut to this many characters."""

# --- stopwords ------------------------------------------------------------------
# Matched before stemming, in case-folded form. Modest on purpose: words that carry
# meaning in a memory ("not", "never", "没有", "不") are not listed.

_ENGLISH = """
    a about above after again against all am an and any are as at
    be because been before being below between both but by
    can could d did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how
    i if in into is it its itself just ll m me more most my myself
    nor now of off on once only or other our ours ourselves out over own
    re s same she should so some such t than that the their theirs them
    themselves then there these they this those through to too
    under until up us ve very was we were what when where which while who
    whom why will with would you your yours yourself yourselves
"""

_CHINESE = """
    的 了 是 在 和 与 及 或 也 就 都 而 被 把 让 给 对 从 向 于 以 之 其 并 且
    着 过 得 地 吗 呢 吧 啊 呀 哦 嗯 么 嘛 啦 哈
    我 你 您 他 她 它 我们 你们 他们 她们 它们 咱们 自己
    这 那 这个 那个 这些 那些 这样 那样 这里 那里 哪 哪里 哪个
    什么 怎么 怎样 为什么 如何
    很 又 还 再 更 最 太 已 已经
    但 但是 而且 因为 所以 如果 虽然 然后 或者 还是 以及 并且
    一个 一些 有 个 些 等 等等
"""

ENGLISH_STOPWORDS: frozenset[str] = frozenset(_ENGLISH.split())
"""English function words, pronouns and contraction fragments ("s", "t", "ll")."""

CHINESE_STOPWORDS: frozenset[str] = frozenset(_CHINESE.split())
"""Chinese particles, pronouns, conjunctions and measure words."""

STOPWORDS: frozenset[str] = ENGLISH_STOPWORDS | CHINESE_STOPWORDS
"""Every stopword the tokenizer drops."""

# --- scripts --------------------------------------------------------------------

# the ideographs of text.scripts, with 々 and 〇 and the supplementary planes'
# ideographs (extensions B and on), which the index cuts as Chinese too
_HAN = f"\u3005\u3007{HAN_RANGES}\U00020000-\U0003134f"
_KANA = "\u3041-\u3096\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff"
_HANGUL = "\u1100-\u11ff\u3131-\u318e\uac00-\ud7a3"
_SEGMENT = re.compile(f"([{_HAN}{_KANA}]+)|([{_HANGUL}]+)")
_ASCII_WORD = re.compile(r"[a-z0-9]+")
# Invisible format characters (Unicode category Cf: the soft hyphen, joiners, direction
# marks, tag characters...) sit inside a word without breaking it for a reader, so
# they are dropped before the text is cut. Two kinds of Cf stay word breaks: the
# zero-width space (U+200B), a word break by definition (Thai, Khmer and Burmese mark
# words with it), and the visible signs written before a number (U+0600-0605, U+06DD,
# U+070F, U+0890-0891, U+08E2, U+110BD, U+110CD). The class also holds format
# characters of later Unicode versions (U+13439-1343F).
_FORMAT = re.compile(
    "[\u00ad\u061c\u180e\u200c-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f"
    "\ufeff\ufff9-\ufffb\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
_WORD = re.compile(r"[^\W_]+")

_JIEBA_LOCK = threading.Lock()
_jieba_cut: Callable[[str], Iterable[str]] | None = None
_jieba_freq: Mapping[str, int] = {}
# the cache folders of the persistent memories open now (see use_dictionary_cache)
_dictionary_caches: list[Path] = []

_SHARED_LOCK = threading.Lock()
_shared: Tokenizer | None = None

#: Chinese runs whose cut is kept. A stored text is cut for its keyword row, and cut
#: again for its graph when derivation reaches it, up to a second of stores later
#: (``engine.derivation``): a bulk ingest stores 1,000-2,500 Chinese lines a second,
#: four to five runs each, so the cache holds that second's runs (a few MB).
_CUT_CACHE = 16_384
"""Runs whose cut is kept: more than one long memory holds, so that cutting a text
for its index terms and tagging its names (or the reverse) cut each run once."""


def use_dictionary_cache(folder: Path | None) -> Callable[[], None]:
    """Let jieba keep the cache of its dictionary in ``folder`` while the memory that
    asks is open; returns what to call when it closes.

    jieba builds its prefix dictionary from its word list (about a second and a
    half) and, left to itself, saves it to a 9 MB file in the system's temporary
    folder, to load it faster next time. Here it saves that file only in the folder
    of a persistent memory open when the dictionary is loaded (the newest of them,
    whose parent must exist); with none open (in-memory mode, or every persistent
    memory closed), jieba builds the dictionary in RAM and writes nothing. Loaded
    once per process: later calls change nothing once it is.
    """
    if folder is None:
        return _released
    with _JIEBA_LOCK:
        _dictionary_caches.append(folder)

    def release() -> None:
        with _JIEBA_LOCK, contextlib.suppress(ValueError):
            _dictionary_caches.remove(folder)

    return release


def _released() -> None:
    """Nothing to let go."""


def _initialize_jieba(jieba: Any) -> None:
    """Load jieba's default dictionary, caching it only in the chosen folder."""
    tokenizer = jieba.dt
    folder = _dictionary_caches[-1] if _dictionary_caches else None
    if folder is not None:
        try:
            if folder.parent.is_dir():
                folder.mkdir(mode=0o700, exist_ok=True)
            else:
                folder = None
        except OSError as exc:
            logger.info(
                "jieba's dictionary is built in RAM: %s cannot hold its cache (%s)", folder, exc
            )
            folder = None
    if folder is not None:
        tokenizer.tmp_dir = str(folder)
        tokenizer.cache_file = f"jieba-{jieba.__version__}.cache"
        tokenizer.initialize()
        return
    with tokenizer.lock:  # what ``initialize`` does, without saving the cache file
        if not tokenizer.initialized:
            tokenizer.FREQ, tokenizer.total = tokenizer.gen_pfdict(tokenizer.get_dict_file())
            tokenizer.initialized = True


def _load_jieba() -> Callable[[str], Iterable[str]]:
    """jieba's cut (HMM on); its dictionary loaded once per process."""
    global _jieba_cut, _jieba_freq
    cut = _jieba_cut
    if cut is not None:
        return cut
    with _JIEBA_LOCK:
        cut = _jieba_cut
        if cut is None:
            import jieba

            jieba_logger = logging.getLogger("jieba")
            if not jieba.dt.initialized and jieba_logger.level == logging.DEBUG:
                # jieba sets its own logger to DEBUG on import and prints its
                # dictionary loading to stderr; quiet that logger only.
                jieba.setLogLevel(logging.WARNING)
            _initialize_jieba(jieba)
            logger.debug("jieba dictionary loaded")
            _jieba_freq = jieba.dt.FREQ
            cut = _jieba_cut = partial(jieba.cut, HMM=True)
        return cut


@lru_cache(maxsize=_CUT_CACHE)
def cut_cjk(run: str) -> tuple[str, ...]:
    """jieba's words of one run of Chinese (or Japanese) characters, HMM on.

    Cached: the tokenizer and the entity tagger (:mod:`spade_memory.text.mentions`)
    both start from this cut, so a memory's text is cut once for both.
    """
    return tuple(_load_jieba()(run))


def _search_words(run: str) -> Iterator[tuple[str, int, int]]:
    """jieba's search mode (``jieba.tokenize(run, mode="search")``) from the shared cut.

    Each word, preceded by its two- and three-character parts that jieba's
    dictionary knows, as ``(word, start, end)``.
    """
    freq = _jieba_freq
    start = 0
    for word in cut_cjk(run):
        width = len(word)
        if width > 2:
            for i in range(width - 1):
                if freq.get(word[i : i + 2]):
                    yield word[i : i + 2], start + i, start + i + 2
        if width > 3:
            for i in range(width - 2):
                if freq.get(word[i : i + 3]):
                    yield word[i : i + 3], start + i, start + i + 3
        yield word, start, start + width
        start += width


def _jieba_search() -> Callable[[str], Iterable[tuple[str, int, int]]]:
    """jieba's search mode as ``(word, start, end)``; its dictionary loaded once per process."""
    _load_jieba()
    return _search_words


# --- stemming -----------------------------------------------------------------

_STEP2 = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("bli", "ble"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
)
_STEP3 = (
    ("icate", "ic"),
    ("ative", ""),
    ("alize", "al"),
    ("iciti", "ic"),
    ("ical", "ic"),
    ("ful", ""),
    ("ness", ""),
)
# Porter's step 4 without its most aggressive suffixes (-al, -er, -ic, -ive, -ous,
# -ant, -ent), which conflate unrelated words ("general" / "generous").
_STEP4 = ("ement", "ment", "ance", "ence", "able", "ible", "ism", "ate", "ize", "ion")


def _is_consonant(word: str, i: int) -> bool:
    ch = word[i]
    if ch in "aeiou":
        return False
    if ch == "y":
        return i == 0 or not _is_consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``stem``."""
    m = 0
    prev_vowel = False
    for i in range(len(stem)):
        consonant = _is_consonant(stem, i)
        if consonant and prev_vowel:
            m += 1
        prev_vowel = not consonant
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _is_consonant(stem, i) for i in range(len(stem)))


def _ends_double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _is_consonant(word, len(word) - 1)


def _ends_cvc(word: str) -> bool:
    return (
        len(word) >= 3
        and _is_consonant(word, len(word) - 3)
        and not _is_consonant(word, len(word) - 2)
        and _is_consonant(word, len(word) - 1)
        and word[-1] not in "wxy"
    )


def _replace_suffix(word: str, rules: tuple[tuple[str, str], ...], min_measure: int) -> str:
    for suffix, replacement in rules:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            return stem + replacement if _measure(stem) > min_measure else word
    return word


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Reduce a lower-case ASCII word to its stem; other words are returned as they are.

    A light variant of the Porter stemmer: inflections (-s, -ed, -ing) and the
    common derivational suffixes (-ation, -ness, -ment, -ion, ...) are removed, so
    "rotate", "rotates", "rotated", "rotating" and "rotation" all become "rotat".
    """
    if len(word) <= 2 or not (word.isascii() and word.isalpha() and word.islower()):
        return word
    # step 1a: plurals
    if word.endswith("sses") or word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    # step 1b: -eed, -ed, -ing
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    else:
        for suffix in ("ed", "ing"):
            if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
                word = word[: -len(suffix)]
                if word.endswith(("at", "bl", "iz")):
                    word += "e"
                elif _ends_double_consonant(word) and word[-1] not in "lsz":
                    word = word[:-1]
                elif _measure(word) == 1 and _ends_cvc(word):
                    word += "e"
                break
    # step 1c: y -> i
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    word = _replace_suffix(word, _STEP2, 0)
    word = _replace_suffix(word, _STEP3, 0)
    # step 4 (reduced)
    for suffix in _STEP4:
        if word.endswith(suffix):
            base = word[: -len(suffix)]
            if _measure(base) > 1 and (suffix != "ion" or base.endswith(("s", "t"))):
                word = base
            break
    # step 5: final -e, double l
    if word.endswith("e"):
        base = word[:-1]
        m = _measure(base)
        if m > 1 or (m == 1 and not _ends_cvc(base)):
            word = base
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word


# --- tokenizing ---------------------------------------------------------------


def _strip_marks(segment: str) -> str:
    """Drop combining marks (accents, vowel signs) so they neither split nor stay."""
    decomposed = unicodedata.normalize("NFD", segment)
    return "".join(
        ch for ch in decomposed if ch.isascii() or not unicodedata.category(ch).startswith("M")
    )


class _Collector:
    """Tokens of one text: the kept ones and the stopwords, each in order."""

    __slots__ = ("kept", "stops")

    def __init__(self) -> None:
        self.kept: list[str] = []
        self.stops: list[str] = []

    def word(self, word: str) -> None:
        if word in STOPWORDS:
            self.stops.append(word)
        elif len(word) > MAX_TOKEN_CHARS:
            self.kept.append(word[:MAX_TOKEN_CHARS])
        else:
            self.kept.append(stem(word))

    def cjk(self, token: str, *, stop: bool = False) -> None:
        if stop or token in STOPWORDS:
            self.stops.append(token[:MAX_TOKEN_CHARS])
        else:
            self.kept.append(token[:MAX_TOKEN_CHARS])

    def result(self) -> list[str]:
        return self.kept if self.kept else self.stops


class Tokenizer:
    """Splits text into index terms; the same rules for documents and queries.

    Stateless apart from jieba's dictionary, which is loaded on the first CJK text
    (about a second; call :meth:`warm_up` ahead to move that cost). Thread-safe.
    """

    version: int = TOKENIZER_VERSION

    def warm_up(self) -> None:
        """Load jieba's dictionary now instead of on the first CJK text."""
        _jieba_search()

    def tokenize(self, text: str) -> list[str]:
        """The terms of ``text`` in order, duplicates kept.

        Stopwords are dropped unless the text holds nothing else ("who is it").

        Args:
            text: any string; characters that are neither letters nor digits
                separate terms.

        Returns:
            The terms, each non-empty, alphanumeric and at most 64 characters.
        """
        if not text:
            return []
        out = _Collector()
        if text.isascii():
            self._words(text.lower(), out)
        else:
            visible = _FORMAT.sub("", text)
            self._mixed(unicodedata.normalize("NFKC", visible).casefold(), out)
        return out.result()

    def query_terms(self, text: str) -> list[str]:
        """The distinct terms of ``text`` in order of first occurrence."""
        return list(dict.fromkeys(self.tokenize(text)))

    def _mixed(self, text: str, out: _Collector) -> None:
        pos = 0
        for match in _SEGMENT.finditer(text):
            start = match.start()
            if start > pos:
                self._words(text[pos:start], out)
            cjk, hangul = match.group(1), match.group(2)
            if cjk:
                self._cjk_run(cjk, out)
            else:
                self._hangul_run(hangul, out)
            pos = match.end()
        if pos < len(text):
            self._words(text[pos:], out)

    @staticmethod
    def _words(segment: str, out: _Collector) -> None:
        if segment.isascii():
            words = _ASCII_WORD.findall(segment)
        else:
            words = _WORD.findall(_strip_marks(segment))
        for word in words:
            out.word(word)

    @staticmethod
    def _cjk_run(run: str, out: _Collector) -> None:
        seen: set[str] = set()
        in_stopword = bytearray(len(run))  # 1 where a stopword jieba found covers it
        for word, start, end in _jieba_search()(run):
            if not word.isalnum():
                continue
            seen.add(word)
            if word in STOPWORDS:
                in_stopword[start:end] = b"\x01" * (end - start)
            out.cjk(word)
        if len(run) == 1:
            if run not in seen and run.isalnum():
                out.cjk(run)
            return
        for i in range(len(run) - 1):
            bigram = run[i : i + 2]
            if bigram not in seen and bigram.isalnum():
                # a bigram made only of stopwords ("们的" in "我们的") is one too
                out.cjk(bigram, stop=bool(in_stopword[i] and in_stopword[i + 1]))

    @staticmethod
    def _hangul_run(run: str, out: _Collector) -> None:
        out.cjk(run)
        if len(run) > 2:
            for i in range(len(run) - 1):
                out.cjk(run[i : i + 2])


def get_tokenizer() -> Tokenizer:
    """The tokenizer shared by everything in this process."""
    global _shared
    tokenizer = _shared
    if tokenizer is None:
        with _SHARED_LOCK:
            if _shared is None:
                _shared = Tokenizer()
            tokenizer = _shared
    return tokenizer
