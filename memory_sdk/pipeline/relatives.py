"""Relatives: "mom", "my girlfriend", "minha mãe", "Melanie's mom", "a irmã da Ana" name a person relative to
someone (the speaker when no one else is named).

A relative is never the person it is relative to and never a stranger: "Melanie's mom" is keyed
`person:melanie.mom` and registered under the canonical alias "Melanie's mom" (measured with a 1.5B model, issue
13: twelve possessives of Melanie were made her aliases by the first-name prefix rule). A named relative ("Ana's
sister Julia", "my mom Helena") is the named person, with the relative form as an alias. Either way the write gets
a kin relation to the owner (`kin_relation`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory_sdk.text import normalise_alias, short_text_cache

__all__ = [
    "POSSESSIVES",
    "Relative",
    "canonical_name",
    "kin_relation",
    "possessed_thing",
    "relative_key",
    "relative_of",
    "relative_term",
    "relative_words",
]

# Canonical term -> the words (English and Portuguese, folded) that name it.
_TERMS: dict[str, tuple[str, ...]] = {
    "mom": ("mom", "mother", "mum", "mommy", "mae", "mamae", "madre", "mama"),
    "dad": ("dad", "father", "daddy", "pai", "papai", "padre", "papa"),
    "wife": ("wife", "esposa"),
    "husband": ("husband", "marido", "esposo"),
    "girlfriend": ("girlfriend", "namorada", "novia"),
    "boyfriend": ("boyfriend", "namorado", "novio"),
    "partner": ("partner", "parceiro", "parceira", "companheiro", "companheira"),
    "brother": ("brother", "irmao", "hermano"),
    "sister": ("sister", "irma", "hermana"),
    "son": ("son", "filho", "hijo"),
    "daughter": ("daughter", "filha", "hija"),
    "children": ("kids", "children", "filhos", "hijos"),
    "grandmother": ("grandma", "grandmother", "avo", "vovo", "abuela"),
    "grandfather": ("grandpa", "grandfather", "abuelo"),
    "uncle": ("uncle", "tio"),
    "aunt": ("aunt", "tia"),
    "cousin": ("cousin", "primo", "prima"),
    "friend": ("friend", "best friend", "amigo", "amiga", "melhor amigo", "melhor amiga"),
    "boss": ("boss", "chefe", "jefe"),
    "coworker": ("coworker", "colleague", "colega"),
}
_BY_WORD = {word: term for term, words in _TERMS.items() for word in words}
# The relation a relative has to its owner, named from the relative's side ("Ana's mom" parent_of Ana).
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
# Leading possessives of the speaker (folded, with their trailing space): "my violin", "minha mãe", "mi perro".
POSSESSIVES = ("o meu ", "a minha ", "os meus ", "as minhas ", "my ", "meu ", "minha ", "meus ", "minhas ", "mi ")
_OWN_WORDS = frozenset({"our", "nosso", "nossa", "mis", "nuestro", "nuestra"})
_ARTICLES = frozenset({"o", "a", "os", "as", "the", "el", "la", "los", "las"})
# "Melanie's mom", "Melanie’s sister Julia": the owner before the apostrophe.
_ENGLISH_POSSESSIVE = re.compile(r"^\s*(?P<owner>[^'’]+?)\s*['’]s?\s+(?P<rest>.+?)\s*$")
# "mãe da Ana", "a irmã do Rafael", "la hermana de Ana", "the sister of Ana" (folded words).
_ROMANCE_OF = frozenset({"do", "da", "dos", "das", "de", "del", "of"})
# An owner that is the speaker: "a friend of mine", "amigo meu".
_SPEAKER_OWNERS = frozenset({"mine", "me", "mim", "meu", "minha", "mio", "mia"})


@dataclass(frozen=True)
class Relative:
    """A relative named by a kinship term: whose (`owner`, as written), which (`term`), and the relative's own
    name when the text gives one ("Ana's sister Julia" -> "Julia")."""

    owner: str
    term: str
    own_name: str | None = None


@short_text_cache(maxsize=8192)
def relative_of(name: str, speaker: str) -> Relative | None:
    """The relative `name` denotes, or None when it is not a kinship phrase. Memoised (short_text_cache): the guards
    and canonicalisation ask it of the same names and phrases many times a write (46 parses a write, session 19).

    >>> relative_of("a irmã da Ana", "Rafael")
    Relative(owner='Ana', term='sister', own_name=None)
    """
    norm = normalise_alias(name)
    for prefix in (*POSSESSIVES, normalise_alias(speaker) + " s "):
        if norm.startswith(prefix):
            return _term_and_name(norm[len(prefix) :], speaker, name)
    first, _, rest = norm.partition(" ")
    if first in _OWN_WORDS:
        return _term_and_name(rest, speaker, name)
    english = _ENGLISH_POSSESSIVE.match(name)
    if english is not None:
        found = _term_and_name(normalise_alias(english.group("rest")), english.group("owner").strip(), name)
        if found is not None:
            return found
    return _romance_of(name, speaker) or _term_and_name(norm, speaker, name, named=False)


def _term_and_name(words: str, owner: str, raw: str, *, named: bool = True) -> Relative | None:
    """`words` as a kinship term, optionally followed by the relative's name ("sister julia")."""
    parts = words.split(" ")
    for size in (2, 1):
        term = _BY_WORD.get(" ".join(parts[:size]))
        if term is None:
            continue
        rest = parts[size:]
        if not rest:
            return Relative(owner, term)
        if named:
            return Relative(owner, term, _original_tail(raw, len(rest)))
    return None


