"""Where a new version goes in a fact's timeline: pure interval logic, no I/O.

Intervals are half-open, [valid_from, valid_to), valid_to None meaning current. A new version closes the version
that contains its valid_from at exactly that instant, and ends where the next version begins, so the versions of
one subject/attribute never overlap, and a delayed (out-of-order) message becomes history instead of replacing
the current value (docs/decisions.md, "Facts in time"). Equal valid_from is a correction: the later-recorded
version takes the interval over and the earlier one becomes empty (never true at any instant), which keeps it in
history without a silent overwrite.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

__all__ = [
    "Close",
    "Interval",
    "Placement",
    "VersionWrite",
    "bears_on",
    "needs_timeline",
    "place_version",
    "plan_version_write",
]


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


Action = Literal["ADD", "UPDATE", "NOOP", "DELETE"]


@dataclass(frozen=True)
class Close:
    """A stored version to end at `at` (valid time); `invalidate` also marks it retracted (transaction time)."""

    fact_id: UUID
    at: datetime
    invalidate: bool
    deleted: bool = False  # the target of a DELETE (reported as deleted, not superseded)


@dataclass(frozen=True)
class VersionWrite:
    """Everything applying one decision does to the facts table, as plain values."""

    action: Action  # what is applied: a stale or impossible verdict degrades to ADD
    closes: tuple[Close, ...] = ()
    insert: bool = True  # False for NOOP: the target is confirmed instead
    valid_to: datetime | None = None  # where the new version ends (None: it is current)
    supersedes: UUID | None = None
    single_valued: bool = False  # the stored flag (a retraction never competes with the attribute's value)
    note: str = ""


def bears_on(valid_from: datetime, version: Interval) -> bool:
    """Whether `version` can change where a new version starting at `valid_from` goes: it is open or ends after
    then. One that ended at or before `valid_from` can neither hold that moment nor start after it (an interval
    ending there starts no later, or is empty), so place_version ignores it; the timeline plan_version_write needs
    is these versions and the target (store/queries.lock_timeline reads just them)."""
    return version.valid_to is None or version.valid_to > valid_from


def needs_timeline(action: Action, *, has_target: bool, attribute: str | None, single_valued: bool) -> bool:
    """Whether plan_version_write needs the attribute's timeline (the caller locks and reads the versions that
    bear on the new one, and the target)."""
    if attribute is None:
        return False
    if not has_target:
        action = "ADD"  # plan_version_write treats a verdict whose target is gone as an ADD
    return action == "UPDATE" or (action == "ADD" and single_valued)


def plan_version_write(
    action: Action,
    valid_from: datetime,
    *,
    attribute: str | None,
    single_valued: bool,
    target: Interval | None,
    timeline: list[Interval],
    told_at: datetime | None = None,
) -> VersionWrite:
    """Plan one decision's writes: the versions to close, the new version's interval and what it supersedes.

    - NOOP confirms the target; DELETE closes and retracts it at the retraction's valid time and keeps the
      retraction as its successor (or keeps the retraction alone when it predates the target);
    - UPDATE (and an ADD of a single-valued attribute) fits the new version into the attribute's timeline
      (place_version), and ends a target outside that timeline too, so two values never stay open;
    - a verdict whose target is gone (target None) is an ADD;
    - an UPDATE or DELETE told after its open target began (`told_at`, the message's time) but dated before it
      ("I started at Monzo two weeks ago", the day "Leah works at Revolut" was heard) is no delayed message: the
      target's start was when it was heard, and the newer message ends it. The target becomes empty (retracted),
      as a correction does, and the new version holds from its own date.
    """
    if target is None and action != "ADD":
        action = "ADD"
    if (
        action in ("UPDATE", "DELETE")
        and target is not None
        and told_at is not None
        and target.valid_to is None
        and valid_from <= target.valid_from < told_at
    ):
        return _overtakes(action, valid_from, single_valued, target, timeline)
    if action == "NOOP" and target is not None:
        return VersionWrite("NOOP", insert=False, note="confirmed")
    if action == "DELETE" and target is not None:
        if valid_from <= target.valid_from:
            return VersionWrite("ADD", note="retraction predates target")
        closes = (Close(target.id, valid_from, invalidate=True, deleted=True),)
        return VersionWrite("DELETE", closes=closes, supersedes=target.id)
    if action == "UPDATE" or (single_valued and attribute):
        return _fit_into_timeline(valid_from, attribute, single_valued, target, timeline)
    return VersionWrite("ADD", single_valued=single_valued)


def _overtakes(
    action: Action, valid_from: datetime, single_valued: bool, target: Interval, timeline: list[Interval]
) -> VersionWrite:
    """The writes of an UPDATE or DELETE dated before its open target's start but told after it: the target is
    closed empty at its own start (retracted), the versions around the new date are placed as usual."""
    close = Close(target.id, target.valid_from, invalidate=True, deleted=action == "DELETE")
    if action == "DELETE":
        return VersionWrite("DELETE", closes=(close,), supersedes=target.id, note="told after the target began")
    placement = place_version(valid_from, [v for v in timeline if v.id != target.id])
    closes = [close]
    if placement.close is not None:
        closes.append(Close(placement.close, valid_from, invalidate=False))
    if placement.corrected is not None:
        closes.append(Close(placement.corrected, valid_from, invalidate=True))
    return VersionWrite(
        "UPDATE",
        closes=tuple(closes),
        valid_to=placement.new_valid_to,
        supersedes=target.id,
        single_valued=single_valued,
        note="told after the target began: the target is retracted",
    )


def _fit_into_timeline(
    valid_from: datetime, attribute: str | None, single_valued: bool, target: Interval | None, timeline: list[Interval]
) -> VersionWrite:
    placements: list[Placement] = []
    if target is not None and all(version.id != target.id for version in timeline):
        if attribute:
            placements.append(place_version(valid_from, [target]))  # the target, placed on its own
        else:
            timeline = [target]
    placements.insert(0, place_version(valid_from, timeline))
    closes = tuple(
        Close(version_id, valid_from, invalidate=invalidate)
        for placement in placements
        for version_id, invalidate in ((placement.close, False), (placement.corrected, True))
        if version_id is not None
    )
    supersedes = next((p.supersedes for p in placements if p.supersedes is not None), None)
    ends = [p.new_valid_to for p in placements if p.new_valid_to is not None]
    valid_to = min(ends) if ends else None
    note = f"delayed message: stored as history ending {valid_to:%Y-%m-%d %H:%M}" if valid_to else ""
    return VersionWrite(
        "UPDATE" if supersedes is not None else "ADD",
        closes=closes,
        valid_to=valid_to,
        supersedes=supersedes,
        single_valued=single_valued,
        note=note,
    )
