"""What LLM calls cost in money: a price table per model, and the cost of a call, a stage, a purpose, a write.

Prices are in USD per million tokens. The shipped table (DEFAULT_PRICES) holds OpenAI's list prices as published
by OpenAI on its pricing page in July 2025 (each entry carries the date it was taken, `as_of`); a provider may
have changed them since, and a price this table does not know is never guessed: a model without a price costs
None, not zero. Override or extend the table with `MemoryConfig(prices={"my-model": ModelPrice(...)})`.

    >>> cost_of(TokenUsage(input_tokens=1_000, output_tokens=200), price_for("gpt-4o-mini-2024-07-18", {}))
    Cost(amount=Decimal('0.00027'), currency='USD', estimated=False)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from decimal import Decimal
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field

from memory_sdk.results import Cost, TokenUsage

__all__ = [
    "DEFAULT_PRICES",
    "ModelPrice",
    "cost_of",
    "format_cost",
    "price_for",
    "provider_model",
]

_PER_TOKENS = Decimal(1_000_000)


class ModelPrice(BaseModel):
    """A model's list price in USD per million tokens.

    `cached_input` is what the provider charges for input tokens it served from its prompt cache (None: the
    provider has no such discount, cached tokens cost the input price). `as_of` is the day the price was taken.

    >>> ModelPrice(input=0.15, cached_input=0.075, output=0.60)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: Decimal = Field(ge=0)
    output: Decimal = Field(ge=0)
    cached_input: Decimal | None = Field(default=None, ge=0)
    as_of: date | None = None


# OpenAI's list prices (platform.openai.com/docs/pricing, standard tier), as published by OpenAI on the day below;
# cross-checked against pydantic's genai-prices table (prices_checked 2025-07-04). Local models and every model
# not listed here have no price: their cost is None.
_OPENAI_PRICES_TAKEN = date(2025, 7, 4)


def _openai(input_usd: str, cached_usd: str | None, output_usd: str) -> ModelPrice:
    return ModelPrice(
        input=Decimal(input_usd),
        cached_input=None if cached_usd is None else Decimal(cached_usd),
        output=Decimal(output_usd),
        as_of=_OPENAI_PRICES_TAKEN,
    )


DEFAULT_PRICES: Mapping[str, ModelPrice] = MappingProxyType(
    {
        "gpt-4o-mini": _openai("0.15", "0.075", "0.60"),
        "gpt-4o": _openai("2.50", "1.25", "10.00"),
        "gpt-4.1": _openai("2.00", "0.50", "8.00"),
        "gpt-4.1-mini": _openai("0.40", "0.10", "1.60"),
        "gpt-4.1-nano": _openai("0.10", "0.025", "0.40"),
        "o3-mini": _openai("1.10", "0.55", "4.40"),
        "o4-mini": _openai("1.10", "0.275", "4.40"),
        # Embeddings are billed on input only.
        "text-embedding-3-small": _openai("0.02", None, "0"),
        "text-embedding-3-large": _openai("0.13", None, "0"),
    }
)

# A dated snapshot name is the model's name and its release day: gpt-4o-mini-2024-07-18, o3-mini-2025-01-31.
_DATED_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")
# How OpenAI-compatible routers and our own embedder ids prefix a model name: "openai/gpt-4o", "openai:gpt-4o".
_VENDOR_PREFIX = re.compile(r"^openai[/:]")


def price_for(model: str | None, prices: Mapping[str, ModelPrice]) -> ModelPrice | None:
    """The price of `model`: from `prices` (the user's table) first, then DEFAULT_PRICES; None if neither has it.

    Names match case-insensitively, without an "openai/" or "openai:" prefix, and a dated snapshot matches its
    model ("gpt-4o-mini-2024-07-18" is "gpt-4o-mini"). Nothing looser: "gpt-4o-audio-preview" is not "gpt-4o",
    its price differs, so an unlisted variant has no price rather than a wrong one.
    """
    if not model:
        return None
    name = _VENDOR_PREFIX.sub("", model.strip().lower())
    for table in (prices, DEFAULT_PRICES):
        keyed = {_VENDOR_PREFIX.sub("", key.strip().lower()): price for key, price in table.items()}
        for candidate in (name, _DATED_SNAPSHOT.sub("", name)):
            if candidate in keyed:
                return keyed[candidate]
    return None


def provider_model(provider: object) -> str | None:
    """The model a provider calls, from its `model` attribute (OpenAIProvider has one); None if it names none."""
    model = getattr(provider, "model", None)
    return model if isinstance(model, str) and model.strip() else None


def cost_of(usage: TokenUsage, price: ModelPrice | None, *, estimated: bool = False) -> Cost | None:
    """What `usage` cost at `price`; None without a price.

    Cached input tokens (a subset of the input tokens, as OpenAI reports them) are charged at the cached price
    when the model has one. `estimated` marks a cost whose token counts are the SDK's estimate, not the provider's.
    """
    if price is None:
        return None
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    cached_price = price.input if price.cached_input is None else price.cached_input
    amount = (
        (usage.input_tokens - cached) * price.input + cached * cached_price + usage.output_tokens * price.output
    ) / _PER_TOKENS
    return Cost(amount=amount, estimated=estimated)


def format_cost(cost: Cost | None) -> str:
    """A cost for people: "$0.000270", "~$0.000270 (estimated tokens)", or "unknown (no price for the model)".

    >>> format_cost(result.cost)
    """
    if cost is None:
        return "unknown (no price for the model)"
    symbol = "$" if cost.currency == "USD" else f"{cost.currency} "
    text = f"{symbol}{cost.amount:.6f}"
    return f"~{text} (estimated tokens)" if cost.estimated else text
