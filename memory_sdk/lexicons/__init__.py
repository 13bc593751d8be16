"""One lexicon per language: the only place where words of a language live (docs/write-pipeline.md, "The guard
contract"). A rule that needs words runs for a message in a language that has a lexicon here, with that language's
words only; for any other language only the language-neutral rules run.

The language is the caller's (`write(..., language="de")`) or detected by `detect_language`: the lexicon whose
function words the message uses most, when one leads. Detection is cheap (a set lookup per word) and errs towards
None, which only switches the word rules off.

    >>> detect_language("Ich wohne nicht mehr in Köln")
    'de'
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from memory_sdk.text import fold, short_text_cache

__all__ = ["ALL_FUNCTION_WORDS", "LANGUAGES", "NEUTRAL", "Lexicon", "denied", "detect_language", "lexicon_for"]


@dataclass(frozen=True)
class Lexicon:
    """A language's words, folded (lower case, no accents), as the rules read them.

    - `function_words`: words that say nothing about where a fact came from (articles, pronouns, prepositions,
      auxiliaries); they also tell the language apart.
    - `markers`: frequent content words, for telling the language apart only.
    - `first_person`: the speaker speaking of themselves alone ("I", "eu", "ich"); `other_person`: second and
      third person pronouns, which may make a first-person sentence about someone else.
    - `we`: first-person plural words ("we", "nós", "wir", "uns"): a sentence with one includes the speaker.
    - `possessives`: first-person possessive determiners: "meine Mutter" said by Anna names Anna's mother.
    - `negation`: a pattern over folded words that says a statement is not so ("nicht mehr", "ne ... plus").
    - `chatter`: greetings, thanks, acknowledgements and fillers: a message of these only carries no memory;
      `answers`: words that carry memory only as the answer to a question ("sim", "yes").
    - `greetings`: words said to someone just before their name ("Hey Mel", "Valeu, Guili"): a vocative follows.
    - `kinship`: word -> canonical kinship term (pipeline/relatives.py): "mae" -> "mom", "best friend" -> "friend".
    - `articles`: definite articles that may open a relative's name ("a mãe da Ana", "the sister of Ana").
    - `owner_links`: words between a kinship term and its owner ("mãe da Ana", "hermana de Ana", "sister of Ana").
    - `speaker_owners`: owners that are the speaker ("a friend of mine", "amigo mío").
    - `capitalised_nouns`: the language writes every noun with a capital ("Jahre"), so capitals mark no name.
    - `instructions`: a pattern over folded words for a sentence addressed to the assistant about its memory or its
      instructions ("ignore previous instructions", "forget where I live"): never evidence that a fact ended.
    """

    code: str
    function_words: frozenset[str] = frozenset()
    # Frequent words that are no function words ("live", "moro", "wohne"): they only help tell the language apart.
    markers: frozenset[str] = frozenset()
    first_person: frozenset[str] = frozenset()
    # What a model may answer as a fact's subject for the speaker ("I", "eu", "ich"): read in every language's
    # words, since the prompt is English and a model may answer in either. Never a possessive that is also a name
    # ("mia", "ma", "mi").
    speaker_labels: frozenset[str] = frozenset()
    we: frozenset[str] = frozenset()
    other_person: frozenset[str] = frozenset()
    possessives: frozenset[str] = frozenset()
    negation: re.Pattern[str] | None = None
    chatter: frozenset[str] = frozenset()
    answers: frozenset[str] = field(default=frozenset())
    greetings: frozenset[str] = frozenset()
    # Not hashed (a dict): the other fields tell lexicons apart.
    kinship: Mapping[str, str] = field(default_factory=dict, hash=False)
    articles: frozenset[str] = frozenset()
    owner_links: frozenset[str] = frozenset()
    speaker_owners: frozenset[str] = frozenset()
    # Whether the language capitalises its nouns (German): then a capitalised word is no sign of a name.
    capitalised_nouns: bool = False
    instructions: re.Pattern[str] | None = None
    # Month and weekday names, which a language may capitalise ("June", "Monday"): no sign of a name.
    calendar: frozenset[str] = frozenset()
    # Where someone lives now or who employs them now, said with a present or just-finished verb: (attribute,
    # pattern whose group "object" is the value's first word), run on the text with accents stripped, case kept
    # (pipeline/guards/attributes.py). `past_habit`: a past habit ("used to"), which says no current value;
    # `title`: a title beside an employer ("as a designer", "como designer").
    attribute_phrases: tuple[tuple[str, re.Pattern[str]], ...] = ()
    # Words that deny a statement wherever they stand, and pairs that do ("no longer"), read by `denied` together
    # with every other lexicon's: a stored fact's language is not known, and a word that negates in one language
    # must not be a common word of another (Portuguese "no" is "em o": "mora no Rio").
    denials: frozenset[str] = frozenset()
    denial_pairs: frozenset[tuple[str, str]] = frozenset()
    past_habit: re.Pattern[str] | None = None
    title: re.Pattern[str] | None = None

    def instruction(self, text: str) -> str | None:
        """The words of `text` that address the assistant's memory or instructions, or None: role markup in any
        language (`ROLE_MARKUP`: "SYSTEM:", "<|im_start|>", "[INST]"), else this language's `instructions`."""
        markup = ROLE_MARKUP.search(text)
        if markup is not None:
            return markup.group(0).strip()
        found = None if self.instructions is None else self.instructions.search(f" {_words(text)} ")
        return None if found is None else found.group(0).strip()

    def is_negated(self, text: str) -> bool:
        """Whether `text` says something is not so, in this language's words (False with no negation rule)."""
        return self.negation is not None and self.negation.search(f" {_words(text)} ") is not None


