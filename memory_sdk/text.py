"""Text normalisation shared by alias lookup, resolution and dedup: folding, slugs, entity keys; and the cleaning
that makes any text a model or provider returns storable in PostgreSQL text and jsonb."""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from rapidfuzz import fuzz

__all__ = [
    "CachedText",
    "clean_strings",
    "clean_text",
    "entity_key",
    "fact_identity_key",
    "fold",
    "is_said",
    "message_ngrams",
    "message_words",
    "ngrams",
    "normalise_alias",
    "short_text_cache",
    "slugify",
    "without_words",
]

_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# A name with no letter or digit ("😀", "🍕") gets a slug from this many hex digits of a hash of its folded form:
# 40 bits keep two such names of one agent apart (a collision needs ~10^6 of them).
_WORDLESS_SLUG_HEX = 10
# Aliases longer than this many words are not looked up in messages (names rarely exceed it).
MAX_ALIAS_WORDS = 6

_P = ParamSpec("_P")
_T = TypeVar("_T")
# Calls whose string arguments hold at most this many characters in all are memoised by short_text_cache: names,
# aliases, fact texts and n-grams, which a write asks about hundreds of times (620 normalise_alias calls per write
# at 100 facts). Longer texts (messages, the known memory) are computed each time, so a cache of N
# entries holds at most N x 512 characters.
SHORT_TEXT_CHARS = 512


class CachedText(Protocol[_P, _T]):
    """A pure function of strings memoised by `short_text_cache`; `uncached` is the function itself, for tests
    that compare the two."""

    uncached: Callable[_P, _T]

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _T: ...

    def cache_info(self) -> Any: ...

    def cache_clear(self) -> None: ...


def short_text_cache(maxsize: int) -> Callable[[Callable[_P, _T]], CachedText[_P, _T]]:
    """Memoise a pure function of positional strings (least recently used, at most `maxsize` entries) for calls
    whose strings hold at most SHORT_TEXT_CHARS characters in all; longer calls are computed each time.

    A function of one string gets a wrapper of one argument: the wrapper costs a fifth of a microsecond, and
    normalise_alias is called ~600 times a write.
    """

    def decorate(function: Callable[_P, _T]) -> CachedText[_P, _T]:
        plain: Callable[..., _T] = function
        cached = functools.lru_cache(maxsize=maxsize)(plain)

        def one(text: str) -> _T:
            return cached(text) if len(text) <= SHORT_TEXT_CHARS else plain(text)

        def several(*texts: str) -> _T:
            return cached(*texts) if sum(map(len, texts)) <= SHORT_TEXT_CHARS else plain(*texts)

        wrapper: Any = one if len(inspect.signature(function).parameters) == 1 else several
        functools.update_wrapper(wrapper, function)
        wrapper.uncached = function
        wrapper.cache_info = cached.cache_info
        wrapper.cache_clear = cached.cache_clear
        return cast("CachedText[_P, _T]", wrapper)

    return decorate


def fold(text: str) -> str:
    """Case- and accent-insensitive form: 'São Paulo' -> 'sao paulo'."""
    if text.isascii():
        # Nothing to decompose, and casefold() is lower() on ASCII; the per-character loop below took most of a
        # write's guard time on a known memory of thousands of words.
        return text.lower()
    return unicodedata.normalize("NFKD", text.casefold()).translate(_WITHOUT_MARKS)


class _CombiningMarks(dict[int, int | None]):
    """str.translate table that deletes combining marks (accents after NFKD) and keeps every other character,
    filled one code point at a time as texts meet them: translate runs in C, where a generator over the
    characters of a known memory of thousands of words took ~1 ms a write. At most _MARKS_CACHED code points are
    kept (a few MB); past that a character is looked up each time."""

    def __missing__(self, code: int) -> int | None:
        kept = None if unicodedata.combining(chr(code)) else code
        if len(self) < _MARKS_CACHED:
            self[code] = kept
        return kept


_MARKS_CACHED = 65536


_WITHOUT_MARKS = _CombiningMarks()


def clean_text(text: str) -> str:
    """`text` without NUL characters and with lone UTF-16 surrogates replaced by U+FFFD.

    PostgreSQL text and jsonb cannot hold NUL, and a lone surrogate cannot be encoded as UTF-8: a model's answer
    ("\\u0000", "\\ud800" are valid JSON escapes) or an error message quoting it would make the row unstorable.
    """
    if text.isascii() and "\x00" not in text:
        return text
    return _LONE_SURROGATE.sub("\ufffd", text.replace("\x00", ""))


