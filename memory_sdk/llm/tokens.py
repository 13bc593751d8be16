"""Offline token estimation.

tiktoken downloads its encodings at run time, which fails without a network, so the SDK estimates instead:
the count of word pieces and punctuation marks, with long words split every 4 characters. It is an estimate: on
the demo's 19 writes it ran 19-24% above the Qwen2.5 tokenizer's exact count, which is enough for a context
budget (a cap, not a bill). Token usage a provider reports always wins over it.
"""

from __future__ import annotations

import re

__all__ = ["estimate_tokens"]

_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)
# BPE vocabularies hold most common words whole; longer words split roughly every 4 characters.
_CHARS_PER_SUBWORD = 4


def estimate_tokens(text: str) -> int:
    """Estimated number of LLM tokens in `text` (never less than 1 for a non-empty text)."""
    count = 0
    for piece in _PIECE.findall(text):
        count += max(1, -(-len(piece) // _CHARS_PER_SUBWORD)) if len(piece) > 6 else 1
    return count
