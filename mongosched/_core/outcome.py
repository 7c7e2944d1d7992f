"""What happens to a job after a run, an expired lease, a cancel or a shutdown.

The one place that decides it, for the runner, the reaper, eager mode and
:meth:`App.cancel` alike. Pure: a function of the job as claimed, how its attempt
ended, the task's retry policy, the retention settings and the time; no I/O. The
caller hands the resulting :class:`~mongosched._core.records.Settlement` to the store and
emits the decision's event with the job as the store returns it after the write.
"""

from __future__ import annotations

import enum
import random
import traceback
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any

from mongosched._core.records import (
    AttemptError,
    ErrorInfo,
    JobRecord,
    JobStatus,
    LastRun,
    LogEntry,
    MissedSlots,
    Settlement,
    assembled,
    evolved,
)
from mongosched._core.runs import Runs, overlapped, plan_misfire
from mongosched._core.spawn import until
from mongosched.errors import (
    DependencyFailed,
    JobExpired,
    JobTimeout,
    LeaseLost,
    MalformedJob,
    WorkerShutdown,
)
from mongosched.retry import RetryPolicy
from mongosched.schedule import Misfire, rule_from_document

__all__ = [
    "Decision",
    "Ending",
    "Retention",
    "RunPlan",
    "after_dependency",
    "cancelled",
    "decide",
    "ending",
    "expired",
    "error_info",
    "finished",
    "given_back",
    "held_back",
    "is_expired",
    "jitter_key",
    "pause_reason",
    "malformed",
    "shorten",
    "plan_run",
    "spawned",
    "uncomputable",
]


class Ending(enum.Enum):
    """How an attempt ended (or was ended)."""

    SUCCESS = "success"
    """The function returned."""
    ERROR = "error"
    """The function raised."""
    TIMEOUT = "timeout"
    """It ran longer than its timeout (whatever it did after the interrupt)."""
    CANCELLED = "cancelled"
    """A user cancelled it while it ran."""
    SHUTDOWN = "shutdown"
    """Its runner stopped before it finished: it runs again, uncounted."""
    LEASE_EXPIRED = "lease_expired"
    """Its holder stopped renewing the lease (a crash, a lost network): the reaper's."""


def ending(cancel_reason: str | None, error: BaseException | None) -> Ending:
    """How an attempt ended, from why its context was cancelled (None: it was not)
    and what its function raised (None: it returned)."""
    if cancel_reason == "cancelled":
        return Ending.CANCELLED
    if cancel_reason == "shutdown" or isinstance(error, WorkerShutdown):
        return Ending.SHUTDOWN
    if cancel_reason == "timeout" or isinstance(error, JobTimeout):
        return Ending.TIMEOUT
    return Ending.SUCCESS if error is None else Ending.ERROR


@dataclass(frozen=True)
class Retention:
    """How long finished jobs are kept (None: forever)."""

    completed: timedelta | None = timedelta(days=7)
    failed: timedelta | None = timedelta(days=30)
    """Failed, cancelled and expired jobs."""

    def delete_at(self, status: JobStatus, now: datetime) -> datetime | None:
        keep = self.completed if status is JobStatus.COMPLETED else self.failed
        return None if keep is None else now + keep


@dataclass(frozen=True)
class Decision:
    """What to write (``settlement``) and which event to send once it is written."""

    event: str
    settlement: Settlement
    error: BaseException | None = None
    """The exception the event carries (a failure's or a retry's)."""
    delay: timedelta | None = None
    """For a retry: how long until the next attempt."""
    missed: int = 0
    """For a repeating job: slots it dropped by this decision (its settlement's
    ``missed`` says why)."""

    @property
    def status(self) -> JobStatus:
        return self.settlement.status

    def as_written(self, status: JobStatus) -> Decision:
        """The decision that took effect, given the status the store wrote: a cancel
        requested meanwhile made it write ``settlement.on_cancel`` instead."""
        if status is not JobStatus.CANCELLED or self.status is JobStatus.CANCELLED:
            return self
        written = self.settlement.on_cancel or self.settlement
        return replace(self, event="job:cancel", settlement=written)


MAX_MESSAGE = 4 * 1024
"""Bytes (UTF-8, as stored) of an error message a job keeps."""
MAX_TRACEBACK = 32 * 1024
"""Bytes (UTF-8, as stored) of a traceback a job keeps: the start and the end, where it
was raised."""


