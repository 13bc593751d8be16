"""Switches for `python benchmarks/ab.py interleave --switches benchmarks/ab_shortlist.py`: the large subjects'
shortlist as shipped (store/candidates.BINARY_SHORTLIST facts re-ranked on the server per probe) against 30, to
see what the server's re-ranking of vectors costs a write (docs/benchmarks.md). 30 agrees less often
with an exact top 5 (benchmarks/recall.py); this measures time only."""

from __future__ import annotations

from typing import Any

from memory_sdk.store import candidates


def _shortlist(size: int) -> Any:
    def switch(_memory: object) -> None:
        # Read where the read and the ahead-of-read pick take their default (keyword defaults, bound at import).
        kwdefaults = candidates.nearest_current_facts.__kwdefaults__
        pick_kwdefaults = candidates.Shortlists.pick.__kwdefaults__
        assert kwdefaults is not None and pick_kwdefaults is not None
        kwdefaults["shortlist"] = pick_kwdefaults["shortlist"] = size

    return switch


SWITCHES = {
    f"shortlist {candidates.BINARY_SHORTLIST}": _shortlist(candidates.BINARY_SHORTLIST),
    "shortlist 30": _shortlist(30),
}
