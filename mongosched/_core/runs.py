"""What a repeating job does with its rule's slots (pure): the misfire policy applied
when it is picked up late (:func:`plan_misfire`), a slot's jittered start
(:func:`jitter_offset`), the slots that came due while a run ran (:func:`overlapped`),
the slots of a backfill (:func:`slots_between`), and its runs' options
(:class:`Runs`: jitter, overlap, pause after failures). The rules themselves (cron,
intervals, DST) are :mod:`mongosched.schedule`'s.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import Any, Literal

from mongosched._core import validate
from mongosched.errors import InvalidSchedule
from mongosched.schedule import Cron, Every, Misfire, Rule

__all__ = [
    "COUNT_LIMIT",
    "MisfirePlan",
    "OVERLAP_POLICIES",
    "Runs",
    "jitter_offset",
    "overlapped",
    "plan_misfire",
    "slots_between",
]

OVERLAP_POLICIES: tuple[str, ...] = ("skip", "buffer_one", "allow", "cancel_running")
COUNT_LIMIT = 10_000
"""Missed slots are counted (for the log) up to this many."""


@dataclass(frozen=True)
class MisfirePlan:
    """What a repeating job does when it is picked up at ``now``.

    ``run_slot``: the slot to run now (None: run nothing). ``next_slot``: where the job
    waits when nothing runs. ``missed``: slots dropped by the policy (counted up to
    :data:`COUNT_LIMIT`).
    """

    run_slot: datetime | None
    next_slot: datetime | None
    missed: int


def plan_misfire(
    rule: Rule,
    scheduled_for: datetime,
    now: datetime,
    misfire: Misfire,
    start_of: Callable[[datetime], datetime] | None = None,
) -> MisfirePlan:
    """Apply ``misfire`` to a job due at slot ``scheduled_for`` and picked up at ``now``.
    ``start_of`` gives when a slot is due to start (a jittered slot starts after its
    time): only slots whose start came are due (the anchor always is), and lateness
    counts from then (default: from the slot itself)."""
    anchor = validate.schedule_time(scheduled_for, "scheduled_for")
    now = validate.schedule_time(now, "now")
    tolerance = misfire.tolerance

    def start(slot: datetime) -> datetime:
        return slot if start_of is None else start_of(slot)

    def on_time(slot: datetime) -> bool:
        return tolerance is None or now - start(slot) <= tolerance

    def due() -> Iterator[datetime]:
        """The slots due by now, latest first (a slot not started yet is not missed)."""
        return (s for s in rule.slots_back(anchor, now) if s == anchor or start(s) <= now)

    if misfire.policy == "all":
        # The earliest slot still to run: among the latest max_catchup due, within grace.
        first: datetime | None = None
        for n, slot in enumerate(due()):
            if n >= misfire.max_catchup or not on_time(slot):
                break
            first = slot
        if first is not None:
            return MisfirePlan(first, None, _count(rule, anchor, first))
        latest = next(due())
        return MisfirePlan(None, rule.next_after(latest), _count(rule, anchor, latest) + 1)
    latest = next(due())
    missed = _count(rule, anchor, latest)
    if on_time(latest):
        return MisfirePlan(latest, None, missed)
    return MisfirePlan(None, rule.next_after(latest), missed + 1)


def _count(rule: Rule, anchor: datetime, end: datetime) -> int:
    """Slots from ``anchor`` up to, not including, ``end`` (up to COUNT_LIMIT)."""
    if end <= anchor:
        return 0
    back = rule.slots_back(anchor, end - timedelta(microseconds=1))
    return sum(1 for _ in islice(back, COUNT_LIMIT))


def jitter_offset(key: str, slot: datetime, jitter: timedelta) -> timedelta:
    """How long after ``slot`` a jittered run starts: an offset in ``[0, jitter)``,
    in whole milliseconds, drawn uniformly from a hash of ``key`` (the schedule) and
    the slot, so that every runner computes the same offset for the same slot."""
    if jitter <= timedelta(0):
        return timedelta(0)
    text = f"{key}\0{validate.schedule_time(slot, 'slot').isoformat()}"
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(milliseconds=int(fraction * (jitter / timedelta(milliseconds=1))))


@dataclass(frozen=True)
class Runs:
    """How the runs of a repeating job start, overlap and stop, beyond its rule and
    its misfire policy (see :doc:`/cron`).

    :param jitter: each slot starts at an offset in ``[0, jitter)`` after its time,
        spread uniformly, the same offset for a slot in every runner (seconds or a
        timedelta; None: on the slot).
    :param overlap: what happens to slots that come due while a run still runs:
        ``"skip"`` (default: none of them runs; the next run is the first slot after
        the run ended), ``"buffer_one"`` (one run right after, for the latest of
        them), ``"allow"`` (each starts on time, beside the running one) or
        ``"cancel_running"`` (the running one is cancelled, then the slot starts).
    :param pause_after: pause the schedule after this many failed runs in a row
        (None: never).
    """

    jitter: float | timedelta | None = None
    overlap: Literal["skip", "buffer_one", "allow", "cancel_running"] | str = "skip"
    pause_after: int | None = None

    def __post_init__(self) -> None:
        validate.schedule_choice(self.overlap, OVERLAP_POLICIES, "overlap")
        jitter = validate.schedule_seconds(self.jitter, "jitter")
        pause_after = self.pause_after
        if pause_after is not None and (
            not isinstance(pause_after, int) or isinstance(pause_after, bool) or pause_after < 1
        ):
            raise InvalidSchedule(f"pause_after must be an int >= 1 or None, not {pause_after!r}")
        object.__setattr__(self, "jitter", jitter or None)

    @property
    def spawns(self) -> bool:
        """Whether each slot runs as a job of its own beside the schedule (``allow``,
        ``cancel_running``), so that runs can overlap."""
        return self.overlap in ("allow", "cancel_running")

    def start(self, key: str, slot: datetime) -> datetime:
        """When the run of ``slot`` is due: the slot plus its jitter offset."""
        if not isinstance(self.jitter, float):  # None: no jitter (a float once checked)
            return slot
        return slot + jitter_offset(key, slot, timedelta(seconds=self.jitter))

    def to_document(self) -> dict[str, Any]:
        """The options as a repeat document stores them, defaults left out (so a
        schedule declared without them reads as it always did)."""
        doc: dict[str, Any] = {}
        if self.jitter is not None:
            doc["jitter"] = self.jitter
        if self.overlap != "skip":
            doc["overlap"] = self.overlap
        if self.pause_after is not None:
            doc["pause_after"] = self.pause_after
        return doc

    @classmethod
    def from_document(cls, repeat: Mapping[str, Any]) -> Runs:
        """The options stored in a repeat document (absent ones: the defaults)."""
        return cls(
            jitter=repeat.get("jitter"),
            overlap=repeat.get("overlap") or "skip",
            pause_after=repeat.get("pause_after"),
        )


def overlapped(
    rule: Rule,
    slot: datetime,
    ended: datetime,
    due: Callable[[datetime], datetime] = lambda slot: slot,
) -> tuple[int, datetime | None]:
    """The slots after ``slot`` that came due (at ``due(slot)``: a jittered run's
    start) up to ``ended`` (included), as while the run of ``slot`` ran: how many (up
    to :data:`COUNT_LIMIT`) and the latest."""
    anchor, ended = validate.schedule_time(slot, "slot"), validate.schedule_time(ended, "ended")
    count, latest, nxt = 0, None, rule.next_after(anchor)
    while due(nxt) <= ended and count < COUNT_LIMIT:
        count, latest = count + 1, nxt
        nxt = rule.next_after(nxt)
    if count == COUNT_LIMIT:  # counted up to the limit; the latest is still exact
        back = rule.slots_back(anchor, ended)
        latest = next(back)
        if due(latest) > ended:  # its jittered start is still to come
            latest = next(back, latest)
    return count, latest


def slots_between(
    rule: Rule, start: datetime, end: datetime, reference: datetime
) -> Iterator[datetime]:
    """The slots from ``start`` to ``end`` (both included), in order. An interval's
    slots are ``reference`` (a slot of the job) plus whole multiples of it."""
    start, end = validate.schedule_time(start, "start"), validate.schedule_time(end, "end")
    if isinstance(rule, Every):
        reference = validate.schedule_time(reference, "reference")
        slot = reference + rule.interval * math.ceil((start - reference) / rule.interval)
        while slot <= end:
            yield slot
            slot += rule.interval
    elif isinstance(rule, Cron):
        for slot in rule.slots_after(start - timedelta(microseconds=1)):
            if slot > end:
                return
            yield slot
    else:
        raise InvalidSchedule(f"no slots to list for {rule!r}")
