"""Chatter: messages that carry no memory ("bom dia", "kkk", "ok", "good morning btw", "¡gracias!").

Measured with the local 1.5B model (docs/truth.md): "bom dia" became the fact "Rafael bom dia" and "good morning
btw" the fact "Ana good morning btw"; every such message also cost a full extraction call (about 1,400 prompt
tokens). A message made only of greetings, thanks, acknowledgements, laughter, emoji and punctuation (and
answers such as "sim" or "yes" when the last recent message asks no question) is logged as an event like any
other, and extraction is skipped. Anything else in it (a name, a place, "me mudei") and the model is
asked as usual, so the rule can only err towards asking.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memory_sdk.text import fold

__all__ = ["is_chatter"]

# Folded (lower case, no accents). Portuguese, English and Spanish greetings, thanks, farewells and fillers.
_WORDS = frozenset(
    """
    oi ola opa eai e ai bom boa bons boas dia dias tarde tardes noite noites tudo bem beleza blz suave tranquilo
    valeu vlw obrigado obrigada obg brigado brigada de nada tchau ate logo mais ok okay certo claro show
    hi hello hey hiya yo good morning afternoon evening night thanks thank you thx ty welcome bye see ya later
    lol btw cool nice great sure np alright fine
    hola buenos buenas gracias vale adios hasta luego muy
    gente pessoal galera everyone everybody guys folks all todos
    how are have has been long time no see it s its ages whats what up doing going como vai voce vc voces que tal estas
    """.split()  # noqa: SIM905 - five lines of words read better than eighty quoted ones
)
# Answers: memory only as the answer to a question the model is shown ("Do you have a dog?" "sim"); after no
# question they acknowledge. Measured with the 1.5B model: "haha sim", with no recent messages, became the fact
# "Beatriz said 'haha sim'" (truth benchmark, noise).
_ANSWERS = frozenset(
    """
    sim nao yes no yeah yep yup nope si verdade exato exatamente isso exactly true right totally claro
    """.split()  # noqa: SIM905
)
# Laughter: kkk, rsrs, haha, hehe, jaja, hue, lol-like runs.
_LAUGHTER = re.compile(r"^(?:k{2,}|(?:rs)+|(?:ha)+h?|(?:he)+h?|(?:ja)+j?|(?:hue)+|(?:hi)+h?)$")
_WORD = re.compile(r"[^\W_]+")


def is_chatter(message: str, recent_messages: Sequence[str] = ()) -> bool:
    """True when every word of the message is a greeting, thanks, filler or laughter (emoji and punctuation are
    not words), or an answer ("sim", "yes", "verdade") when the last recent message asks no question; a message
    with no word at all is chatter too (an emoji, "!!")."""
    words = _WORD.findall(fold(message))
    answered = bool(recent_messages) and "?" in recent_messages[-1]
    return all(word in _WORDS or _LAUGHTER.match(word) or (word in _ANSWERS and not answered) for word in words)
