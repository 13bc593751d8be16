"""Relatives: "mom", "my girlfriend", "minha mãe", "Melanie's mom", "a irmã da Ana" name a person relative to
someone (the speaker when no one else is named).

A relative is never the person it is relative to and never a stranger: "Melanie's mom" is keyed
`person:melanie.mom` and registered under the canonical alias "Melanie's mom" (measured with a 1.5B model, issue
13: twelve possessives of Melanie were made her aliases by the first-name prefix rule). A named relative ("Ana's
sister Julia", "my mom Helena") is the named person, with the relative form as an alias. Either way the write gets
a kin relation to the owner (`kin_relation`).

The words are the lexicons' (`Lexicon.kinship`, `possessives`, `articles`, `owner_links`, `speaker_owners`): each
function reads those of the language it is given, the message's, or every lexicon's when it is given none.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from memory_sdk.lexicons import LANGUAGES, lexicon_for
from memory_sdk.text import normalise_alias, short_text_cache

__all__ = [
    "EVERY_LANGUAGE",
    "Relative",
    "canonical_name",
    "kin_relation",
    "possessed_thing",
    "relative_key",
    "relative_of",
    "relative_term",
    "relative_words",
]

# Canonical term -> the relation a relative has to its owner, named from the relative's side ("Ana's mom"
# parent_of Ana).
_KIN_RELATIONS: dict[str, str] = {
    "mom": "parent_of",
    "dad": "parent_of",
    "wife": "spouse_of",
    "husband": "spouse_of",
    "girlfriend": "partner_of",
    "boyfriend": "partner_of",
    "partner": "partner_of",
    "brother": "sibling_of",
    "sister": "sibling_of",
    "son": "child_of",
    "daughter": "child_of",
    "children": "child_of",
    "grandmother": "grandparent_of",
    "grandfather": "grandparent_of",
    "uncle": "uncle_of",
    "aunt": "aunt_of",
    "cousin": "cousin_of",
    "friend": "friend_of",
    "boss": "boss_of",
    "coworker": "coworker_of",
}
# "Melanie's mom", "Melanie’s sister Julia": the owner before the apostrophe.
_ENGLISH_POSSESSIVE = re.compile(r"^\s*(?P<owner>[^'’]+?)\s*['’]s?\s+(?P<rest>.+?)\s*$")
# Every lexicon's words: what a caller that does not know the message's language reads (guards.py, client.py).
EVERY_LANGUAGE = "*"


@dataclass(frozen=True)
class _Words:
    """The words the kinship rules read, of one lexicon or of every lexicon (EVERY_LANGUAGE)."""

    kinship: Mapping[str, str]
    possessives: frozenset[str]
    articles: frozenset[str]
    owner_links: frozenset[str]
    speaker_owners: frozenset[str]


@functools.cache
def _words_of(language: str) -> _Words:
    """The kinship words of `language` (a lexicon code; "" or an unknown one: none), or of every lexicon. The
    canonical terms themselves ("mom", "sister") are read in every language: the write names relatives with them
    ("Ana's mom", canonical_name) and later stages parse those names again."""
    lexicons = [lexicon_for(code) for code in LANGUAGES] if language == EVERY_LANGUAGE else [lexicon_for(language)]
    kinship = {term: term for term in _KIN_RELATIONS}
    for lexicon in lexicons:
        kinship.update(lexicon.kinship)
    return _Words(
        kinship=kinship,
        possessives=frozenset().union(*(lexicon.possessives for lexicon in lexicons)),
        articles=frozenset().union(*(lexicon.articles for lexicon in lexicons)),
        owner_links=frozenset().union(*(lexicon.owner_links for lexicon in lexicons)),
        speaker_owners=frozenset().union(*(lexicon.speaker_owners for lexicon in lexicons)),
    )


@dataclass(frozen=True)
class Relative:
    """A relative named by a kinship term: whose (`owner`, as written), which (`term`), and the relative's own
    name when the text gives one ("Ana's sister Julia" -> "Julia")."""

    owner: str
    term: str
    own_name: str | None = None


@short_text_cache(maxsize=8192)
def relative_of(name: str, speaker: str, language: str = EVERY_LANGUAGE) -> Relative | None:
    """The relative `name` denotes in the words of `language` (a lexicon code, `Lexicon.code`; EVERY_LANGUAGE: of
    every lexicon), or None when it is not a kinship phrase. Memoised (short_text_cache): the guards and
    canonicalisation ask it of the same names and phrases many times a write (46 parses a write).

    >>> relative_of("a irmã da Ana", "Rafael", "pt")
    Relative(owner='Ana', term='sister', own_name=None)
    """
    words = _words_of(language)
    norm = normalise_alias(name)
    owned = _owned(norm, words)
    if owned is not None:
        return _term_and_name(owned, speaker, name, words)
    prefix = normalise_alias(speaker) + " s "
    if norm.startswith(prefix):
        return _term_and_name(norm[len(prefix) :], speaker, name, words)
    english = _ENGLISH_POSSESSIVE.match(name)
    if english is not None:
        found = _term_and_name(normalise_alias(english.group("rest")), english.group("owner").strip(), name, words)
        if found is not None:
            return found
    return _romance_of(name, speaker, words) or _term_and_name(norm, speaker, name, words, named=False)


def _owned(norm: str, words: _Words) -> str | None:
    """What follows a leading first-person possessive, itself after an optional article ("my violin", "a minha
    mãe", "mi perro" -> "violin", "mae", "perro"), or None when `norm` opens with none."""
    parts = norm.split(" ")
    start = 1 if len(parts) > 2 and parts[0] in words.articles and parts[1] in words.possessives else 0
    if len(parts) > start + 1 and parts[start] in words.possessives:
        return " ".join(parts[start + 1 :])
    return None


def _term_and_name(words: str, owner: str, raw: str, lexicon: _Words, *, named: bool = True) -> Relative | None:
    """`words` as a kinship term, optionally followed by the relative's name ("sister julia")."""
    parts = words.split(" ")
    for size in (2, 1):
        term = lexicon.kinship.get(" ".join(parts[:size]))
        if term is None:
            continue
        rest = parts[size:]
        if not rest:
            return Relative(owner, term)
        if named:
            return Relative(owner, term, _original_tail(raw, len(rest)))
    return None


def _romance_of(name: str, speaker: str, words: _Words) -> Relative | None:
    """'a mãe da Ana', 'irmão do Rafael', 'the sister of Ana': a kinship term, then do/da/de/of and the owner."""
    raw_words = name.split()
    folded = normalise_alias(name).split()
    if len(folded) != len(raw_words):
        return None
    start = 1 if folded and folded[0] in words.articles else 0
    for size in (2, 1):
        term = words.kinship.get(" ".join(folded[start : start + size]))
        link = start + size
        if term is not None and link < len(folded) - 1 and folded[link] in words.owner_links:
            owner = " ".join(raw_words[link + 1 :]).strip(" ,.")
            own = normalise_alias(owner)
            speaking = own in words.speaker_owners or own == normalise_alias(speaker)
            return Relative(speaker if speaking else owner, term)
    return None


def _original_tail(raw: str, words: int) -> str:
    """The last `words` words of `raw` as written (case and accents kept)."""
    return " ".join(raw.split()[-words:]).strip(" ,.")


def relative_term(name: str, speaker: str, language: str = EVERY_LANGUAGE) -> str | None:
    """The canonical term when `name` is only a relationship term of the speaker ("my mom" -> "mom"), else None."""
    found = relative_of(name, speaker, language)
    if found is None or found.own_name is not None or normalise_alias(found.owner) != normalise_alias(speaker):
        return None
    return found.term


def relative_words(term: str, language: str = EVERY_LANGUAGE) -> set[str]:
    """The folded words that name a canonical term in `language` ("mom" -> {"mom", "mother", "mae", ...})."""
    return {word for word, named in _words_of(language).kinship.items() if named == term}


def relative_key(term: str, owner_key: str) -> str:
    """The relative's key under its owner's: ("mom", "person:rafael") -> "person:rafael.mom"."""
    return f"{owner_key}.{term}"


def canonical_name(name: str, speaker: str, language: str = EVERY_LANGUAGE) -> str:
    """A relative with no name of its own becomes "{Owner}'s {term}"; any other name is returned unchanged."""
    found = relative_of(name, speaker, language)
    if found is None or found.own_name is not None:
        return name
    return f"{found.owner}'s {found.term}"


def kin_relation(name: str, speaker: str, language: str = EVERY_LANGUAGE) -> tuple[str, str] | None:
    """(relation type, owner) that the relative `name` has to its owner: "Ana's mom" -> ("parent_of", "Ana")."""
    found = relative_of(name, speaker, language)
    return None if found is None else (_KIN_RELATIONS[found.term], found.owner)


def possessed_thing(name: str, language: str = EVERY_LANGUAGE) -> bool:
    """Whether `name` is a thing the speaker owns ("my violin", "minha bicicleta"), not a relative or a name, in
    the words of `language` (with no lexicon, nothing is).

    Such a thing is no entity of its own (every speaker has "my car"); what the message says about it is a fact
    about the speaker (docs/decisions.md).
    """
    words = _words_of(language)
    owned = _owned(normalise_alias(name), words)
    return bool(owned) and _term_and_name(owned or "", "", name, words) is None
