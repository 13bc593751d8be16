"""Attributes: the single-valued attribute (`lives_in`, `employer`) a fact's text shows in words, the words of the
lexicons that have them (`Lexicon.attribute_phrases`: en, pt, es).

Under the guard contract (docs/write-pipeline.md, "The guard contract") a guard never gives a fact an attribute; it
may only refuse a single-valued attribute that names no value (post_extraction.refused_attribute). What is read
here is read, not written: `shares_a_topic` (decisions) takes two facts that say the same attribute ("moved to
Austin", "lives in São Paulo") to be about the same thing, so a decision between them is not refused.
"""

from __future__ import annotations

import re
import unicodedata

from memory_sdk.lexicons import LANGUAGES, denied, lexicon_for
from memory_sdk.text import short_text_cache

# The lexicons that say attributes in words (Lexicon.attribute_phrases), read together: a fact and a stored fact may
# come from messages in different languages, and reading more words only finds more shared topics, which lets a
# decision stand rather than changing one.
_PHRASES = tuple(lexicon_for(code) for code in LANGUAGES if lexicon_for(code).attribute_phrases)
_ATTRIBUTE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    pair for lexicon in _PHRASES for pair in lexicon.attribute_phrases
)
_PAST_HABITS = tuple(lexicon.past_habit for lexicon in _PHRASES if lexicon.past_habit is not None)
_TITLES = tuple(lexicon.title for lexicon in _PHRASES if lexicon.title is not None)


def _past_habit(text: str) -> bool:
    return any(pattern.search(text) for pattern in _PAST_HABITS)


def _titled(text: str) -> bool:
    return any(pattern.search(text) for pattern in _TITLES)


def inferred_attribute(text: str, given: str | None) -> tuple[str, str] | None:
    """The attribute a fact's text shows (`lives_in`, `employer`) when the model gave none, or gave `job_title`
    to a fact that names an employer and no title; with why. None: keep what the model gave.

    Measured with the 1.5B model (truth benchmark, prompt v8): "Tom moved to Denver yesterday" and "Rafael mudeu
    pra São Paulo ontem" came with no attribute, so the single-valued rule left the old home current beside the
    new one (5 stale facts of 25); "Caroline started a new job at Hope Counseling" came as `job_title`. A negated
    fact ("não trabalha mais na Acme") is a retraction, never a value.
    """
    if given not in (None, "job_title"):
        return None
    reading = _attribute_reading(text)
    if reading is None:
        return None
    shown, titled = reading
    for attribute, words in shown:
        if attribute == given:
            continue
        if given == "job_title" and (attribute != "employer" or titled):
            return None
        return attribute, f"{words!r} says {attribute}" + (f" (the model said {given})" if given else "")
    return None


@short_text_cache(maxsize=4096)
def _attribute_reading(text: str) -> tuple[tuple[tuple[str, str], ...], bool] | None:
    """What `inferred_attribute` reads in a text, whatever attribute the model gave: each (attribute, matched words)
    of _ATTRIBUTE_PATTERNS whose object is a proper noun, in pattern order, and whether a title stands beside it;
    None for a negated fact or a past habit. Memoised: reconciliation reads each fact and each of its candidates
    (52 readings a write at 100 facts), and the candidates recur from write to write."""
    if denied(text) or _past_habit(text):
        return None
    plain = _strip_accents(text)
    shown = []
    for attribute, pattern in _ATTRIBUTE_PATTERNS:
        match = pattern.search(plain)
        if match is not None and match.group("object")[:1].isupper():
            shown.append((attribute, match.group(0)))
    return tuple(shown), _titled(plain)


def _strip_accents(text: str) -> str:
    if text.isascii():  # NFKD leaves ASCII as it is
        return text
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
