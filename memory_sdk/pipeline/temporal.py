"""Where a new version goes in a fact's timeline: pure interval logic, no I/O.

Intervals are half-open, [valid_from, valid_to), valid_to None meaning current. A new version closes the version
that contains its valid_from at exactly that instant, and ends where the next version begins, so the versions of
one subject/attribute never overlap, and a delayed (out-of-order) message becomes history instead of replacing
the current value (the delayed-e0 example of seeds/000). Equal valid_from is a correction: the later-recorded
version takes the interval over and the earlier one becomes empty (never true at any instant), which keeps it in
history without a silent overwrite.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

__all__ = ["Interval", "Placement", "place_version"]


@dataclass(frozen=True)
class Interval:
    id: UUID
    valid_from: datetime
    valid_to: datetime | None

    @property
    def empty(self) -> bool:
        return self.valid_to is not None and self.valid_to <= self.valid_from

    def contains(self, moment: datetime) -> bool:
        return self.valid_from <= moment and (self.valid_to is None or moment < self.valid_to)


@dataclass(frozen=True)
class Placement:
    """What to do to fit a version starting at `valid_from` into a timeline."""

    close: UUID | None  # the version to close at the new valid_from (None: nothing to close)
    corrected: UUID | None  # the version with the same valid_from, which becomes empty
    new_valid_to: datetime | None  # where the new version ends (None: it is current)

    @property
    def supersedes(self) -> UUID | None:
        return self.corrected or self.close


def place_version(valid_from: datetime, timeline: list[Interval]) -> Placement:
    """Fit a new version starting at `valid_from` into `timeline` (any order; empty intervals are ignored)."""
    versions = sorted((i for i in timeline if not i.empty), key=lambda i: i.valid_from)
    for version in versions:
        if version.valid_from == valid_from:
            return Placement(close=None, corrected=version.id, new_valid_to=version.valid_to)
        if version.contains(valid_from):
            return Placement(close=version.id, corrected=None, new_valid_to=version.valid_to)
    later = [v.valid_from for v in versions if v.valid_from > valid_from]
    return Placement(close=None, corrected=None, new_valid_to=min(later) if later else None)
