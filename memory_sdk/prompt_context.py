"""context(): the profiles and top facts for a message, fitted to a token budget and rendered for a prompt.

Pure: the client reads the profiles and runs the search, this module decides what fits and writes the text. The
entities the message names come first (a profile is the consolidated view of an entity, worth more than any one
fact), then the facts in search()'s order; an item that does not fit is skipped and smaller ones after it may
still fit. Token counts are the SDK's offline estimate (llm/tokens.py), which adds up line by line.
"""

from __future__ import annotations

from collections.abc import Sequence

from memory_sdk.llm.tokens import estimate_tokens
from memory_sdk.results import Context, Entity, SearchHit

__all__ = ["fit_context", "render_fact", "render_profile"]

PROFILES_HEADER = "What you know about the people and things mentioned:"
FACTS_HEADER = "Relevant memories:"


def render_profile(entity: Entity) -> str:
    return f"- {entity.name} ({entity.type}): {entity.profile_text}"


def render_fact(hit: SearchHit) -> str:
    """One fact line, with the day it became true: a model needs to tell an old fact from a new one."""
    return f"- {hit.fact.text} ({hit.entity_name}, since {hit.fact.valid_from:%Y-%m-%d})"


def fit_context(profiles: Sequence[Entity], hits: Sequence[SearchHit], budget_tokens: int) -> Context:
    """The profiles, then the hits, that fit in `budget_tokens` with their section headers, as a Context."""
    spent = 0

    def fits(lines: list[str], header: str, line: str) -> bool:
        nonlocal spent
        cost = estimate_tokens(line) + (0 if lines else estimate_tokens(header))
        if spent + cost > budget_tokens:
            return False
        spent += cost
        return True

    profile_lines: list[str] = []
    kept_profiles = []
    for entity in profiles:
        line = render_profile(entity)
        if fits(profile_lines, PROFILES_HEADER, line):
            profile_lines.append(line)
            kept_profiles.append(entity)
    fact_lines: list[str] = []
    kept_hits = []
    for hit in hits:
        line = render_fact(hit)
        if fits(fact_lines, FACTS_HEADER, line):
            fact_lines.append(line)
            kept_hits.append(hit)
    sections = [[header, *lines] for header, lines in ((PROFILES_HEADER, profile_lines), (FACTS_HEADER, fact_lines))]
    text = "\n".join(line for section in sections if len(section) > 1 for line in section)
    return Context(
        text=text,
        entities=kept_profiles,
        hits=kept_hits,
        tokens=estimate_tokens(text) if text else 0,
        budget_tokens=budget_tokens,
    )
