"""Jobs made from a repeating job to run some of its slots beside it: a run triggered
now, the runs of a backfill, a slot of a schedule whose runs may overlap. Pure: the
jobs are built here; the caller stores them.

A triggered run and an overlapping slot's run are plain jobs of the schedule's task,
with its payload, queue, priority and attempts, and ``scheduled_for`` set to the slot
they run for (what ``current_job().scheduled_for`` tells the function). A backfill is
made of ``at_once`` lanes, each a repeating job bounded to a consecutive part of the
range (``until`` in its repeat document): it runs its slots one after another, at
once, and ends when its last slot has run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mongosched._core import validate
from mongosched._core.records import JobRecord, evolved
from mongosched._core.runs import slots_between
from mongosched.errors import ConfigurationError
from mongosched.schedule import Rule, rule_from_document

__all__ = [
    "MAX_BACKFILL",
    "backfill_lanes",
    "is_run_of",
    "run_key",
    "slot_run",
    "until",
]

MAX_BACKFILL = 10_000
"""Slots one backfill may run at most."""
RUN_KEY_PREFIX = "slot:"


def run_key(schedule: JobRecord, slot: datetime) -> str:
    """The dedupe key of the run of ``schedule``'s ``slot``: while that run waits or
    runs, no second run of the slot can be stored."""
    return f"{RUN_KEY_PREFIX}{schedule.id}@{slot.isoformat()}"


def is_lane_of(record: JobRecord, schedule: JobRecord) -> bool:
    """Whether ``record`` is a backfill lane of ``schedule``."""
    key = record.dedupe_key
    return key is not None and key.startswith(f"backfill:{RUN_KEY_PREFIX}{schedule.id}@")


def is_run_of(record: JobRecord, schedule: JobRecord) -> bool:
    """Whether ``record`` runs a slot of ``schedule`` (made by :func:`slot_run` with a
    key)."""
    key = record.dedupe_key
    return key is not None and key.startswith(f"{RUN_KEY_PREFIX}{schedule.id}@")


def slot_run(
    schedule: JobRecord, slot: datetime, now: datetime, *, keyed: bool = True
) -> JobRecord:
    """A job that runs ``schedule``'s function once for ``slot``, due ``now``;
    ``keyed``: under the slot's :func:`run_key`."""
    return JobRecord(
        task=schedule.task,
        args=tuple(schedule.args),
        kwargs=dict(schedule.kwargs),
        queue=schedule.queue,
        priority=schedule.priority,
        run_at=now,
        max_attempts=schedule.max_attempts,
        created_at=now,
        updated_at=now,
        scheduled_for=slot,
        dedupe_key=run_key(schedule, slot) if keyed else None,
        dedupe_scope="active" if keyed else None,
        timeout=schedule.timeout,
    )


def _cut(segments: list[list[datetime]], at_once: int) -> list[list[datetime]]:
    """``segments`` (runs of consecutive slots) cut into ``at_once`` lanes of
    near-equal length, or more when the segments are more."""
    total = sum(len(s) for s in segments)
    out: list[list[datetime]] = []
    for segment in segments:
        lanes = max(1, min(len(segment), round(at_once * len(segment) / total)))
        for n in range(lanes):
            out.append(segment[len(segment) * n // lanes : len(segment) * (n + 1) // lanes])
    return out


def until(job: JobRecord) -> datetime | None:
    """The last slot a bounded repeating job (a backfill lane) runs, or None."""
    value: Any = (job.repeat or {}).get("until")
    return value if isinstance(value, datetime) else None


def backfill_lanes(
    schedule: JobRecord,
    start: datetime,
    end: datetime,
    at_once: int,
    now: datetime,
    running: Sequence[JobRecord] = (),
) -> list[JobRecord]:
    """The lanes that run ``schedule``'s slots from ``start`` to ``end`` (both
    included), at most ``at_once`` at a time; none when no slot lies in the range.
    A slot that a lane in ``running`` (its unfinished lanes) still has to run is
    left out, so a slot is one run however each backfill cut the range."""
    assert schedule.repeat is not None
    where = f"backfill of {schedule.id} ({schedule.task})"
    validate.whole(at_once, what=f"{where}: at_once")
    if end < start:
        raise ConfigurationError(f"{where}: end {end} is before start {start}")
    rule: Rule = rule_from_document(schedule.repeat)
    reference = schedule.scheduled_for or schedule.run_at
    slots: list[datetime] = []
    for slot in slots_between(rule, start, end, reference):
        if len(slots) == MAX_BACKFILL:
            raise ConfigurationError(
                f"{where}: more than {MAX_BACKFILL} slots from {start} to {end}; "
                "backfill a shorter range at a time"
            )
        slots.append(slot)
    spans = [(lane.scheduled_for, until(lane)) for lane in running]
    free = [
        not any(a is not None and b is not None and a <= s <= b for a, b in spans) for s in slots
    ]
    parts: list[list[datetime]] = [[]]
    for slot, ok in zip(slots, free, strict=True):
        if ok:
            parts[-1].append(slot)
        elif parts[-1]:
            parts.append([])
    out = []
    for part in _cut([p for p in parts if p], at_once):
        run = slot_run(schedule, part[0], now)
        repeat = {
            **rule.to_document(),
            "misfire": {"policy": "all", "grace": None, "max_catchup": len(part)},
            "until": part[-1],
        }
        key = f"backfill:{run.dedupe_key}..{part[-1].isoformat()}"  # its first and last slot
        out.append(evolved(run, repeat=repeat, dedupe_key=key))
    return out
