"""The people of a conversation: who speaks in the recent messages ("Caroline: ..."), who the caller says takes
part (`write(participants=[...])`), and the speaker. Pure functions.

A vocative or nickname of a participant ("Hey Mel!" to Melanie) is that participant, not a new person: measured
with a 1.5B model (issue 13), "Hey Mel!" created `person:mel` on the first turn and Melanie's later facts never
met it. The rule is deliberately narrow because it only runs against the few people of one conversation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from memory_sdk.lexicons import NEUTRAL, Lexicon
from memory_sdk.text import normalise_alias

__all__ = [
    "MAX_NICKNAME_TAIL",
    "MIN_NICKNAME_CHARS",
    "is_nickname",
    "nickname_of",
    "participants_of",
    "vocative_nicknames",
]

# seeds/002, "Fase 1": a prefix or diminutive needs at least 3 letters ("Jo" is not "João").
MIN_NICKNAME_CHARS = 3
# Letters a diminutive may add after the shared prefix: "Guili" (guil + i) for Guilherme, "Gabi" for Gabriela.
MAX_NICKNAME_TAIL = 2
# "Caroline: Hey Mel!" or "Ana Souza: ...": one to three capitalised words before a colon start a chat line.
_CHAT_LINE = re.compile(r"^\s*([^\W\d_][\w'.-]*(?:\s+[^\W\d_][\w'.-]*){0,2})\s*:\s+\S")


def participants_of(recent_messages: Iterable[str], declared: Sequence[str], speaker: str) -> list[str]:
    """The speaker, the declared participants and the names that label recent chat lines, each once, in order."""
    labelled = []
    for line in recent_messages:
        match = _CHAT_LINE.match(line)
        if match is not None and all(word[0].isupper() for word in match.group(1).split()):
            labelled.append(match.group(1))
    people: dict[str, str] = {}
    for name in (speaker, *declared, *labelled):
        people.setdefault(normalise_alias(name), name.strip())
    people.pop("", None)
    return list(people.values())


def is_nickname(short: str, full: str) -> bool:
    """Whether the one-word `short` is a prefix or diminutive of the first name of `full`: it is shorter, shares
    at least MIN_NICKNAME_CHARS leading letters and adds at most MAX_NICKNAME_TAIL of its own."""
    words = normalise_alias(short).split()
    first = normalise_alias(full).split()[:1]
    if len(words) != 1 or not first or len(words[0]) >= len(first[0]):
        return False
    shared = next((i for i, (a, b) in enumerate(zip(words[0], first[0], strict=False)) if a != b), len(words[0]))
    return shared >= MIN_NICKNAME_CHARS and len(words[0]) - shared <= MAX_NICKNAME_TAIL


def nickname_of(name: str, participants: Sequence[str]) -> str | None:
    """The one participant `name` is, exactly or as a nickname; None when none or several fit."""
    norm = normalise_alias(name)
    exact = [p for p in participants if normalise_alias(p) == norm]
    if exact:
        return exact[0]
    fitting = [p for p in participants if is_nickname(name, p)]
    return fitting[0] if len(fitting) == 1 else None


# A capitalised word said to someone: after a greeting of the message's language (`Lexicon.greetings`: "Hey Mel")
# or a comma ("That's great, Mel"), or before "!" or "?" ("Mel!"). "Melt the butter" is no vocative.
_WORD = re.compile(r"[^\W\d_][^\W\d_'-]*")


def vocative_nicknames(
    message: str, participants: Sequence[str], speaker: str, lexicon: Lexicon = NEUTRAL
) -> dict[str, str]:
    """The nicknames the message calls another participant by ("That's great, Mel!" -> {"Mel": "Melanie"}): a
    capitalised word in vocative position that is a nickname of exactly one participant other than the speaker.
    A greeting before it counts in the message's `lexicon` only; punctuation in any language.

    Measured with the 1.5B model (truth benchmark, melanie_caroline): the model named Melanie in full, so "Mel" was
    never registered and a later "Mel" could not be found; the nickname is the write's to record, whatever the
    model lists.
    """
    others = [p for p in participants if normalise_alias(p) != normalise_alias(speaker)]
    found: dict[str, str] = {}
    words = list(_WORD.finditer(message))
    for index, match in enumerate(words):
        word = match.group(0)
        if not word[:1].isupper() or not _vocative(message, words, index, lexicon.greetings):
            continue
        person = nickname_of(word, others)
        if person is not None and normalise_alias(person) != normalise_alias(word):
            found.setdefault(word, person)
    return found


def _vocative(message: str, words: Sequence[re.Match[str]], index: int, greetings: frozenset[str]) -> bool:
    before = message[: words[index].start()].rstrip()
    after = message[words[index].end() :].lstrip()
    greeted = index > 0 and normalise_alias(words[index - 1].group(0)) in greetings
    addressed = before.endswith((",", ";")) and (not after or after[0] in "!?,.")
    opening = (not before or before.endswith((".", "!", "?"))) and after.startswith(",")
    return greeted or addressed or opening or after[:1] in ("!", "?")
