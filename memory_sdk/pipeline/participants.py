"""The people of a conversation: who speaks in the recent messages ("Caroline: ..."), who the caller says takes
part (`write(participants=[...])`), and the speaker. Pure functions.

A vocative or nickname of a participant ("Hey Mel!" to Melanie) is that participant, not a new person: measured
with a 1.5B model (issue 13), "Hey Mel!" created `person:mel` on the first turn and Melanie's later facts never
met it. The rule is deliberately narrow because it only runs against the few people of one conversation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from memory_sdk.text import normalise_alias

__all__ = ["MAX_NICKNAME_TAIL", "MIN_NICKNAME_CHARS", "is_nickname", "nickname_of", "participants_of"]

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
