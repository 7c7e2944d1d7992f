"""outcome.decide as a table: each row is a job, how its attempt ended and the task's
retry policy, and what the one decision after a run must be (the event, the status
written, the attempts kept, when it runs next and the error it records).

A newcomer changing the decision reads the rows first: each is one rule of
docs/concepts.rst (retries) or docs/cron.rst (repeating jobs), and a row that fails names the rule broken.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mongosched._core import outcome
from mongosched._core.outcome import Ending, Retention
from mongosched._core.records import JobRecord, JobStatus, LastRun, LeaseInfo
from mongosched.errors import Fail, JobTimeout, LeaseLost, WorkerShutdown
from mongosched.retry import RetryPolicy

NOW = datetime(2031, 3, 3, 8, 0, 30, tzinfo=timezone.utc)
SLOT = datetime(2031, 3, 3, 8, 0, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)
KEEP = Retention(completed=timedelta(days=1), failed=timedelta(days=2))
SECONDS = RetryPolicy(retries=2, backoff="fixed", delay=5)
DOUBLING = RetryPolicy(retries=5, backoff="exponential", delay=1)
ONLY_KEY_ERRORS = RetryPolicy(retries=5, backoff="fixed", delay=1, retry_on=(KeyError,))
NEVER = RetryPolicy(retries=0)
LEASE = LeaseInfo(owner="w1", token="tok", until=SLOT, heartbeat_at=SLOT)


def _job(**changes: Any) -> JobRecord:
    job = JobRecord(
        task="t",
        run_at=SLOT,
        created_at=SLOT,
        updated_at=SLOT,
        id=7,
        attempts=1,
        max_attempts=3,
        status=JobStatus.RUNNING,
        started_at=SLOT,
    )
    return replace(job, **changes)


def _every_minute(**changes: Any) -> JobRecord:
    repeat = {"every": 60.0, **changes.pop("repeat", {})}
    return _job(repeat=repeat, scheduled_for=SLOT, max_attempts=1, **changes)


@dataclass(frozen=True)
class Row:
    """One rule: ``job`` ended ``ending`` under ``retry``; the decision must match."""

    rule: str
    job: JobRecord
    ending: Ending
    event: str
    status: JobStatus
    retry: RetryPolicy | None = None
    error: BaseException | None = None
    result: object = None
    attempts: int | None = None
    """The attempts written (None: not checked: a finished job keeps what it had)."""
    run_in: timedelta | None = None
    """For a pending job: how long from now until it runs."""
    scheduled_for: datetime | None = None
    error_type: str | None = None
    """The type the recorded error names (None: no error recorded)."""
    delete_in: timedelta | None = None
    missed: int = 0
    checks: tuple[str, ...] = field(default=())


ROWS = [
    Row(
        "a success completes and keeps its result for the completed retention",
        _job(),
        Ending.SUCCESS,
        "job:success",
        JobStatus.COMPLETED,
        result={"n": 1},
        attempts=1,
        delete_in=KEEP.completed,
    ),
    Row(
        "an error with attempts left retries after the policy's delay",
        _job(),
        Ending.ERROR,
        "job:retry",
        JobStatus.PENDING,
        retry=SECONDS,
        error=ValueError("boom"),
        attempts=1,
        run_in=timedelta(seconds=5),
        error_type="ValueError",
    ),
    Row(
        "exponential back-off doubles with each failed attempt",
        _job(attempts=3, max_attempts=6),
        Ending.ERROR,
        "job:retry",
        JobStatus.PENDING,
        retry=DOUBLING,
        error=ValueError("boom"),
        run_in=timedelta(seconds=4),
        error_type="ValueError",
    ),
    Row(
        "the last attempt's error fails the job for the failed retention",
        _job(attempts=3),
        Ending.ERROR,
        "job:fail",
        JobStatus.FAILED,
        retry=SECONDS,
        error=ValueError("boom"),
        attempts=3,
        error_type="ValueError",
        delete_in=KEEP.failed,
    ),
    Row(
        "retries=0 fails at the first error",
        _job(max_attempts=1),
        Ending.ERROR,
        "job:fail",
        JobStatus.FAILED,
        retry=NEVER,
        error=ValueError("boom"),
        error_type="ValueError",
    ),
    Row(
        "Fail ends the job at once, attempts left or not",
        _job(),
        Ending.ERROR,
        "job:fail",
        JobStatus.FAILED,
        retry=SECONDS,
        error=Fail("bad input"),
        error_type="Fail",
    ),
    Row(
        "an exception outside retry_on fails the job at once",
        _job(),
        Ending.ERROR,
        "job:fail",
        JobStatus.FAILED,
        retry=ONLY_KEY_ERRORS,
        error=ValueError("boom"),
        error_type="ValueError",
    ),
    Row(
        "an exception in retry_on retries",
        _job(),
        Ending.ERROR,
        "job:retry",
        JobStatus.PENDING,
        retry=ONLY_KEY_ERRORS,
        error=KeyError("k"),
        run_in=timedelta(seconds=1),
        error_type="KeyError",
    ),
    Row(
        "a timeout with attempts left retries after the policy's delay",
        _job(),
        Ending.TIMEOUT,
        "job:retry",
        JobStatus.PENDING,
        retry=SECONDS,
        run_in=timedelta(seconds=5),
        error_type="JobTimeout",
    ),
    Row(
        "a timeout on the last attempt fails the job",
        _job(attempts=3),
        Ending.TIMEOUT,
        "job:fail",
        JobStatus.FAILED,
        retry=SECONDS,
        error_type="JobTimeout",
    ),
    Row(
        "a shutdown gives the job back in its place in line, the attempt not counted",
        _job(attempts=2),
        Ending.SHUTDOWN,
        "job:retry",
        JobStatus.PENDING,
        retry=SECONDS,
        error=WorkerShutdown("stopping"),
        attempts=1,
        run_in=SLOT - NOW,
    ),
    Row(
        "an expired lease with attempts left runs again at once (the reaper's)",
        _job(lease=LEASE),
        Ending.LEASE_EXPIRED,
        "job:retry",
        JobStatus.PENDING,
        attempts=1,
        run_in=timedelta(0),
        error_type="LeaseLost",
    ),
    Row(
        "an expired lease on the last attempt fails the job",
        _job(attempts=3, lease=LEASE),
        Ending.LEASE_EXPIRED,
        "job:fail",
        JobStatus.FAILED,
        error_type="LeaseLost",
    ),
    Row(
        "the reaper, without the task's policy, retries while attempts remain",
        _job(),
        Ending.ERROR,
        "job:retry",
        JobStatus.PENDING,
        error=ValueError("boom"),
        run_in=timedelta(0),
        error_type="ValueError",
    ),
    Row(
        "a cancel while it ran ends it cancelled, for the failed retention",
        _job(),
        Ending.CANCELLED,
        "job:cancel",
        JobStatus.CANCELLED,
        retry=SECONDS,
        delete_in=KEEP.failed,
    ),
    Row(
        "a repeating job's success waits for its next slot, attempts reset",
        _every_minute(),
        Ending.SUCCESS,
        "job:success",
        JobStatus.PENDING,
        attempts=0,
        run_in=SLOT + MINUTE - NOW,
        scheduled_for=SLOT + MINUTE,
        checks=("last_run completed",),
    ),
    Row(
        "a repeating job's failure waits for its next slot and counts the failure",
        _every_minute(last_run=LastRun(SLOT - MINUTE, JobStatus.FAILED, SLOT, failures=1)),
        Ending.ERROR,
        "job:fail",
        JobStatus.PENDING,
        retry=NEVER,
        error=ValueError("boom"),
        attempts=0,
        scheduled_for=SLOT + MINUTE,
        error_type="ValueError",
        checks=("last_run failed twice",),
    ),
    Row(
        "a run that overran two slots skips them (overlap skip) and counts them missed",
        _every_minute(),
        Ending.SUCCESS,
        "job:success",
        JobStatus.PENDING,
        scheduled_for=SLOT + 3 * MINUTE,
        missed=2,
        checks=("now+2m30s",),
    ),
    Row(
        "buffer_one runs the latest overrun slot at once and drops the one before",
        _every_minute(repeat={"overlap": "buffer_one"}),
        Ending.SUCCESS,
        "job:success",
        JobStatus.PENDING,
        scheduled_for=SLOT + 2 * MINUTE,
        missed=1,
        checks=("now+2m30s",),
    ),
    Row(
        "a backfill lane ends after its last slot, as its last run ended",
        _every_minute(repeat={"until": SLOT}),
        Ending.SUCCESS,
        "job:success",
        JobStatus.COMPLETED,
        delete_in=KEEP.completed,
        checks=("last_run completed",),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.rule for row in ROWS])
def test_decide(row: Row) -> None:
    now = NOW + 2 * MINUTE if "now+2m30s" in row.checks else NOW
    decision = outcome.decide(
        row.job,
        row.ending,
        now=now,
        retention=KEEP,
        retry=row.retry,
        result=row.result,
        error=row.error,
        timeout=10.0,
        rng=random.Random(1),
    )
    written = decision.settlement
    assert (decision.event, written.status) == (row.event, row.status)
    if row.attempts is not None:
        assert written.attempts == row.attempts
    if row.run_in is not None:
        assert written.run_at == now + row.run_in
        if decision.delay is not None:  # a retry's event says the same delay
            assert decision.delay == row.run_in
    if row.scheduled_for is not None:
        assert written.scheduled_for == row.scheduled_for
    if row.error_type is None:
        assert written.error is None
    else:
        assert written.error is not None and written.error.type == row.error_type
    if row.delete_in is not None:
        assert written.delete_at == now + row.delete_in
    assert decision.missed == row.missed
    if row.result is not None:
        assert written.result == row.result
    if "last_run completed" in row.checks:
        assert written.last_run is not None
        assert (written.last_run.slot, written.last_run.status) == (SLOT, JobStatus.COMPLETED)
    if "last_run failed twice" in row.checks:
        assert written.last_run is not None and written.last_run.failures == 2
    if row.ending is not Ending.CANCELLED:  # what to write instead if cancelled meanwhile
        assert written.on_cancel is not None
        assert written.on_cancel.status is JobStatus.CANCELLED


def test_every_ending_has_a_row() -> None:
    assert {row.ending for row in ROWS} == set(Ending)


def test_a_timeout_names_the_task_and_its_limit() -> None:
    decision = outcome.decide(
        _job(attempts=3), Ending.TIMEOUT, now=NOW, retention=KEEP, retry=SECONDS, timeout=2.5
    )
    assert isinstance(decision.error, JobTimeout)
    assert "task 't' exceeded its timeout of 2.5 s" in str(decision.error)


def test_an_expired_lease_names_the_worker_and_the_attempt() -> None:
    job = _job(attempts=2, lease=LEASE)
    decision = outcome.decide(job, Ending.LEASE_EXPIRED, now=NOW, retention=KEEP)
    assert decision.settlement.error is not None
    message = decision.settlement.error.message
    assert "runner w1 stopped renewing its lease" in message and "attempt 2 of 3" in message
    assert LeaseLost.__name__ == decision.settlement.error.type
