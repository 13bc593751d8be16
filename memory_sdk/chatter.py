"""Chatter: messages that carry no memory ("bom dia", "kkk", "ok", "good morning btw", "¡gracias!").

Measured with the local 1.5B model (docs/truth.md): "bom dia" became the fact "Rafael bom dia" and "good morning
btw" the fact "Ana good morning btw"; every such message also cost a full extraction call (about 1,400 prompt
tokens). A message made only of greetings, thanks, acknowledgements, laughter, emoji and punctuation (and
answers such as "sim" or "yes" when the last recent message asks no question) is logged as an event like any
other, and extraction is skipped. Anything else in it (a name, a place, "me mudei") and the model is
asked as usual, so the rule can only err towards asking.

The words are the lexicons' (`Lexicon.chatter`, `Lexicon.answers`): those of the message's language, or, when it
is unknown (chatter has few function words to detect it by: "bom dia"), those of any one lexicon that holds every
word of the message. Laughter, emoji and punctuation are chatter in any language.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memory_sdk.lexicons import LANGUAGES, NEUTRAL, Lexicon, lexicon_for
from memory_sdk.text import fold

__all__ = ["is_chatter"]

# Laughter: kkk, rsrs, haha, hehe, jaja, hue, lol-like runs.
_LAUGHTER = re.compile(r"^(?:k{2,}|(?:rs)+|(?:ha)+h?|(?:he)+h?|(?:ja)+j?|(?:hue)+|(?:hi)+h?)$")
_WORD = re.compile(r"[^\W_]+")


def is_chatter(message: str, recent_messages: Sequence[str] = (), lexicon: Lexicon = NEUTRAL) -> bool:
    """True when every word of the message is a greeting, thanks, filler or laughter (emoji and punctuation are
    not words), or an answer ("sim", "yes", "verdade") when the last recent message asks no question, in the words
    of `lexicon` (NEUTRAL: of any one lexicon); a message with no word at all is chatter too (an emoji, "!!").
    After a question an answer is memory: the 1.5B model made "haha sim", after none, "Beatriz said 'haha sim'".

    >>> is_chatter("Bom dia, gente!")
    True
    """
    words = _WORD.findall(fold(message))
    answered = bool(recent_messages) and "?" in recent_messages[-1]
    lexicons = [lexicon] if lexicon.code else [lexicon_for(code) for code in LANGUAGES]
    return any(_only_chatter(words, each, answered) for each in lexicons)


def _only_chatter(words: Sequence[str], lexicon: Lexicon, answered: bool) -> bool:
    chatter, answers = lexicon.chatter, lexicon.answers
    return all(word in chatter or _LAUGHTER.match(word) or (word in answers and not answered) for word in words)