def _romance_of(name: str, speaker: str) -> Relative | None:
    """'a mãe da Ana', 'irmão do Rafael', 'the sister of Ana': a kinship term, then do/da/de/of and the owner."""
    raw_words = name.split()
    folded = normalise_alias(name).split()
    if len(folded) != len(raw_words):
        return None
    start = 1 if folded and folded[0] in _ARTICLES else 0
    for size in (2, 1):
        term = _BY_WORD.get(" ".join(folded[start : start + size]))
        link = start + size
        if term is not None and link < len(folded) - 1 and folded[link] in _ROMANCE_OF:
            owner = " ".join(raw_words[link + 1 :]).strip(" ,.")
            own = normalise_alias(owner)
            return Relative(speaker if own in _SPEAKER_OWNERS or own == normalise_alias(speaker) else owner, term)
    return None


def _original_tail(raw: str, words: int) -> str:
    """The last `words` words of `raw` as written (case and accents kept)."""
    return " ".join(raw.split()[-words:]).strip(" ,.")


def relative_term(name: str, speaker: str) -> str | None:
    """The canonical term when `name` is only a relationship term of the speaker ("my mom" -> "mom"), else None."""
    found = relative_of(name, speaker)
    if found is None or found.own_name is not None or normalise_alias(found.owner) != normalise_alias(speaker):
        return None
    return found.term


def relative_words(term: str) -> set[str]:
    """The folded words that name a canonical term ("mom" -> {"mom", "mother", "mae", ...})."""
    return set(_TERMS[term])


def relative_key(term: str, owner_key: str) -> str:
    """The relative's key under its owner's: ("mom", "person:rafael") -> "person:rafael.mom"."""
    return f"{owner_key}.{term}"


def canonical_name(name: str, speaker: str) -> str:
    """A relative with no name of its own becomes "{Owner}'s {term}"; any other name is returned unchanged."""
    found = relative_of(name, speaker)
    if found is None or found.own_name is not None:
        return name
    return f"{found.owner}'s {found.term}"


def kin_relation(name: str, speaker: str) -> tuple[str, str] | None:
    """(relation type, owner) that the relative `name` has to its owner: "Ana's mom" -> ("parent_of", "Ana")."""
    found = relative_of(name, speaker)
    return None if found is None else (_KIN_RELATIONS[found.term], found.owner)


def possessed_thing(name: str) -> bool:
    """Whether `name` is a thing the speaker owns ("my violin", "minha bicicleta"), not a relative or a name.

    Such a thing is no entity of its own (every speaker has "my car"); what the message says about it is a fact
    about the speaker (docs/decisions.md).
    """
    norm = normalise_alias(name)
    owned = next((norm[len(p) :] for p in POSSESSIVES if norm.startswith(p)), None)
    if owned is None and norm.partition(" ")[0] in _OWN_WORDS:
        owned = norm.partition(" ")[2]
    return bool(owned) and _term_and_name(owned or "", "", name) is None
