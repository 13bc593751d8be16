"""Offline token estimation.

tiktoken downloads its encodings at run time, which fails without a network, so the SDK estimates instead:
the count of word pieces and punctuation marks, with long words split every 4 characters. It is an estimate: on
the demo's 19 writes it ran 19-24% above the Qwen2.5 tokenizer's exact count, which is enough for a context
budget (a cap, not a bill). Token usage a provider reports always wins over it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from memory_sdk.text import short_text_cache

__all__ = ["DEFAULT_OUTPUT_CAP", "OUTPUT_TOKEN_CAPS", "estimate_tokens", "output_cap"]

# Most tokens an answer of each purpose may take. Measured on the answer examples of prompts/ (estimate_tokens):
# the informed example (6 entities, 4 facts, 4 relations, profiles, emotion) is ~700 tokens, one scanned entity
# ~40, one fact ~100, one relation ~25, a resolution or reconciliation verdict ~40. Each cap leaves room for a
# message about twice as rich as the example; a 1.5B model that loops (issue 13: three informed answers ran to
# the old flat cap of 1,500 and then timed out in the repair) stops here instead of at the timeout.
OUTPUT_TOKEN_CAPS: Mapping[str, int] = MappingProxyType(
    {
        "informed_extraction": 1000,
        "entity_scan": 400,
        "fact_extraction": 800,
        "relation_extraction": 400,
        "entity_resolution": 150,
        "reconciliation": 150,
        # One verdict (~40) per fact of a batch; a write rarely has more than a few facts that need one.
        "reconciliation_batch": 400,
        # {"profile": ...} of at most 1,500 characters (consolidation.py), ~375 tokens.
        "profile_consolidation": 500,
    }
)
# For a purpose with no measured cap (a custom one).
DEFAULT_OUTPUT_CAP = 1000

_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)
# Pieces longer than this are counted as several subwords: BPE vocabularies hold most common words whole; longer
# words split roughly every 4 characters.
_WHOLE_PIECE_CHARS = 6
_CHARS_PER_SUBWORD = 4


def estimate_tokens(text: str) -> int:
    """Estimated number of LLM tokens in `text` (never less than 1 for a non-empty text).

    Summed line by line, which counts the same (no piece spans a newline), so that each line is memoised
    (`_line_tokens`): a prompt's instructions and known facts recur from write to write (~36 estimates a write).
    """
    return sum(map(_line_tokens, text.split("\n")))


@short_text_cache(maxsize=8192)
def _line_tokens(line: str) -> int:
    """One token per piece of `line`, plus the extra subwords of each long one."""
    lengths = list(map(len, _PIECE.findall(line)))
    return len(lengths) + sum(-(-n // _CHARS_PER_SUBWORD) - 1 for n in lengths if n > _WHOLE_PIECE_CHARS)


def output_cap(purpose: str, caps: Mapping[str, int] = OUTPUT_TOKEN_CAPS) -> int:
    """The output token cap of `purpose`."""
    return caps.get(purpose, DEFAULT_OUTPUT_CAP)
