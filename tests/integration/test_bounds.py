"""Every count, text, time and duration the API takes has a bound, checked where it
enters: beyond it, :class:`~mongosched.errors.OutOfBounds` names the field (and the
task), the same on both stores, before anything is written; never a driver's
``OverflowError`` or ``DocumentTooLarge``, never a run stored and then an error."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from bson import ObjectId

from mongosched import App, JobStatus
from mongosched.errors import ConfigurationError, OutOfBounds
from tests.support.bounds import BIG, FAR, HUGE, bounded_app
from tests.support.server_fixtures import shared_db

__all__ = ["bounded_app", "shared_db"]

YEAR_ONE = datetime(1, 1, 1, tzinfo=timezone.utc)
END = datetime.max.replace(tzinfo=timezone.utc)
TZ_PLUS_14 = datetime.min.replace(tzinfo=timezone(timedelta(hours=14)))

Call = Callable[[App], Any]


def once(app: App) -> Any:
    return app.get_jobs(task="once")[0].id


CASES: list[tuple[str, Call, str]] = [
    # Counts
    ("get_jobs limit", lambda app: app.get_jobs(limit=HUGE), "get_jobs: limit"),
    ("get_jobs skip", lambda app: app.get_jobs(skip=HUGE), "get_jobs: skip"),
    ("audit limit", lambda app: app.audit.entries(limit=HUGE), "audit entries: limit"),
    ("retry batch", lambda app: app.retry_jobs(batch_size=HUGE), "retry_jobs: batch_size"),
    ("cancel batch", lambda app: app.cancel_jobs(task="x", batch_size=10**6), "batch_size"),
    ("purge batch", lambda app: app.purge_jobs(batch_size=HUGE, dry_run=True), "batch_size"),
    ("backfill at_once", lambda app: app.backfill("t", *_range(app), at_once=HUGE), "at_once"),
    # Texts
    ("filter task", lambda app: app.count_jobs(task=BIG), "count_jobs: task"),
    ("filter label", lambda app: app.get_jobs(label=BIG), "get_jobs: label"),
    ("filter queue", lambda app: app.retry_jobs(queue=BIG), "retry_jobs: queue"),
    ("filter error", lambda app: app.purge_jobs(error_type=BIG), "purge_jobs: error_type"),
    ("pause queue", lambda app: app.pause(queue=BIG), "queue"),
    ("pause task", lambda app: app.pause(task=BIG), "pause: task"),
    ("pause reason", lambda app: app.pause(queue="q", reason=BIG), "pause: reason"),
    ("resume task", lambda app: app.resume(task=BIG), "resume: task"),
    ("schedule name", lambda app: app.trigger_schedule(BIG), "schedule"),
    ("pause actor", lambda app: app.pause(queue="q", actor=BIG), "pause: actor"),
    ("cancel actor", lambda app: app.cancel(once(app), actor=BIG), "cancel: actor"),
    ("bulk actor", lambda app: app.cancel_jobs(task="once", actor=BIG), "cancel_jobs: actor"),
    ("trigger actor", lambda app: app.trigger_schedule("t", actor=BIG), "trigger_schedule: actor"),
    ("backfill actor", lambda app: app.backfill("t", *_range(app), actor=BIG), "backfill: actor"),
    ("edit queue", lambda app: app.update_schedule("t", queue=BIG), "task 't': queue"),
    ("job queue", lambda app: app.update_job(once(app), queue=BIG), "task 'once': queue"),
    ("dedupe key", lambda app: _configure(app, dedupe_key=BIG), "task 'once': dedupe_key"),
    ("depends_on count", lambda app: _configure(app, depends_on=MANY), "task 'once': depends_on"),
    ("bulk depends_on", lambda app: app.schedule_bulk(_waiting(app)), "task 'once': depends_on"),
    ("gather depends_on", lambda app: app.gather(_waiting(app)), "task 'once': depends_on"),
    # Times
    ("backfill start 1", lambda app: app.backfill("t", YEAR_ONE, _now(app)), "start"),
    ("backfill end 9999", lambda app: app.backfill("t", _now(app), END), "end"),
    ("backfill +14h", lambda app: app.backfill("t", TZ_PLUS_14, _now(app)), "start"),
    ("backfill far", lambda app: app.backfill("t", FAR, FAR + timedelta(hours=1)), "start"),
    ("filter time", lambda app: app.get_jobs(created_after=YEAR_ONE), "created_after"),
    ("job run_at", lambda app: app.update_job(once(app), run_at=FAR), "task 'once': run_at"),
    ("schedule run_at", lambda app: _configure(app, run_at=FAR), "task 'once': run_at"),
    ("throughput since", lambda app: app.throughput(YEAR_ONE), "throughput: since"),
    # Durations
    ("purge older_than", lambda app: app.purge(older_than=timedelta(days=10**8)), "older_than"),
    ("job delay", lambda app: app.update_job(once(app), delay=1e12), "task 'once': delay"),
    (
        "throughput buckets",
        lambda app: app.throughput(_now(app) - timedelta(seconds=2000), timedelta(seconds=0.001)),
        "throughput: since",
    ),
]


MANY = [str(ObjectId()) for _ in range(1001)]
"""One more job than a job may wait for."""


def _waiting(app: App) -> list[Any]:
    """Specs of which the last waits for too many jobs."""
    once = app.get_task("once")
    return [once.job(), once.configure(depends_on=MANY).job()]


def _now(app: App) -> datetime:
    return app.now()


def _range(app: App) -> tuple[datetime, datetime]:
    return app.now() - timedelta(minutes=5), app.now()


def _configure(app: App, **options: Any) -> Any:
    return app.get_task("once").configure(**options).schedule()


def _state(app: App) -> tuple[Any, ...]:
    """What a refused call must leave as it was: the jobs, the pauses, the audit trail."""
    jobs = sorted((str(j.id), j.status.value, j.queue, j.run_at) for j in app.get_jobs(limit=0))
    pauses = [(p.kind, p.name) for p in app.pauses()]
    return jobs, pauses, len(app.audit.entries(limit=0))


@pytest.mark.parametrize(("call", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_value_beyond_its_bound_is_refused_naming_it_before_any_write(
    bounded_app: App, call: Call, field: str
) -> None:
    before = _state(bounded_app)
    with pytest.raises(OutOfBounds) as refused:
        call(bounded_app)
    message = str(refused.value)
    assert field in message, message
    assert len(message) < 400  # the value itself is not repeated whole
    assert isinstance(refused.value, ConfigurationError)
    assert _state(bounded_app) == before


def test_values_at_the_bounds_are_taken(bounded_app: App) -> None:
    """The bounds refuse mistakes only: the largest of each is taken."""
    app = bounded_app
    assert app.get_jobs(limit=10**9, skip=10**9) == []
    assert len(app.audit.entries(limit=10**9)) == 0
    assert app.retry_jobs(batch_size=10_000, task="once") == 0
    assert app.count_jobs(task="x" * 1024) == 0
    app.pause(queue="q" * 1024, actor="a" * 1024)
    assert app.audit.entries()[0].actor == "a" * 1024
    job = app.get_task("once").configure(run_at=datetime(8999, 1, 1, tzinfo=timezone.utc))
    assert job.schedule().status is JobStatus.PENDING
    buckets = app.throughput(app.now() - timedelta(seconds=9), timedelta(seconds=0.001))
    assert len(buckets) == 9000
    first = app.schedule_bulk([app.get_task("once").job() for _ in range(1000)])
    last = app.get_task("once").configure(depends_on=first).schedule()
    assert last.status is JobStatus.WAITING and len(last.depends_on) == 1000
