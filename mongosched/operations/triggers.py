"""Running a repeating schedule's slots on demand: once now (a trigger), or the slots
of a past range (a backfill), beside its own slots, which do not move. The jobs are
built by :mod:`mongosched._core.spawn`; this stores them (part of
:class:`~mongosched.App`: :meth:`App.trigger_schedule`, :meth:`App.backfill`)."""

from __future__ import annotations

import logging
from datetime import datetime

from mongosched._core import spawn, validate
from mongosched._core.records import JobQuery, JobRecord, JobStatus
from mongosched.errors import JobNotFound, JobStateError, ScheduleFinished
from mongosched.store import Store

__all__ = ["backfill", "refusal", "trigger", "unfinished"]

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


def unfinished(store: Store, schedule: JobRecord, what: str) -> JobRecord:
    """``schedule`` as stored now, for the operation ``what``, which a finished
    schedule refuses (:class:`~mongosched.errors.ScheduleFinished`, saying why);
    :class:`~mongosched.errors.JobNotFound` if it is gone."""
    current = store.jobs.get(schedule.id)
    if current is None:
        raise JobNotFound(f"schedule {schedule.id} ({schedule.task}) no longer exists")
    if current.status.is_final:
        raise refusal(what, current)
    return current


def _runs(
    store: Store, schedule: JobRecord, jobs: list[JobRecord], what: str
) -> list[tuple[JobRecord, bool]]:
    """Store ``jobs``, made to run slots of ``schedule``, in a write that a schedule
    finished since it was read (cancelled meanwhile, say) refuses."""
    for _ in range(5):
        stored = store.admin.insert_runs(schedule.id, jobs)
        if stored is not None:
            return stored
        unfinished(store, schedule, what)  # raises, unless it was brought back since
    raise JobStateError(f"schedule {schedule.id} ({schedule.task}) keeps changing; {what} refused")


def trigger(store: Store, schedule: JobRecord, now: datetime) -> JobRecord:
    """Store a run of ``schedule`` due ``now`` (its slot: ``now``)."""
    [(run, _)] = _runs(
        store, schedule, [spawn.slot_run(schedule, now, now, keyed=False)], "trigger_schedule"
    )
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
    open_jobs = store.jobs.find(
        JobQuery(task=schedule.task, statuses=UNFINISHED), sort="run_at", limit=0
    )
    running = [lane for lane in open_jobs if spawn.is_lane_of(lane, schedule)]
    made = spawn.backfill_lanes(schedule, start, end, at_once, now, running)
    lanes = _runs(store, schedule, made, "backfill") if made else []
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


def refusal(what: str, record: JobRecord) -> ScheduleFinished:
    """The error of ``what`` (an operation) on a finished schedule, saying why."""
    kind = "backfill job" if spawn.until(record) is not None else "schedule"
    if record.status is JobStatus.COMPLETED:
        why = "has completed: it has no slots left to run"
    elif record.status is JobStatus.CANCELLED:
        why = "was cancelled, which stops it for good (app.retry_job brings it back)"
    else:
        why = f"ended {record.status.value} (app.retry_job brings it back)"
    return ScheduleFinished(f"{what}: {kind} {record.id} ({record.task}) {why}", record.id)
