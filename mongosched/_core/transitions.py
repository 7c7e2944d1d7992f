"""What each kind of write does to a stored job, written once: pure functions from a
:class:`~mongosched._core.records.JobRecord` as stored to the record as the write
leaves it.

The memory store applies them to the records it holds. The MongoDB store keeps its
writes as update documents (:mod:`mongosched.store.mongo.updates`: each must stay one
atomic, fenced update on the server), and uses :func:`settled` where it computes a
settled job instead of reading it back; ``tests/contract/test_transitions.py`` checks,
for every transition, that the job as each store holds it after the write is the
transition of the job before it, so the update documents and these functions cannot
drift apart.

Who may write (a lease's holder, a job in some status) is the store's fence, not a
transition's: each function assumes its write lands. Times in a stored job are whole
UTC milliseconds, as BSON keeps them: every transition rounds the times it writes
(:func:`ms`). What is not a field of a record stays the store's own: the dedupe keys
held, index entries, and the MongoDB fields ``rev``, ``last_write`` and ``unlinked``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from mongosched._core import ranks
from mongosched._core.records import (
    IDLE_SCHEDULE_STATUSES,
    AttemptError,
    JobRecord,
    JobStatus,
    LastRun,
    LeaseInfo,
    MissedSlots,
    PendingChanges,
    Progress,
    ScheduleChanges,
    ScheduleEdit,
    Settlement,
    assembled,
    ended_attempt,
    evolved,
    is_schedule_id,
    kept_attempts,
    kept_errors,
)

__all__ = [
    "cancel_requested",
    "claim_lease",
    "claimed",
    "claimed_under",
    "crossed_off",
    "dependents_released",
    "edited",
    "linked",
    "may_expire",
    "ms",
    "opt_ms",
    "paused",
    "progressed",
    "redeclared",
    "replaced",
    "renewed",
    "resumed",
    "retried",
    "schedule_edited",
    "settled",
    "slot_recorded",
]


def ms(value: datetime) -> datetime:
    """``value`` as a stored job keeps it: UTC (a naive one taken as UTC), in whole
    milliseconds, as BSON datetimes are."""
    zone = value.tzinfo
    if zone is not timezone.utc:
        if zone is None or zone.utcoffset(None) == _NO_OFFSET:  # naive, or another UTC
            value = value.replace(tzinfo=timezone.utc)  # (BSON's, on what a store read)
        else:
            value = value.astimezone(timezone.utc)
    if not value.microsecond % 1000:
        return value  # already so (App.now's times and what a store read are)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


_NO_OFFSET = timedelta(0)


def opt_ms(value: datetime | None) -> datetime | None:
    return None if value is None else ms(value)


def _missed_ms(missed: MissedSlots) -> MissedSlots:
    return evolved(missed, last_slot=ms(missed.last_slot), at=ms(missed.at))


def may_expire(job_id: Any) -> bool:
    """Whether a finished job may be deleted (by its retention, ``delete_at``, or a
    purge): every job but a declared schedule, which, cancelled, is the tombstone that
    keeps the schedule off until it is resumed."""
    return not is_schedule_id(job_id)


def kept_until(delete_at: datetime, job: JobRecord) -> datetime:
    """When a finished ``job`` may be deleted: as its retention says (``delete_at``), but
    never before its throttle window closes, since the job is what holds its dedupe key
    for the window (``dedupe_window``): deleted sooner, it would let a second job of the
    key in."""
    until = job.dedupe_until
    return delete_at if until is None or until <= delete_at else until


def claimed(
    job: JobRecord,
    owner: str,
    token: str,
    now: datetime,
    lease_duration: float,
    where: tuple[str, int] | None = None,
) -> JobRecord:
    """A pending job claimed: running under ``token``'s lease until ``now +
    lease_duration``, its attempt counted (a pending-scope dedupe key is let go);
    ``where``: the claiming runner's host and process id, kept in the lease."""
    return claimed_under(job, claim_lease(owner, token, now, lease_duration, where))


def claim_lease(
    owner: str,
    token: str,
    now: datetime,
    lease_duration: float,
    where: tuple[str, int] | None = None,
) -> LeaseInfo:
    """The lease a claim at ``now`` gives (see :func:`claimed`). The leases of one
    batched claim differ only in their tokens: its store makes the first and copies
    it with each job's token."""
    now = ms(now)
    host, pid = where if where is not None else (None, None)
    return assembled(
        LeaseInfo,
        {
            "owner": owner,
            "token": token,
            "until": ms(now + timedelta(seconds=lease_duration)),
            "heartbeat_at": now,
            "host": host,
            "pid": pid,
        },
    )


