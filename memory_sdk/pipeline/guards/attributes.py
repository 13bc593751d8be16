"""Attributes: the single-valued attribute (`lives_in`, `employer`) a fact's text shows in words.

Under the guard contract (docs/write-pipeline.md, "The guard contract") a guard never gives a fact an attribute; it
may only refuse a single-valued attribute that names no value (post_extraction.refused_attribute). What is read
here is read, not written: `shares_a_topic` (decisions) takes two facts that say the same attribute ("moved to
Austin", "lives in São Paulo") to be about the same thing, so a decision between them is not refused.
"""

from __future__ import annotations

import re
import unicodedata

from memory_sdk.text import is_negated, short_text_cache

# Where someone lives now, and who employs them now, said with a present or just-finished verb and a proper noun
# ("mora em Curitiba", "moved to Denver", "se mudó a Lima"; "trabalha na Acme", "joined Initech", "started a new
# job at Hope Counseling", "comecei na Orion Tech"). Past habits ("morava", "worked", "used to live") and plans
# ("vou me mudar") are not matched: they are no current value. Run on the text with accents stripped, case kept.
_ARTICLE = r"(?:(?:the|a|an|o|a|os|as|el|la)\s+)?"
_ATTRIBUTE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "lives_in",
        re.compile(
            r"\b(?:mora|moro|moram|moramos|vive|vivo|vivem|viven|reside|resido|residem|lives?|resides)\s+"
            rf"(?:em|no|na|nos|nas|in|en)\s+{_ARTICLE}(?P<object>\w+)",
            re.IGNORECASE,
        ),
    ),
    (
        "lives_in",
        re.compile(
            r"\b(?:voltou|voltei|voltaram|foi|fui|foram|passou|passei|veio|vim)\s+(?:a\s+)?morar\s+"
            rf"(?:em|no|na|nos|nas)\s+{_ARTICLE}(?P<object>\w+)",
            re.IGNORECASE,
        ),
    ),
    (
        "lives_in",
        re.compile(
            r"\b(?:mudou|mudei|mudeu|mudaram|mudamos|mudo|moved|relocated)(?:\s+(?:back|de\s+volta))?\s+"
            rf"(?:pra|para|pro|to|a|al|em)\s+{_ARTICLE}(?P<object>\w+)",
            re.IGNORECASE,
        ),
    ),
    (
        "employer",
        re.compile(
            r"\b(?:trabalha|trabalho|trabalham|trabalhamos|trabalhando|works?|working|trabaja|trabajo|trabajan"
            r"|trabajando)\s+"
            rf"(?:na|no|em|at|for|en|pela|pelo|para)\s+{_ARTICLE}(?P<object>\w+)",
            re.IGNORECASE,
        ),
    ),
    ("employer", re.compile(rf"\bjoined\s+{_ARTICLE}(?P<object>\w+)", re.IGNORECASE)),
    (
        "employer",
        re.compile(
            r"\b(?:started|comecei|comecou|entrei|entrou|empece|empezo)\s+"
            r"(?:(?:a\s+|um\s+)?(?:new\s+)?(?:job|position|role|emprego|trabalho)\s+(?:novo\s+)?)?"
            rf"(?:na|no|em|at|with|en)\s+{_ARTICLE}(?P<object>\w+)",
            re.IGNORECASE,
        ),
    ),
    (
        "employer",
        re.compile(rf"\b(?:job|emprego)\s+(?:novo\s+)?(?:at|na|no|en|with)\s+{_ARTICLE}(?P<object>\w+)", re.IGNORECASE),
    ),
)
_PAST_HABIT = re.compile(r"\b(?:used\s+to|costumava|costumavam|solia|solian)\b", re.IGNORECASE)
# "Ana trabalha na Globex como designer": a title beside the employer is still the employer's fact.
_TITLE = re.compile(r"\b(?:as\s+an?|como)\s+\w+", re.IGNORECASE)


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
    if is_negated(text) or _PAST_HABIT.search(text):
        return None
    plain = _strip_accents(text)
    shown = []
    for attribute, pattern in _ATTRIBUTE_PATTERNS:
        match = pattern.search(plain)
        if match is not None and match.group("object")[:1].isupper():
            shown.append((attribute, match.group(0)))
    return tuple(shown), _TITLE.search(plain) is not None


def _strip_accents(text: str) -> str:
    if text.isascii():  # NFKD leaves ASCII as it is
        return text
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
