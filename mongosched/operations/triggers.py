"""Running a repeating schedule's slots on demand: once now (a trigger), or the slots
of a past range (a backfill), beside its own slots, which do not move. The jobs are
built by :mod:`mongosched._core.spawn`; this stores them (part of
:class:`~mongosched.App`: :meth:`App.trigger_schedule`, :meth:`App.backfill`)."""

from __future__ import annotations

import logging
from datetime import datetime

from mongosched._core import spawn, validate
from mongosched._core.records import JobRecord
from mongosched.store import Store

__all__ = ["backfill", "trigger"]

log = logging.getLogger("mongosched")


def trigger(store: Store, schedule: JobRecord, now: datetime) -> JobRecord:
    """Store a run of ``schedule`` due ``now`` (its slot: ``now``)."""
    [(run, _)] = store.insert([spawn.slot_run(schedule, now, now, keyed=False)])
    log.info("schedule %s (%s) triggered: job %s", schedule.id, schedule.task, run.id)
    return run


def backfill(
    store: Store,
    schedule: JobRecord,
    start: datetime,
    end: datetime,
    at_once: int,
    now: datetime,
) -> list[tuple[JobRecord, bool]]:
    """Store the lanes that run ``schedule``'s slots from ``start`` to ``end``, at
    most ``at_once`` at a time: each lane as stored and whether it is new (a lane of
    the same range still running is kept, not doubled)."""
    what = f"backfill of {schedule.id}"
    start = validate.aware_datetime(start, task=schedule.task, what=f"{what}: start")
    end = validate.aware_datetime(end, task=schedule.task, what=f"{what}: end")
    lanes = store.insert(spawn.backfill_lanes(schedule, start, end, at_once, now))
    log.info(
        "schedule %s (%s): backfill from %s to %s in %d lane(s)%s",
        schedule.id,
        schedule.task,
        start,
        end,
        len(lanes),
        "" if all(created for _, created in lanes) else " (some already running)",
    )
    return lanes
