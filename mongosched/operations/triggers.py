"""Running a repeating schedule's slots on demand: once now (a trigger), or the slots
of a past range (a backfill), beside its own slots, which do not move. The jobs are
built by :mod:`mongosched._core.spawn`; this stores them (part of
:class:`~mongosched.App`: :meth:`App.trigger_schedule`, :meth:`App.backfill`)."""

from __future__ import annotations

import logging
from datetime import datetime

from mongosched._core import spawn, validate
from mongosched._core.records import JobQuery, JobRecord, JobStatus
from mongosched.store import Store

__all__ = ["backfill", "trigger"]

log = logging.getLogger("mongosched")

UNFINISHED = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.PAUSED)


def _first_slot(lane: JobRecord) -> datetime:
    assert lane.scheduled_for is not None
    return lane.scheduled_for


def _meets(lane: JobRecord, start: datetime, end: datetime) -> bool:
    """Whether the slots ``lane`` has still to run meet the range ``start``..``end``."""
    last = spawn.until(lane)
    first = lane.scheduled_for
    return first is not None and last is not None and first <= end and last >= start


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
    unfinished = store.find(
        JobQuery(task=schedule.task, statuses=UNFINISHED), sort="run_at", limit=0
    )
    running = [lane for lane in unfinished if spawn.is_lane_of(lane, schedule)]
    lanes = store.insert(spawn.backfill_lanes(schedule, start, end, at_once, now, running))
    if not lanes:  # every slot of the range is on a lane already: those lanes
        meeting = [lane for lane in running if _meets(lane, start, end)]
        lanes = [(lane, False) for lane in sorted(meeting, key=_first_slot)]
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