def claimed_under(job: JobRecord, lease: LeaseInfo) -> JobRecord:
    """A pending job claimed under ``lease``, as :func:`claim_lease` makes it (see
    :func:`claimed`)."""
    now = lease.heartbeat_at
    return evolved(
        job,
        status=JobStatus.RUNNING,
        lease=lease,
        started_at=now,
        updated_at=now,
        attempts=job.attempts + 1,
    )


def renewed(job: JobRecord, now: datetime, until: datetime) -> JobRecord:
    """A running job's lease renewed by its holder (``updated_at`` unchanged)."""
    assert job.lease is not None, "only a held lease is renewed"
    return evolved(job, lease=evolved(job.lease, until=ms(until), heartbeat_at=ms(now)))


def slot_recorded(job: JobRecord, slot: datetime, now: datetime) -> JobRecord:
    """A repeating job's holder recorded the slot it runs for."""
    return evolved(job, scheduled_for=ms(slot), updated_at=ms(now))


def progressed(
    job: JobRecord, value: float | None, message: str | None, now: datetime
) -> JobRecord:
    """A running job's holder reported progress (``updated_at`` unchanged)."""
    return evolved(job, progress=Progress(value=value, message=message, at=ms(now)))


def settled(job: JobRecord, settlement: Settlement, result: Any = None) -> JobRecord:
    """The job as ``settlement`` leaves it (see :class:`Settlement`; ``result``: its
    result as the store gives it back). The lease goes; no dependency is waited for
    any more; a final status records ``finished_at`` and, but for a declared schedule
    (:func:`may_expire`), ``delete_at``; a failed attempt's error joins ``errors``
    (the last :data:`ERRORS_KEPT`), and the attempt it ends joins ``history`` (see
    :func:`ended_attempt`); log entries given replace the job's. What is not given
    stays as it was."""
    s = settlement
    now = ms(s.now)
    final = s.status.is_final
    last = s.last_run
    error = s.attempt_error
    if error is not None:
        error = AttemptError(attempt=error.attempt, at=ms(error.at), error=error.error)
    expires = final and s.delete_at is not None and may_expire(job.id)
    return evolved(
        job,
        status=s.status,
        lease=None,
        updated_at=now,
        result=result,
        error=s.error,
        waiting_for=(),
        attempts=job.attempts if s.attempts is None else s.attempts,
        run_at=job.run_at if s.run_at is None else ms(s.run_at),
        scheduled_for=job.scheduled_for if s.scheduled_for is None else ms(s.scheduled_for),
        last_run=job.last_run
        if last is None
        else LastRun(
            slot=ms(last.slot),
            status=last.status,
            finished_at=ms(last.finished_at),
            error=last.error,
            failures=last.failures,
        ),
        missed=job.missed if s.missed is None else _missed_ms(s.missed),
        finished_at=now if final else job.finished_at,
        delete_at=ms(kept_until(s.delete_at, job))
        if expires and s.delete_at is not None
        else job.delete_at,
        errors=job.errors if error is None else kept_errors(job.errors, error),
        history=kept_attempts(
            job.history, ended_attempt(job, s if now is s.now else evolved(s, now=now))
        ),
        logs=job.logs if s.logs is None else tuple(evolved(e, at=ms(e.at)) for e in s.logs),
    )


def cancel_requested(job: JobRecord, now: datetime) -> JobRecord:
    """A user asked a running job to stop: its holder sees it at its next heartbeat,
    and its settlement ends it cancelled (``Settlement.on_cancel``)."""
    return evolved(job, cancel_requested=True, updated_at=ms(now))


def edited(job: JobRecord, changes: PendingChanges, now: datetime) -> JobRecord:
    """A pending job edited (``None``: unchanged)."""
    c = changes
    priority = job.priority if c.priority is None else c.priority
    run_at = job.run_at if c.run_at is None else ms(c.run_at)
    return evolved(
        job,
        priority=priority,
        rank=ranks.edited_rank(job.rank, job.fair_at, priority, job.aging, run_at),
        queue=job.queue if c.queue is None else c.queue,
        run_at=run_at,
        args=job.args if c.args is None else tuple(c.args),
        kwargs=job.kwargs if c.kwargs is None else dict(c.kwargs),
        updated_at=ms(now),
    )


def releases_hold(status: JobStatus, repeating: bool, label: str | None, new: str | None) -> bool:
    """Whether a debounce that gives a job of ``status`` the label ``new`` (it had
    ``label``) releases it from its hold: a label's hold ends with the label."""
    return status is JobStatus.PAUSED and not repeating and label != new


REPLACED = (
    "args",
    "kwargs",
    "run_at",
    "updated_at",
    "priority",
    "max_attempts",
    "expires_at",
    "timeout",
    "label",
    "rate_key",
    "concurrency_key",
    "trace",
)
"""What a debounce takes from the later call: every field that describes the job
rather than its place (its id, queue, dedupe key, creation time and fair start stay;
its rank follows its priority and due time as an edit's does,
:func:`~mongosched._core.ranks.edited_rank`), named alike in a record and a stored
document."""


