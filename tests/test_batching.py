"""Batched claims in the runner: a backlog is claimed in batches for the free workers,
a lone job by a single claim, jobs of tasks with a concurrency limit one at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from mongosched import App, JobStatus
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
