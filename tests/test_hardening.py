"""Hardening: one slow reply, one bad document or one hostile argument never runs a job
twice, stops the scheduler, or reaches a query."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest

from mongosched import App, Cancellation, Event, JobStatus
from mongosched.errors import InvalidJobId
from mongosched.records import PendingChanges
from mongosched.store import schedule_id
from mongosched.testing import FakeClock
from tests.support.server_fixtures import SharedDatabase, mongo_server, shared_db
from tests.support.waiting import wait_for

__all__ = ["mongo_server", "shared_db"]


def test_a_claim_whose_reply_arrives_after_its_lease_is_given_back_not_run(
    shared_db: SharedDatabase,
) -> None:
    """A claim reply held past the lease: the reaper may already have handed the job to
    another runner, so this runner must not start it too."""
    server = shared_db.server
    if server is None:
        pytest.skip("needs the wire-protocol server to delay replies")
    app = App(shared_db.uri(), lease_duration=1.0)
    ran: list[int] = []
    app.task(name="t")(lambda: ran.append(1))
    job = app.schedule("t")
    runner = app.runner(workers=1)
    runner.prepare()
    server.delay = 1.5  # every reply held 1.5 s: the 1 s lease is over when it arrives
    try:
        late = runner.claim_next()
    finally:
        server.delay = 0.0
    assert late is None and ran == []
    job.refresh()
    assert job.status is JobStatus.PENDING and job.attempts == 0  # given back, uncounted
    claim = runner.claim_next()
    assert claim is not None
    runner.run_claim(claim)
    assert ran == [1] and job.refresh().status is JobStatus.COMPLETED


@pytest.mark.parametrize(
    "hostile",
    [{"$ne": "x"}, {"$gt": ""}, ["a"], 42, None, "", "not-an-id", b"0123456789ab"],
    ids=repr,
)
def test_job_ids_that_cannot_be_ids_never_reach_a_query(
    make_app: Callable[..., App], hostile: object
) -> None:
    app = make_app()
    app.task(name="t")(lambda: None)
    other = app.schedule("t")
    for call in (app.cancel, app.get_job, app.retry_job, app.update_job):
        with pytest.raises(InvalidJobId, match="is not a job id"):
            call(hostile)  # type: ignore[operator]
    assert other.refresh().status is JobStatus.PENDING  # the other job was not touched


def test_a_cancel_during_a_short_run_is_not_lost(make_app: Callable[..., App]) -> None:
    """The run ends before any heartbeat could see the request: the outcome write sees
    it, so the job ends cancelled (keeping what it returned), and a repeating job stops."""
    app = make_app(lease_duration=30)
    inside, release = threading.Event(), threading.Event()
    cancels: list[Event] = []
    app.on("job:cancel", cancels.append)

    def work() -> str:
        inside.set()
        assert release.wait(10)
        return "done"

    app.task(name="once")(work)
    app.task(name="every", every=60)(work)
    for name in ("once", "every"):
        inside.clear()
        release.clear()
        job = app.schedule(name) if name == "once" else app.get_job(schedule_id("every"))
        runner = app.runner(workers=1)
        if name == "every":
            runner.prepare()
            app.store.update_pending(job.record, PendingChanges(run_at=app.now()), app.now())
        runner.start()
        assert inside.wait(10)
        assert app.cancel(job.id) is Cancellation.REQUESTED
        release.set()
        wait_for(lambda j=job: j.refresh().is_finished, message=f"{name} finished")
        runner.stop()
        assert job.status is JobStatus.CANCELLED, (name, job.status)
        assert job.result == "done"
        assert cancels[-1].job is not None and cancels[-1].job.id == job.id
    assert app.count_jobs(task="every", status="pending") == 0  # the schedule stopped


def test_a_cancelled_declared_schedule_stays_cancelled_across_purge_and_restarts(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock, keep_failed=timedelta(seconds=1))
    app.task(name="tick", every=60)(lambda: None)
    app.runner(workers=1).prepare()
    tick = schedule_id("tick")
    assert app.cancel(tick) is Cancellation.CANCELLED
    job = app.get_job(tick)
    assert job is not None and job.expire_at is None  # no retention deletes it
    clock.advance(days=400)
    assert app.purge(status=["cancelled"]) == 0
    app.runner(workers=1).prepare()  # a runner starts again, a new deploy
    job = app.get_job(tick)
    assert job is not None and job.status is JobStatus.CANCELLED
    assert app.retry_job(tick).status is JobStatus.PENDING  # resumed only when asked
