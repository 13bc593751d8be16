"""Text normalisation shared by alias lookup, resolution and dedup: folding, slugs, entity keys."""

from __future__ import annotations

import hashlib
import re
import unicodedata

__all__ = ["entity_key", "fact_identity_key", "fold", "message_ngrams", "normalise_alias", "slugify"]

_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)
# Aliases longer than this many words are not looked up in messages (names rarely exceed it).
MAX_ALIAS_WORDS = 6


def fold(text: str) -> str:
    """Case- and accent-insensitive form: 'São Paulo' -> 'sao paulo'."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def normalise_alias(name: str) -> str:
    """The registry form of a name: folded, punctuation collapsed to single spaces."""
    return " ".join(_NON_WORD.sub(" ", fold(name)).split())


def fact_identity_key(text: str) -> str:
    """The stored fingerprint of what a fact says: texts equal but for case, accents and punctuation share it."""
    return hashlib.md5(normalise_alias(text).encode(), usedforsecurity=False).hexdigest()


def slugify(name: str) -> str:
    """Unicode slug: 'São Paulo' -> 'sao_paulo'."""
    return normalise_alias(name).replace(" ", "_")


def entity_key(entity_type: str, name: str) -> str:
    """`{type}:{slug}`, e.g. ('person', 'Clara Rezende') -> 'person:clara_rezende'."""
    return f"{slugify(entity_type) or 'concept'}:{slugify(name)}"


def message_ngrams(message: str, max_words: int = MAX_ALIAS_WORDS) -> list[str]:
    """Every run of 1..max_words consecutive words of the folded message, in registry form.

    Alias lookup asks the database for these exact strings, so matching is word-bounded and costs
    O(words x max_words) index probes however many aliases the agent has.
    """
    words = normalise_alias(message).split()
    grams: dict[str, None] = {}
    for start in range(len(words)):
        for size in range(1, max_words + 1):
            if start + size > len(words):
                break
            grams[" ".join(words[start : start + size])] = None
    return list(grams)
