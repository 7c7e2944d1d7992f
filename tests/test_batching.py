"""Batched claims in the runner: a backlog is claimed in batches for the free workers,
a lone job by a single claim, jobs of tasks with a concurrency limit one at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from mongosched import App, JobStatus
from mongosched.outcome import given_back
from tests.support.tasks import Recorder
from tests.support.waiting import wait_for


class ClaimSpy:
    """Counts the store's claims: single ones, and the sizes of batches."""

    def __init__(self, app: App) -> None:
        store = app.store
        self.lock = threading.Lock()
        self.singles = 0
        self.batches: list[int] = []
        claim, claim_batch = store.claim, store.claim_batch

        def single(**kwargs: Any) -> Any:
            got = claim(**kwargs)
            with self.lock:
                self.singles += got is not None
            return got

        def batch(**kwargs: Any) -> Any:
            got = claim_batch(**kwargs)
            assert len(got) <= kwargs["limit"]
            with self.lock:
                self.batches.append(len(got))
            return got

        store.claim = single  # type: ignore[method-assign]
        store.claim_batch = batch  # type: ignore[method-assign]


def test_a_backlog_is_claimed_in_batches_and_each_job_runs_once(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    recorder = Recorder()
    gate = threading.Event()

    @app.task(name="work", retry=1)
    def work(n: int) -> None:
        recorder.enter(n)
        gate.wait(10)  # the first jobs hold every worker while the backlog builds
        recorder.leave()

    spy = ClaimSpy(app)
    app.schedule_bulk(work.job(n) for n in range(200))
    runner = app.runner(workers=8).start()
    wait_for(lambda: recorder.running == 8, message="8 jobs running")
    gate.set()
    wait_for(lambda: app.count_jobs(status="completed") == 200, timeout=60, message="200 done")
    assert runner.stop(timeout=10)
    assert set(recorder.counts().values()) == {1} and len(recorder.counts()) == 200
    assert recorder.peak <= 8
    batched = sum(spy.batches)
    assert batched + spy.singles == 200 == runner.claimed
    assert max(spy.batches) > 1 and batched > spy.singles, (spy.singles, spy.batches)


def test_a_lone_job_is_claimed_alone(make_app: Callable[..., App]) -> None:
    app = make_app()
    app.task(name="work")(lambda: None)
    spy = ClaimSpy(app)
    runner = app.runner(workers=8).start()
    for _ in range(3):
        job = app.schedule("work").wait(timeout=10)
        assert job.status is JobStatus.COMPLETED
    assert runner.stop(timeout=10)
    assert spy.singles == 3 and sum(spy.batches) == 0


def test_the_batch_step_takes_up_to_its_limit(make_app: Callable[..., App]) -> None:
    app = make_app()
    app.task(name="work")(lambda: None)
    jobs = app.schedule_bulk(app.tasks["work"].job() for _ in range(5))
    runner = app.runner(workers=4)
    claims = runner.claim_batch(3)
    assert [c.job_id for c in claims] == [j.id for j in jobs[:3]]
    assert len({c.token for c in claims}) == 3
    rest = runner.claim_batch(10)
    assert [c.job_id for c in rest] == [j.id for j in jobs[3:]]
    assert runner.claim_batch(10) == []
    for claim in claims + rest:
        runner.run_claim(claim)
    assert app.count_jobs(status="completed") == 5


def test_jobs_of_a_limited_task_are_claimed_one_at_a_time(make_app: Callable[..., App]) -> None:
    app = make_app()
    app.task(name="limited", concurrency=1)(lambda: None)
    app.task(name="free")(lambda: None)
    app.schedule_bulk(app.tasks["limited"].job() for _ in range(3))
    app.schedule_bulk(app.tasks["free"].job() for _ in range(3))
    runner = app.runner(workers=8)
    runner.prepare()
    claims = runner.claim_batch(8)
    tasks = sorted(c.task.name for c in claims)
    assert tasks == ["free", "free", "free", "limited"]
    assert app.store.permit_holders("limited", app.now()) == 1
    # Nothing more of the limited task while its one permit is held.
    assert runner.claim_batch(8) == []
    for claim in claims:
        runner.run_claim(claim)
    # Once the permit is free (and the pause after finding it taken is over): the next.
    again = wait_for(lambda: runner.claim_batch(8), message="the next limited job")
    assert [c.task.name for c in again] == ["limited"]


def test_outcomes_finishing_together_are_written_in_one_bulk_write() -> None:
    """While one outcome's write is on its way, the others queue; the first of them
    then writes them all at once, and each worker gets its own job's result."""
    app = App("memory://")
    app.task(name="work")(lambda n: n)
    store = app.store
    jobs = app.schedule_bulk(app.tasks["work"].job(n) for n in range(6))
    runner = app.runner(workers=6)
    claims = runner.claim_batch(6)
    assert len(claims) == 6
    gate, writing = threading.Event(), threading.Event()
    bulks: list[int] = []
    settle, settle_many = store.settle, store.settle_many

    def slow_settle(job: Any, settlement: Any) -> Any:
        writing.set()
        gate.wait(10)  # the first write is on its way...
        return settle(job, settlement)

    def counted(items: Any) -> Any:
        bulks.append(len(items))
        return settle_many(items)

    store.settle = slow_settle  # type: ignore[method-assign]
    store.settle_many = counted  # type: ignore[method-assign]
    results: dict[int, Any] = {}
    first = threading.Thread(target=lambda: results.update({0: runner.run_claim(claims[0])}))
    first.start()
    assert writing.wait(10)
    others = [
        threading.Thread(target=lambda n=n: results.update({n: runner.run_claim(claims[n])}))
        for n in range(1, 6)
    ]
    for thread in others:
        thread.start()
    wait_for(lambda: runner.settler.queued == 5, message="5 outcomes queued")
    gate.set()
    for thread in [first, *others]:
        thread.join(10)
    assert bulks == [5] and runner.settler.bulk_writes == 1
    assert all(results[n] is not None and results[n].event == "job:success" for n in range(6))
    for job in jobs:
        assert job.refresh().status is JobStatus.COMPLETED and job.result == job.args[0]


def test_run_claims_reports_a_lost_lease_alone_and_sends_each_job_as_stored(
    make_app: Callable[..., App],
) -> None:
    app = make_app(lease_duration=5.0)
    app.task(name="work", retry=3)(lambda n: n * 10)
    events: list[Any] = []
    for name in ("job:success", "job:lease_lost"):
        app.on(name, lambda event, name=name: events.append((name, event.job)))
    jobs = app.schedule_bulk(app.tasks["work"].job(n) for n in range(3))
    runner, other = app.runner(workers=3), app.runner(workers=1, name="other")
    claims = runner.claim_batch(3)
    lost = claims[1]
    # Its lease runs out; the reaper gives the job back and another runner takes it.
    app.store.reap(
        lost.record, lost.until + timedelta(seconds=1), given_back(lost.record, app.now())
    )
    taken = other.claim_next(job_id=lost.job_id)
    assert taken is not None
    decisions = runner.run_claims(claims)
    assert decisions[1] is None and lost.lost
    assert [d.event for d in (decisions[0], decisions[2]) if d is not None] == ["job:success"] * 2
    succeeded = {job.id: job for name, job in events if name == "job:success"}
    assert set(succeeded) == {jobs[0].id, jobs[2].id}
    for job_id, job in succeeded.items():
        stored = app.get_job(job_id)
        assert job.status is stored.status is JobStatus.COMPLETED
        assert job.result == stored.result and job.finished_at == stored.finished_at
    assert [job.id for name, job in events if name == "job:lease_lost"] == [lost.job_id]
    assert app.get_job(lost.job_id).status is JobStatus.RUNNING  # the other runner's