def words(text: str) -> frozenset[str]:
    """A space-separated list of words as a set: how the language modules write their lists."""
    return frozenset(text.split())


def kinship(**words_by_term: str) -> dict[str, str]:
    """Kinship words by canonical term, comma-separated (a word may have spaces: "best friend"), as word -> term."""
    return {word.strip(): term for term, listed in words_by_term.items() for word in listed.split(",")}


def phrase(pattern: str) -> re.Pattern[str]:
    """A pattern over a text with its accents stripped and its case kept (`Lexicon.attribute_phrases`)."""
    return re.compile(pattern, re.IGNORECASE)


def negation(pattern: str) -> re.Pattern[str]:
    """A negation rule over folded words, each word space-bounded (`Lexicon.is_negated` pads the text)."""
    return re.compile(pattern)


NEUTRAL = Lexicon("")

# Chat-template role markup, the same in every language: a role label opening a line or in brackets ("SYSTEM:",
# "[system note]", "assistant:"), special tokens ("<|im_start|>", "[INST]", "<<SYS>>"). A person's message to an
# assistant has no reason to carry it; a prompt injection does.
ROLE_MARKUP = re.compile(
    r"(?im)(?:^|[\[<(|])\s*(?:system|assistant|developer)(?:[ _-]?(?:note|message|prompt|override))?\s*[:\]>)|]"
    r"|<\|[a-z_]+\|>|\[/?INST\]|<</?SYS>>"
)

_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> str:
    return " ".join(_WORD.findall(fold(text)))


@functools.cache
def _lexicons() -> dict[str, Lexicon]:
    from memory_sdk.lexicons import de, en, es, fr, it, pt

    return {module.LEXICON.code: module.LEXICON for module in (en, pt, es, de, fr, it)}


def lexicon_for(language: str | None) -> Lexicon:
    """The lexicon of `language` (an ISO 639-1 code, "pt-BR" reads as "pt"); NEUTRAL when there is none."""
    if not language:
        return NEUTRAL
    return _lexicons().get(language.lower().split("-")[0].split("_")[0], NEUTRAL)


@short_text_cache(maxsize=4096)
def denied(text: str) -> bool:
    """Whether `text` says something is not so in the words of any lexicon (`Lexicon.denials`, `denial_pairs`):
    "Rafael não trabalha mais na Acme", "Ana isn't at Globex", "Ana no longer works there", "Ya no vive en Lima".
    For texts of unknown language (stored facts, consolidation), where `Lexicon.is_negated` cannot choose a lexicon.
    Presence, not parity: Portuguese and Spanish stack negations ("não conhece ninguém") without cancelling them.
    Memoised (short_text_cache): the guards ask it of each fact and each of its candidates."""
    words = _words(text).split()
    single, pairs = _denials()
    return not single.isdisjoint(words) or any(pair in pairs for pair in itertools.pairwise(words))


@functools.cache
def _denials() -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
    lexicons = _lexicons().values()
    single: frozenset[str] = frozenset().union(*(lexicon.denials for lexicon in lexicons))
    return single, frozenset().union(*(lexicon.denial_pairs for lexicon in lexicons))


def detect_language(text: str) -> str | None:
    """The language whose function words `text` uses most, when one leads by at least one word; else None.

    Measured on the probe suite (benchmarks/probes/, 6 languages): every probe message is detected as its own
    language or None. Short texts with one ambiguous word ("en" is Spanish and French) give None, by design.
    """
    found = _WORD.findall(fold(text))
    if not found:
        return None
    scores = sorted(
        (
            (sum(word in lexicon.function_words or word in lexicon.markers for word in found), code)
            for code, lexicon in _lexicons().items()
        ),
        reverse=True,
    )
    (best, code), (second, _) = scores[0], scores[1]
    return code if best > second else None


LANGUAGES = ("en", "pt", "es", "de", "fr", "it")


# The function words of every lexicon: what a rule that only gets more lenient with more of them uses when the
# message's language is unknown.
ALL_FUNCTION_WORDS: frozenset[str] = frozenset().union(*(lexicon_for(code).function_words for code in LANGUAGES))