def shorten(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` bytes of UTF-8 (as stored) from the middle,
    saying how much went, and storable: what UTF-8 cannot hold (a lone surrogate in an
    exception's message) escaped, as ``\\ud800``, not left to fail the write of the
    job's outcome."""
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit // 4 or len(text.encode("utf-8")) <= limit:
        return text
    keep = limit // 2
    head = text[:keep].encode("utf-8")[:keep].decode("utf-8", "ignore")
    tail = text[-keep:].encode("utf-8")[-keep:].decode("utf-8", "ignore")
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut ...]\n{tail}"


def error_info(exc: BaseException, *, with_traceback: bool = True) -> ErrorInfo:
    """The stored form of an exception, bounded in size (a huge message or a deep
    recursion's traceback is cut from the middle)."""
    kind = type(exc)
    try:
        message = str(exc)
    except Exception as failure:  # an exception whose __str__ raises
        message = f"<{kind.__qualname__}: str() failed: {failure!r}>"
    text = "".join(traceback.format_exception(exc)) if with_traceback else None
    return ErrorInfo(
        type=kind.__qualname__,
        message=shorten(message, MAX_MESSAGE),
        traceback=None if text is None else shorten(text, MAX_TRACEBACK),
        module=kind.__module__,
    )


_SETTLEMENT_DEFAULTS = {f.name: f.default for f in fields(Settlement)}


def finished(
    status: JobStatus,
    now: datetime,
    retention: Retention,
    *,
    attempts: int | None = None,
    result: object = None,
    error: ErrorInfo | None = None,
    on_cancel: Settlement | None = None,
) -> Settlement:
    """A job ends in the final ``status``, kept as long as the retention says
    (``on_cancel``: see :attr:`Settlement.on_cancel`)."""
    values = dict(_SETTLEMENT_DEFAULTS)
    values.update(
        status=status,
        now=now,
        attempts=attempts,
        result=result,
        error=error,
        delete_at=retention.delete_at(status, now),
        on_cancel=on_cancel,
    )
    # Every field named: assembled() skips the frozen __init__ (a run builds two).
    return assembled(Settlement, values)


def cancelled(
    now: datetime,
    retention: Retention,
    *,
    result: object = None,
    error: ErrorInfo | None = None,
) -> Settlement:
    """A job ends cancelled (a pending one, or a running one whose function returned,
    keeping what its last run returned or raised)."""
    return finished(JobStatus.CANCELLED, now, retention, result=result, error=error)


def malformed(job: JobRecord, why: str, now: datetime, retention: Retention) -> Decision:
    """A job no decision can be made for (its repeat rule no longer computes: a
    timezone this host lacks, a next slot past the year 9999...): it fails alone, for
    good, with a :class:`~mongosched.errors.MalformedJob` error saying why."""
    error = MalformedJob(f"job {job.id} ({job.task}): {why}")
    info = error_info(error, with_traceback=False)
    return Decision("job:fail", finished(JobStatus.FAILED, now, retention, error=info), error)


def uncomputable(
    job: JobRecord, exc: BaseException, now: datetime, retention: Retention
) -> Decision:
    """A job whose outcome raised ``exc`` while it was computed: it fails alone, as
    :func:`malformed` says."""
    why = f"its outcome cannot be computed ({type(exc).__name__}: {exc})"
    return malformed(job, why, now, retention)


def given_back(job: JobRecord, now: datetime) -> Settlement:
    """A claim given back without running to its end (its runner stopped, or the
    task's concurrency permits were all taken): pending again, in its place in line,
    the attempt uncounted."""
    return Settlement(
        status=JobStatus.PENDING,
        now=now,
        attempts=max(0, job.attempts - 1),
        run_at=job.run_at,
        result=job.result,
        error=job.error,
    )


def held_back(job: JobRecord, now: datetime, until: datetime | None) -> Settlement:
    """A claim given back because a flow-control limit (a rate limit, a keyed limit) is
    saturated: pending again, the attempt uncounted, due when the limit frees
    (``until``; None: in its place in line)."""
    back = given_back(job, now)
    if until is None or until <= job.run_at:
        return back
    return replace(back, run_at=until)


def expired(job: JobRecord, now: datetime, retention: Retention) -> Decision:
    """A job that had not started (or, after a failed attempt, started again) by its
    expiry (``job.expires_at``): it ends ``expired`` with a
    :class:`~mongosched.errors.JobExpired` error saying when it expired and whether it
    ever ran. Found at claim (a claimed job is settled so instead of running) or by
    the reaper's sweep of pending and waiting jobs."""
    claimed = job.status is JobStatus.RUNNING  # the claim counted an attempt that never ran
    runs = max(0, job.attempts - 1) if claimed else job.attempts
    when = job.expires_at.isoformat() if job.expires_at else "?"
    error = JobExpired(
        f"job {job.id} ({job.task}) had not started by its expiry {when}; it never ran"
        if runs <= 0
        else f"job {job.id} ({job.task}) had not started its attempt {runs + 1} by its "
        f"expiry {when}; its {runs} earlier attempt(s) failed"
    )
    info = error_info(error, with_traceback=False)
    settlement = finished(JobStatus.EXPIRED, now, retention, error=info)
    if claimed:
        settlement = replace(settlement, attempts=runs)
    return Decision("job:expired", settlement, error)


def is_expired(job: JobRecord, now: datetime) -> bool:
    """Whether ``job`` is past its expiry (a job never started after it)."""
    return job.expires_at is not None and job.expires_at <= now


def after_dependency(
    job: JobRecord,
    dependency: Any,
    status: JobStatus | None,
    now: datetime,
    retention: Retention,
) -> Decision:
    """What a waiting ``job`` does now that its ``dependency`` (an id) ended with the
    final ``status`` (None: it no longer exists, purged). A completed one (or any,
    under ``on_dependency_failure="run"``) is crossed off, and once none remains the
    job becomes pending: the settlement to apply then (event ``job:ready``). One that
    failed, was cancelled, expired or is gone ends the job cancelled, never run, with
    a :class:`~mongosched.errors.DependencyFailed` error naming it."""
    assert status is None or status.is_final, "a dependency releases its dependents once final"
    if status is JobStatus.COMPLETED or job.on_dependency_failure == "run":
        return Decision("job:ready", Settlement(status=JobStatus.PENDING, now=now))
    ended = "no longer exists" if status is None else f"ended {status}"
    error = DependencyFailed(
        f"job {job.id} ({job.task}) will not run: its dependency {dependency} {ended}"
    )
    info = error_info(error, with_traceback=False)
    return Decision("job:cancel", cancelled(now, retention, error=info), error)


def decide(
    job: JobRecord,
    ending: Ending,
    *,
    now: datetime,
    retention: Retention,
    retry: RetryPolicy | None = None,
    result: object = None,
    error: BaseException | None = None,
    slot: datetime | None = None,
    timeout: float | None = None,
    rng: random.Random | None = None,
    logs: tuple[LogEntry, ...] | None = None,
) -> Decision:
    """How ``job`` (as claimed, ``attempts`` counting this attempt) goes on after its
    attempt ended with ``ending``. ``logs``: the job's log entries to store with the
    outcome, whichever it is (None: unchanged).

    ``retry`` is the task's policy; without it (the reaper, for a task it does not
    know) the job runs again while attempts remain, at once. ``slot`` is the slot a
    repeating job ran for (default: its ``scheduled_for``). Unless the attempt ended
    by cancellation, the settlement says what to write instead if a cancel request
    arrived meanwhile (the store checks it in the same write).

    It never raises: a job whose rule no longer computes (a repeating job's rule
    written by hand, say) fails alone (:func:`uncomputable`), as every holder of an
    ended attempt writes it.
    """
    try:
        decision = _decide(job, ending, now, retention, retry, result, error, slot, timeout, rng)
    except Exception as exc:  # its rule no longer computes: it fails alone
        return uncomputable(job, exc, now, retention)
    settlement = decision.settlement
    on_cancel = settlement.on_cancel
    if ending is not Ending.CANCELLED and on_cancel is None:  # a success has its own
        on_cancel = evolved(
            cancelled(now, retention, result=settlement.result, error=settlement.error),
            attempt_error=settlement.attempt_error,
        )
    if logs is not None:
        on_cancel = None if on_cancel is None else evolved(on_cancel, logs=logs)
        settlement = evolved(settlement, logs=logs)
    elif on_cancel is settlement.on_cancel:
        return decision  # cancelled already, or made with its on_cancel (a success)
    return evolved(decision, settlement=evolved(settlement, on_cancel=on_cancel))


def _decide(
    job: JobRecord,
    ending: Ending,
    now: datetime,
    retention: Retention,
    retry: RetryPolicy | None,
    result: object,
    error: BaseException | None,
    slot: datetime | None,
    timeout: float | None,
    rng: random.Random | None,
) -> Decision:
    if ending is Ending.CANCELLED:
        return Decision("job:cancel", cancelled(now, retention))
    if ending is Ending.SHUTDOWN:
        return Decision("job:retry", given_back(job, now))
    if ending is Ending.SUCCESS:
        if job.repeat:
            return _next_slot("job:success", job, now, retention, slot, JobStatus.COMPLETED, result)
        # The usual case: its on_cancel made at once (see decide()), not added after.
        on_cancel = cancelled(now, retention, result=result)
        done = finished(
            JobStatus.COMPLETED,
            now,
            retention,
            attempts=job.attempts,
            result=result,
            on_cancel=on_cancel,
        )
        return Decision("job:success", done)
    if ending is Ending.LEASE_EXPIRED:
        owner = job.lease.owner if job.lease else None
        until = job.lease.until if job.lease else None
        lost = LeaseLost(
            f"runner {owner} stopped renewing its lease (expired {until}); "
            f"attempt {job.attempts} of {job.max_attempts}"
        )
        info = error_info(lost, with_traceback=False)
        again = job.attempts < job.max_attempts
        return _failure(job, info, None, again, timedelta(0), now, retention, slot)
    if ending is Ending.TIMEOUT:
        error = JobTimeout(f"task {job.task!r} exceeded its timeout of {timeout} s")
        again = job.attempts < job.max_attempts
        delay = retry.delay_for(job.attempts, rng) if retry is not None and again else timedelta(0)
        return _failure(job, error_info(error), error, again, delay, now, retention, slot)
    assert error is not None, "Ending.ERROR needs the error"
    if retry is None:
        again = job.attempts < job.max_attempts
        delay = timedelta(0)
    else:
        again = retry.should_retry(error, job.attempts)
        delay = retry.delay_for(job.attempts, rng) if again else timedelta(0)
    return _failure(job, error_info(error), error, again, delay, now, retention, slot)


def _failure(
    job: JobRecord,
    info: ErrorInfo,
    error: BaseException | None,
    again: bool,
    delay: timedelta,
    now: datetime,
    retention: Retention,
    slot: datetime | None,
) -> Decision:
    """An attempt failed with ``info``: retried (``again``), on to a repeating job's
    next slot, or failed for good; the attempt's error added to the job's."""
    attempt = AttemptError(attempt=job.attempts, at=now, error=info)
    if again:
        settlement = Settlement(
            status=JobStatus.PENDING,
            now=now,
            attempts=job.attempts,
            run_at=now + delay,
            error=info,
            attempt_error=attempt,
        )
        return Decision("job:retry", settlement, error, delay)
    if job.repeat:
        after = _next_slot(
            "job:fail", job, now, retention, slot, JobStatus.FAILED, None, info, error
        )
        return evolved(after, settlement=evolved(after.settlement, attempt_error=attempt))
    failed = finished(JobStatus.FAILED, now, retention, attempts=job.attempts, error=info)
    return Decision("job:fail", evolved(failed, attempt_error=attempt), error)


def _next_slot(
    event: str,
    job: JobRecord,
    now: datetime,
    retention: Retention,
    slot: datetime | None,
    status: JobStatus,
    result: object,
    info: ErrorInfo | None = None,
    error: BaseException | None = None,
) -> Decision:
    """A repeating job's run ended: record it and wait for the slot after the one it
    ran for (the nominal slot, so the schedule never drifts), unless slots came due
    while it ran: its overlap policy says what becomes of them. A bounded one (a
    backfill lane) ends after its last slot, as its last run ended."""
    assert job.repeat is not None
    rule = rule_from_document(job.repeat)
    runs = Runs.from_document(job.repeat)
    ran_for = slot or job.scheduled_for or now
    nxt, run_at, dropped = rule.next_after(ran_for), None, 0
    failures = (
        (job.last_run.failures if job.last_run else 0) + 1 if status is JobStatus.FAILED else 0
    )
    last_run = LastRun(slot=ran_for, status=status, finished_at=now, error=info, failures=failures)
    last = until(job)
    if last is not None and nxt > last:
        ended = finished(status, now, retention, attempts=job.attempts, result=result, error=info)
        return Decision(event, evolved(ended, last_run=last_run), error)
    started = job.started_at or ran_for

    def due(slot: datetime) -> datetime:  # a slot comes due at its jittered start
        return runs.start(jitter_key(job), slot)

    if started < due(nxt) <= now:  # came due while it ran (earlier: the misfire policy's)
        count, latest = overlapped(rule, ran_for, now, due)
        assert latest is not None
        if runs.overlap == "buffer_one":
            nxt, run_at, dropped = latest, now, count - 1
        else:
            nxt, dropped = rule.next_after(latest), count
    settlement = Settlement(
        status=JobStatus.PENDING,
        now=now,
        attempts=0,
        run_at=run_at or runs.start(jitter_key(job), nxt),
        scheduled_for=nxt,
        result=result,
        error=info,
        last_run=last_run,
        missed=_missed(job, dropped, ran_for, nxt, "overlap", now),
    )
    return Decision(event, settlement, error, missed=dropped)


def spawned(job: JobRecord, slot: datetime, now: datetime) -> Settlement:
    """A repeating job whose runs may overlap (``allow``, ``cancel_running``) handed
    ``slot`` to a job of its own: it waits for the slot after it, without running."""
    assert job.repeat is not None
    nxt = rule_from_document(job.repeat).next_after(slot)
    return Settlement(
        status=JobStatus.PENDING,
        now=now,
        attempts=0,
        run_at=Runs.from_document(job.repeat).start(jitter_key(job), nxt),
        scheduled_for=nxt,
        result=job.result,
        error=job.error,
        missed=job.missed,
    )


def pause_reason(job: JobRecord) -> str | None:
    """Why a repeating job whose failed run just landed pauses itself (its
    ``pause_after`` failed runs in a row reached), or None when it goes on."""
    if job.repeat is None or job.last_run is None:
        return None
    limit = Runs.from_document(job.repeat).pause_after
    failures = job.last_run.failures
    if limit is None or failures < limit:
        return None
    return f"paused after {failures} failed runs in a row (pause_after={limit})"


def jitter_key(job: JobRecord) -> str:
    """What a repeating job's jitter offsets are drawn from, besides the slot: its id
    (its task's name before it has one)."""
    return job.task if job.id is None else str(job.id)


def _missed(
    job: JobRecord, count: int, anchor: datetime, before: datetime, reason: str, now: datetime
) -> MissedSlots | None:
    """``job``'s missed slots with ``count`` more, from after slot ``anchor`` up to the
    slot just ``before`` the one it moves to; without more, as they were."""
    if count <= 0:
        return job.missed
    assert job.repeat is not None
    rule = rule_from_document(job.repeat)
    last = next(rule.slots_back(anchor, before - timedelta(microseconds=1)))
    total = (job.missed.count if job.missed else 0) + count
    return MissedSlots(count=total, last_slot=last, reason=reason, at=now)


@dataclass(frozen=True)
class RunPlan:
    """What the misfire policy makes of a repeating job's first attempt at a slot:
    run now for ``slot``, or (``slot`` None) move on without running (``settlement``)."""

    slot: datetime | None
    settlement: Settlement | None
    missed: int
    policy: str
    missed_slots: MissedSlots | None = None
    """The job's missed slots, with those dropped now."""

    @property
    def runs(self) -> bool:
        return self.slot is not None


def plan_run(job: JobRecord, now: datetime) -> RunPlan:
    """Apply the misfire policy to a repeating job claimed for its first attempt at a
    slot (``job.scheduled_for``)."""
    assert job.repeat is not None and job.scheduled_for is not None
    rule = rule_from_document(job.repeat)
    misfire = Misfire.from_document(job.repeat.get("misfire") or {})
    runs, key, anchor = Runs.from_document(job.repeat), jitter_key(job), job.scheduled_for

    def start_of(slot: datetime) -> datetime:
        start = runs.start(key, slot)
        return max(start, job.run_at) if slot == anchor else start  # a buffered run: now

    last = until(job)  # a backfill lane: its slots up to its last, however late
    plan = plan_misfire(rule, anchor, now if last is None else min(now, last), misfire, start_of)
    if plan.run_slot is not None:
        missed = _missed(job, plan.missed, anchor, plan.run_slot, "misfire", now)
        return RunPlan(plan.run_slot, None, plan.missed, misfire.policy, missed)
    assert plan.next_slot is not None
    missed = _missed(job, plan.missed, anchor, plan.next_slot, "misfire", now)
    skip = Settlement(
        status=JobStatus.PENDING,
        now=now,
        attempts=0,
        run_at=runs.start(key, plan.next_slot),
        scheduled_for=plan.next_slot,
        result=job.result,
        error=job.error,
        missed=missed,
    )
    return RunPlan(None, skip, plan.missed, misfire.policy, missed)
