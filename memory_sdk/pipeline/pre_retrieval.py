"""Stage: the existing context for informed extraction, within a token budget; no LLM, no I/O.

Per known entity: its profile_text when it has one that is not stale (compact, consolidated) and its current
facts nearest to the message by pgvector similarity (top-K without a profile, a few next to one: read by
alias_lookup in its transaction, which also drops a profile built before the entity's latest fact change). Items
are kept most relevant first until the budget is spent: profiles first, then facts by similarity.

Each fact sent gets a short id, "[1]", "[2]", ... in the order shown, never its real id: the informed extraction
answers a fact's decision with it ("UPDATE" of "2"), and `state.shown_facts` maps it back to the stored fact
(reconciliation.py trusts only ids in that map).
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from memory_sdk.llm.tokens import estimate_tokens
from memory_sdk.pipeline.state import Deps, KnownEntity, ShownFact, WriteState

__all__ = ["ContextItem", "fit_to_budget", "render_context", "run"]

# A profile is the consolidated view of an entity: it goes before any single fact.
_PROFILE_RELEVANCE = 2.0
# A fact line's prefix as its token cost is estimated: the widest short id a context of this budget holds.
_FACT_PREFIX = "  [00] "


@dataclass(frozen=True)
class ContextItem:
    entity_key: str
    kind: str  # "profile" | "fact"
    text: str
    relevance: float
    tokens: int
    fact_id: UUID | None = None  # a fact's stored id (None for a profile)


async def run(state: WriteState, deps: Deps) -> None:
    config = state.config
    items: list[ContextItem] = []
    items.extend(
        _item(entity.key, "profile", entity.profile_text, _PROFILE_RELEVANCE)
        for entity in state.known_entities.values()
        if entity.profile_text
    )
    items.extend(
        _item(entity.key, "fact", text, similarity, fact_id)
        for entity in state.known_entities.values()
        for (text, similarity), fact_id in zip(entity.facts, entity.fact_ids, strict=True)
    )
    headers = {key: estimate_tokens(_header(entity)) for key, entity in state.known_entities.items()}
    kept = fit_to_budget(items, config.informed_extraction_context_budget_tokens, headers)
    state.existing_context, state.shown_facts = render_context(state.known_entities, kept)
    state.step.data.update(
        entities=[entity.name for entity in state.known_entities.values()],
        items_considered=len(items),
        items_sent=[{"entity": item.entity_key, "kind": item.kind, "text": item.text} for item in kept],
        facts_shown=len(state.shown_facts),
        context_tokens=estimate_tokens(state.existing_context) if kept else 0,
        budget_tokens=config.informed_extraction_context_budget_tokens,
    )


def _header(entity: KnownEntity) -> str:
    return f"- {entity.name} ({entity.type}):"


def _item(entity_key: str, kind: str, text: str, relevance: float, fact_id: UUID | None = None) -> ContextItem:
    prefix = "  * profile: " if kind == "profile" else _FACT_PREFIX
    return ContextItem(entity_key, kind, text, float(relevance), estimate_tokens(prefix + text), fact_id)


def fit_to_budget(
    items: list[ContextItem], budget_tokens: int, header_tokens: dict[str, int] | None = None
) -> list[ContextItem]:
    """The most relevant items whose token estimate, with each entity's header line once, fits the budget."""
    headers = header_tokens or {}
    kept: list[ContextItem] = []
    opened: set[str] = set()
    spent = 0
    for item in sorted(items, key=lambda i: i.relevance, reverse=True):
        cost = item.tokens + (0 if item.entity_key in opened else headers.get(item.entity_key, 0))
        if spent + cost > budget_tokens:
            continue
        kept.append(item)
        opened.add(item.entity_key)
        spent += cost
    return kept


def render_context(known: dict[str, KnownEntity], items: list[ContextItem]) -> tuple[str, dict[str, ShownFact]]:
    """Group kept items by entity, in the order of each entity's most relevant item; number the facts "[1]",
    "[2]", ... in the order shown. Returns the text and the facts by their short id."""
    if not items:
        return "(nothing known yet)", {}
    lines: list[str] = []
    shown: dict[str, ShownFact] = {}
    order = list(dict.fromkeys(item.entity_key for item in items))
    for key in order:
        lines.append(_header(known[key]))
        for item in items:
            if item.entity_key != key:
                continue
            if item.fact_id is None:
                lines.append(f"  * profile: {item.text}")
                continue
            short = str(len(shown) + 1)
            shown[short] = ShownFact(item.fact_id, key, item.text)
            lines.append(f"  [{short}] {item.text}")
    return "\n".join(lines), shown