def clean_strings(value: Any) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with every string, keys included, through clean_text.

    Members that are plain strings, numbers or None are cleaned inline rather than by a recursive call each (a
    write cleans its run record, trace included: ~300 values, three times a write); the recursion
    depth per nesting level is what it was, so json and this give up on the same answers.
    """
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {
            clean_text(key) if type(key) is str else clean_strings(key): (
                clean_text(item) if type(item) is str else item if type(item) in _SCALARS else clean_strings(item)
            )
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [
            clean_text(item) if type(item) is str else item if type(item) in _SCALARS else clean_strings(item)
            for item in value
        ]
    return value


# Types clean_strings returns as they are, checked by exact type (a str subclass still goes through clean_text).
_SCALARS = frozenset({int, float, bool, type(None)})


@short_text_cache(maxsize=16384)
def normalise_alias(name: str) -> str:
    """The registry form of a name: folded, punctuation collapsed to single spaces.

    A name with no letter or digit keeps its folded symbols ("😀" stays "😀"), so that "😀" and "🍕" stay two
    names instead of both becoming "" and merging; only a blank name is "".
    Memoised (short_text_cache): a write asks it of the same names, n-grams and fact texts hundreds of times.
    """
    return _words(name) or " ".join(fold(name).split())


def _words(text: str) -> str:
    """The folded words of `text`, single-spaced: 'Dr. João-Pedro!' -> 'dr joao pedro'."""
    return " ".join(_NON_WORD.sub(" ", fold(text)).split())


def fact_identity_key(text: str) -> str:
    """The stored fingerprint of what a fact says: texts equal but for case, accents and punctuation share it."""
    return hashlib.md5(normalise_alias(text).encode(), usedforsecurity=False).hexdigest()


def slugify(name: str) -> str:
    """Unicode slug: 'São Paulo' -> 'sao_paulo'; a name with no letter or digit: 'x' and a short hash ('😀' ->
    'x3f2a...'), so keys stay word characters and distinct names keep distinct keys."""
    words = _words(name)
    if words:
        return words.replace(" ", "_")
    norm = normalise_alias(name)
    if not norm:
        return ""
    digest = hashlib.blake2b(norm.encode(), digest_size=8).hexdigest()
    return "x" + digest[:_WORDLESS_SLUG_HEX]


def entity_key(entity_type: str, name: str) -> str:
    """`{type}:{slug}`, e.g. ('person', 'Clara Rezende') -> 'person:clara_rezende'."""
    return f"{slugify(entity_type) or 'concept'}:{slugify(name)}"


def message_ngrams(message: str, max_words: int = MAX_ALIAS_WORDS) -> list[str]:
    """Every run of 1..max_words consecutive words of the folded message, in registry form.

    Alias lookup asks the database for these exact strings, so matching is word-bounded and costs
    O(words x max_words) index probes however many aliases the agent has.
    """
    return ngrams(message_words(message), max_words)


def message_words(message: str) -> list[str]:
    """The folded words of `message`, in order: the words `message_ngrams` builds its n-grams from."""
    return _words(message).split()


def ngrams(words: Sequence[str], max_words: int = MAX_ALIAS_WORDS) -> list[str]:
    """Every run of 1..max_words consecutive `words`, space-joined, first occurrence first (by start, then size).

    Each n-gram extends the one before it by a word instead of joining a new slice: the known memory of a write
    has thousands of words, and this ran once per text per write (4.5 ms of a write at 100 facts).
    """
    grams: dict[str, None] = {}
    if max_words < 1:
        return []
    for start, first in enumerate(words):
        gram = first
        grams[gram] = None
        for word in words[start + 1 : start + max_words]:
            gram = f"{gram} {word}"
            grams[gram] = None
    return list(grams)


# Two words are one when their first letters agree ("casamos" and "casó" do not, "married" and "marry" do):
# inflection changes endings. Four letters: "mudou"/"mudei", "wohne"/"wohnt", "trabaja"/"trabajo"; three for a
# word of five letters or fewer ("mora"/"moro", "vive"/"vivo", "lebt"/"leben").
CONTENT_PREFIX = 4
SHORT_WORD = 5
# rapidfuzz ratio (0-100) at which two words are one spelt otherwise ("Lisboa"/"Lisbon" 83, "Melany"/"Melanie" 92).
SAME_WORD_RATIO = 80.0


def without_words(text: str, words: Iterable[str]) -> str:
    """`text` with each of `words` blanked where it stands as a whole word (names before reading the rest)."""
    for word in words:
        text = re.sub(rf"(?<!\w){re.escape(word)}(?!\w)", " ", text)
    return text


def is_said(word: str, said: frozenset[str]) -> bool:
    """Whether `word` is one of `said` or an inflection or other spelling of one ("Deutschen"/"Deutsche")."""
    if word in said:
        return True
    prefix = word[: CONTENT_PREFIX - 1 if len(word) <= SHORT_WORD else CONTENT_PREFIX]
    return any(
        other.startswith(prefix) or (len(other) >= 4 and fuzz.ratio(word, other) >= SAME_WORD_RATIO)
        for other in said
        if len(other) >= min(3, len(word))
    )
