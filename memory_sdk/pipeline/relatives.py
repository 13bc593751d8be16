"""Speaker-relative people: "mom", "my girlfriend", "minha mãe" name a person relative to the speaker.

A bare relationship term is never the speaker and never a stranger: it is the speaker's mom, keyed
`person:{speaker}.mom`, and it is registered under the canonical alias "{Speaker}'s mom", so a later
"my mom Helena" (extracted as Helena with the alias "my mom") links to the same person by alias.
"""

from __future__ import annotations

from memory_sdk.text import normalise_alias, slugify

__all__ = ["canonical_name", "relative_key", "relative_term"]

# Canonical term -> the words (English and Portuguese, folded) that name it.
_TERMS: dict[str, tuple[str, ...]] = {
    "mom": ("mom", "mother", "mum", "mommy", "mae", "mamae"),
    "dad": ("dad", "father", "daddy", "pai", "papai"),
    "wife": ("wife", "esposa"),
    "husband": ("husband", "marido", "esposo"),
    "girlfriend": ("girlfriend", "namorada"),
    "boyfriend": ("boyfriend", "namorado"),
    "partner": ("partner", "parceiro", "parceira", "companheiro", "companheira"),
    "brother": ("brother", "irmao"),
    "sister": ("sister", "irma"),
    "son": ("son", "filho"),
    "daughter": ("daughter", "filha"),
    "grandmother": ("grandma", "grandmother", "avo", "vovo"),
    "grandfather": ("grandpa", "grandfather"),
    "uncle": ("uncle", "tio"),
    "aunt": ("aunt", "tia"),
    "cousin": ("cousin", "primo", "prima"),
    "friend": ("friend", "best friend", "amigo", "amiga", "melhor amigo", "melhor amiga"),
    "boss": ("boss", "chefe"),
    "coworker": ("coworker", "colleague", "colega"),
}
_BY_WORD = {word: term for term, words in _TERMS.items() for word in words}
_POSSESSIVES = ("my ", "meu ", "minha ", "o meu ", "a minha ", "mi ", "our ", "nosso ", "nossa ")


def relative_term(name: str, speaker: str) -> str | None:
    """The canonical relationship term when `name` is only one ("my mom" -> "mom"), else None."""
    norm = normalise_alias(name)
    speaker_prefix = normalise_alias(speaker) + " s "
    for prefix in (*_POSSESSIVES, speaker_prefix):
        if norm.startswith(prefix):
            norm = norm[len(prefix) :]
            break
    return _BY_WORD.get(norm)


def relative_key(term: str, speaker: str) -> str:
    """`person:{speaker}.{term}`, e.g. ("mom", "Rafael") -> "person:rafael.mom"."""
    return f"person:{slugify(speaker)}.{term}"


def canonical_name(name: str, speaker: str) -> str:
    """A relationship term becomes "{Speaker}'s {term}"; any other name is returned unchanged."""
    term = relative_term(name, speaker)
    return f"{speaker}'s {term}" if term else name
