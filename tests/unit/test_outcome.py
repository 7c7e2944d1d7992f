"""outcome.decide: every decision after a run carries what to write if a cancel request
arrived meanwhile (``on_cancel``), a success's made with it at once."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from mongosched._core import outcome
from mongosched._core.outcome import Ending, Retention
from mongosched._core.records import JobRecord, JobStatus, Settlement
from mongosched.retry import RetryPolicy

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
KEEP = Retention(completed=timedelta(days=1), failed=timedelta(days=2))


def _job() -> JobRecord:
    return JobRecord(
        task="t", run_at=NOW, created_at=NOW, updated_at=NOW, id=1, attempts=1, max_attempts=3
    )


def test_a_success_completes_or_if_cancelled_meanwhile_ends_cancelled_with_its_result() -> None:
    decision = outcome.decide(_job(), Ending.SUCCESS, now=NOW, retention=KEEP, result=42)
    assert decision.event == "job:success"
    on_cancel = Settlement(
        status=JobStatus.CANCELLED, now=NOW, result=42, delete_at=NOW + timedelta(days=2)
    )
    assert decision.settlement == Settlement(
        status=JobStatus.COMPLETED,
        now=NOW,
        attempts=1,
        result=42,
        delete_at=NOW + timedelta(days=1),
        on_cancel=on_cancel,
    )
    landed = decision.as_written(JobStatus.CANCELLED)
    assert landed.event == "job:cancel" and landed.settlement == on_cancel


def test_a_failure_and_a_retry_carry_their_on_cancel_too() -> None:
    error = ValueError("no")
    for retry, status in (
        (RetryPolicy(retries=0), JobStatus.FAILED),
        (RetryPolicy(retries=2), JobStatus.PENDING),
    ):
        decision = outcome.decide(
            _job(), Ending.ERROR, now=NOW, retention=KEEP, retry=retry, error=error
        )
        assert decision.settlement.status is status
        on_cancel = decision.settlement.on_cancel
        assert on_cancel is not None and on_cancel.status is JobStatus.CANCELLED
        assert on_cancel.error == decision.settlement.error


def test_a_cancelled_run_has_no_on_cancel() -> None:
    decision = outcome.decide(_job(), Ending.CANCELLED, now=NOW, retention=KEEP)
    assert decision.settlement.status is JobStatus.CANCELLED
    assert decision.settlement.on_cancel is None


def test_an_expired_job_says_whether_it_ever_ran() -> None:
    from dataclasses import replace

    unrun = replace(_job(), attempts=0, expires_at=NOW)
    assert "it never ran" in str(outcome.expired(unrun, NOW, KEEP).error)
    claimed = replace(unrun, status=JobStatus.RUNNING, attempts=1)  # this claim counts no run
    assert "it never ran" in str(outcome.expired(claimed, NOW, KEEP).error)
    retried = replace(unrun, attempts=2)  # two attempts failed; the third is due
    message = str(outcome.expired(retried, NOW, KEEP).error)
    assert "never ran" not in message
    assert "attempt 3" in message and "2 earlier attempt(s) failed" in message