def replaced(job: JobRecord, later: JobRecord) -> JobRecord:
    """Debounce (``dedupe="replace"``): a waiting job takes the fields of a ``later``
    call with its dedupe key that :data:`REPLACED` names, and is ranked again for
    its new priority and due time as an edit ranks it. A job held by its label's pause
    (``paused``, not repeating) that takes another label is released: the hold was
    the old label's, and a runner holds it again when it claims it if the new label
    is paused too."""
    values: dict[str, Any] = {name: getattr(later, name) for name in REPLACED}
    if releases_hold(job.status, job.repeat is not None, job.label, later.label):
        values["status"] = JobStatus.PENDING
    values.update(
        rank=ranks.edited_rank(job.rank, job.fair_at, later.priority, job.aging, later.run_at),
        args=tuple(later.args),
        kwargs=dict(later.kwargs),
        run_at=ms(later.run_at),
        updated_at=ms(later.updated_at),
        expires_at=opt_ms(later.expires_at),
    )
    return evolved(job, **values)


def schedule_edited(job: JobRecord, changes: ScheduleChanges, now: datetime) -> JobRecord:
    """A repeating job (pending or paused) edited by an operator: a new due time is
    also its next slot."""
    c = changes
    run_at = None if c.run_at is None else ms(c.run_at)
    return evolved(
        job,
        repeat=job.repeat if c.repeat is None else dict(c.repeat),
        run_at=job.run_at if run_at is None else run_at,
        scheduled_for=job.scheduled_for if run_at is None else run_at,
        priority=job.priority if c.priority is None else c.priority,
        queue=job.queue if c.queue is None else c.queue,
        edit=job.edit if c.edit is None else ScheduleEdit(ms(c.edit.at), c.edit.declared),
        updated_at=ms(now),
    )


def redeclared(job: JobRecord, declared: JobRecord, now: datetime) -> JobRecord:
    """A declared schedule as its declaration in code (``declared``) leaves it: the
    same job when the rule, queue, priority and attempts declared are those stored;
    else those, an operator's edit dropped, and, for a new rule while it waits for its
    next slot (pending or paused), that slot as declared."""
    d = declared
    if (job.repeat, job.queue, job.priority, job.max_attempts) == (
        d.repeat,
        d.queue,
        d.priority,
        d.max_attempts,
    ):
        return job
    slot = job.status in IDLE_SCHEDULE_STATUSES and job.repeat != d.repeat
    return evolved(
        job,
        repeat=None if d.repeat is None else dict(d.repeat),
        queue=d.queue,
        priority=d.priority,
        max_attempts=d.max_attempts,
        run_at=ms(d.run_at) if slot else job.run_at,
        scheduled_for=opt_ms(d.scheduled_for) if slot else job.scheduled_for,
        edit=None,
        updated_at=ms(now),
    )


def retried(job: JobRecord, now: datetime) -> JobRecord:
    """A finished job run again: pending now, its attempts from zero, its end (time,
    result, retention, expiry, a cancel asked) forgotten; its last error kept. A
    repeating job's next slot is now."""
    now = ms(now)
    return evolved(
        job,
        status=JobStatus.PENDING,
        attempts=0,
        run_at=now,
        updated_at=now,
        scheduled_for=now if job.repeat is not None else job.scheduled_for,
        result=None,
        finished_at=None,
        delete_at=None,
        expires_at=None,
        cancel_requested=False,
    )


def paused(job: JobRecord, now: datetime) -> JobRecord:
    """A pending repeating job held by an operator's pause of its schedule."""
    return evolved(job, status=JobStatus.PAUSED, updated_at=ms(now))


def resumed(job: JobRecord, now: datetime) -> JobRecord:
    """A paused repeating job pending again."""
    return evolved(job, status=JobStatus.PENDING, updated_at=ms(now))


def linked(job: JobRecord, now: datetime) -> JobRecord:
    """A job others now depend on: marked so until they are released (``updated_at``
    too, so that its holder's computed settlement sees the change); already marked,
    unchanged."""
    if job.has_dependents:
        return job
    return evolved(job, has_dependents=True, updated_at=ms(now))


def dependents_released(job: JobRecord) -> JobRecord:
    """A finished job whose dependents were all released: no longer marked."""
    return evolved(job, has_dependents=False)


def crossed_off(job: JobRecord, dependency: Any) -> JobRecord:
    """A waiting job no longer waiting for ``dependency`` (which ended)."""
    return evolved(job, waiting_for=tuple(d for d in job.waiting_for if d != dependency))
