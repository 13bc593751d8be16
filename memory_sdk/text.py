"""Text normalisation shared by alias lookup, resolution and dedup: folding, slugs, entity keys; and the cleaning
that makes any text a model or provider returns storable in PostgreSQL text and jsonb."""

from __future__ import annotations

import hashlib
import itertools
import re
import unicodedata
from typing import Any

__all__ = [
    "clean_strings",
    "clean_text",
    "entity_key",
    "fact_identity_key",
    "fold",
    "is_negated",
    "message_ngrams",
    "normalise_alias",
    "slugify",
]

_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# A name with no letter or digit ("😀", "🍕") gets a slug from this many hex digits of a hash of its folded form:
# 40 bits keep two such names of one agent apart (a collision needs ~10^6 of them).
_WORDLESS_SLUG_HEX = 10
# Aliases longer than this many words are not looked up in messages (names rarely exceed it).
MAX_ALIAS_WORDS = 6

# Words that negate a statement in English, Portuguese and Spanish, folded ("não" is "nao"; "isn't" folds to
# "isn t", hence the lone "t"). Not "no" alone: in Portuguese it is "em o" ("mora no Rio"); it negates only in the
# pairs of _NEGATING_PAIRS. Not "nada" ("Ana nada bem": she swims well) nor "anymore"/"mais", which only
# strengthen a negation that is already there.
_NEGATION_WORDS = frozenset(
    "not never nor neither nobody nothing t nao nunca nem jamais nenhum nenhuma ninguem jamas tampoco nadie ningun "  # noqa: SIM905
    "ninguna".split()
)
_NEGATING_PAIRS = frozenset({("no", "longer"), ("no", "more"), ("no", "one"), ("ya", "no")})


def fold(text: str) -> str:
    """Case- and accent-insensitive form: 'São Paulo' -> 'sao paulo'."""
    if text.isascii():
        # Nothing to decompose, and casefold() is lower() on ASCII; the per-character loop below took most of a
        # write's guard time on a known memory of thousands of words.
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def clean_text(text: str) -> str:
    """`text` without NUL characters and with lone UTF-16 surrogates replaced by U+FFFD.

    PostgreSQL text and jsonb cannot hold NUL, and a lone surrogate cannot be encoded as UTF-8: a model's answer
    ("\\u0000", "\\ud800" are valid JSON escapes) or an error message quoting it would make the row unstorable.
    """
    if text.isascii() and "\x00" not in text:
        return text
    return _LONE_SURROGATE.sub("\ufffd", text.replace("\x00", ""))


def clean_strings(value: Any) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with every string, keys included, through clean_text."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_strings(key): clean_strings(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [clean_strings(item) for item in value]
    return value


def normalise_alias(name: str) -> str:
    """The registry form of a name: folded, punctuation collapsed to single spaces.

    A name with no letter or digit keeps its folded symbols ("😀" stays "😀"), so that "😀" and "🍕" stay two
    names instead of both becoming "" and merging; only a blank name is "".
    """
    return _words(name) or " ".join(fold(name).split())


def _words(text: str) -> str:
    """The folded words of `text`, single-spaced: 'Dr. João-Pedro!' -> 'dr joao pedro'."""
    return " ".join(_NON_WORD.sub(" ", fold(text)).split())


def is_negated(text: str) -> bool:
    """Whether `text` says something is not so: "Rafael não trabalha mais na Acme", "Ana isn't at Globex", "Ana no
    longer works there", "Ya no vive en Lima". Presence, not parity: Portuguese and Spanish stack negations ("não
    conhece ninguém") without cancelling them. Spanish "no" alone ("No trabaja") is missed on purpose (see
    _NEGATION_WORDS)."""
    words = normalise_alias(text).split()
    return not _NEGATION_WORDS.isdisjoint(words) or any(pair in _NEGATING_PAIRS for pair in itertools.pairwise(words))


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
    words = _words(message).split()
    grams: dict[str, None] = {}
    for start in range(len(words)):
        for size in range(1, max_words + 1):
            if start + size > len(words):
                break
            grams[" ".join(words[start : start + size])] = None
    return list(grams)
