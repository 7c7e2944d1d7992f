"""Batched claims in the runner: a backlog is claimed in batches for the free workers,
a lone job by a single claim, jobs of tasks with a concurrency limit one at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from mongosched import App, JobStatus
from mongosched import settler as settler_module
from mongosched.errors import StoreUnavailable
from mongosched.outcome import given_back
from tests.support.tasks import Recorder
from tests.support.waiting import wait_for


class ClaimSpy:
    """Counts the store's claims: single ones, and the sizes of batches; and the
    outcomes written with a batched claim."""

    def __init__(self, app: App) -> None:
        store = app.store
        self.lock = threading.Lock()
        self.singles = 0
        self.batches: list[int] = []
        self.settled_with_claims = 0
        claim, settle_and_claim = store.claim, store.settle_and_claim

        def single(**kwargs: Any) -> Any:
            got = claim(**kwargs)
            with self.lock:
                self.singles += got is not None
            return got

        def batch(items: Any, **kwargs: Any) -> Any:
            singles = self.singles  # a store may claim a small batch one at a time
            settled, got = settle_and_claim(items, **kwargs)
            assert len(got) <= kwargs["limit"] and len(settled) == len(items)
            with self.lock:
                self.batches.append(len(got) - (self.singles - singles))
                self.settled_with_claims += len(items)
            return settled, got

        store.claim = single  # type: ignore[method-assign]
        store.settle_and_claim = batch  # type: ignore[method-assign]


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
    # With a backlog, most outcomes ride in the next batched claim's write.
    assert spy.settled_with_claims > 100, spy.settled_with_claims


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


def _handing_off(count: int) -> tuple[App, Any, list[Any], list[Any]]:
    """An app with ``2 * count`` jobs due, a runner whose settler hands outcomes to the
    next batched claim, and ``count`` of the jobs claimed and running in threads of
    their own: (app, runner, their claims, what each run_claim returned or raised)."""
    app = App("memory://")
    app.task(name="work")(lambda n: n * 10)
    app.schedule_bulk(app.tasks["work"].job(n) for n in range(2 * count))
    runner = app.runner(workers=count)
    runner.settler.claiming = lambda: True
    claims = runner.claim_batch(count)
    ended: list[Any] = []
    runner.handed_off = []  # type: ignore[attr-defined]
    hand_off = runner._hand_off
    runner._hand_off = lambda c: (runner.handed_off.append(c), hand_off(c))  # type: ignore[attr-defined, method-assign]

    def run(claim: Any) -> None:
        try:
            ended.append(runner.run_claim(claim))
        except Exception as exc:
            ended.append(exc)

    for claim in claims:
        threading.Thread(target=run, args=(claim,), daemon=True).start()
    return app, runner, claims, ended


def test_outcomes_handed_off_ride_in_the_next_batched_claims_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a backlog, a finished job's outcome waits for the dispatcher's next claim,
    which writes it with the jobs it claims; its worker's place is freed at once."""
    monkeypatch.setattr(settler_module, "HANDOFF_WAIT", 30.0)
    app, runner, claims, ended = _handing_off(3)
    store = app.store
    wait_for(lambda: runner.settler.queued == 3, message="3 outcomes handed off")
    handed_off = {id(c) for c in runner.handed_off}  # type: ignore[attr-defined]
    assert handed_off == {id(c) for c in claims} and ended == []
    assert all(app.get_job(c.job_id).status is JobStatus.RUNNING for c in claims)
    calls: list[int] = []
    settle_and_claim = store.settle_and_claim

    def spy(items: Any, **kwargs: Any) -> Any:
        calls.append(len(items))
        return settle_and_claim(items, **kwargs)

    store.settle_and_claim = spy  # type: ignore[method-assign]
    more = runner.claim_batch(3)
    assert calls == [3] and [c.record.args for c in more] == [(3,), (4,), (5,)]
    wait_for(lambda: len(ended) == 3, message="3 runs ended")
    assert [d.event for d in ended] == ["job:success"] * 3
    for claim in claims:
        job = app.get_job(claim.job_id)
        assert job.status is JobStatus.COMPLETED and job.result == job.args[0] * 10


@pytest.mark.parametrize("how", ["no claim came", "flushed"])
def test_an_outcome_no_claim_takes_is_written_by_its_worker(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A handed-off outcome that no claim takes in time (the backlog ended, the runner
    stops: flushed) is written by its own worker."""
    wait = 0.05 if how == "no claim came" else 30.0
    monkeypatch.setattr(settler_module, "HANDOFF_WAIT", wait)
    app, runner, claims, ended = _handing_off(2)
    if how == "flushed":
        wait_for(lambda: runner.settler.queued == 2, message="2 outcomes handed off")
        runner.settler.flush()
    wait_for(lambda: len(ended) == 2, timeout=10, message="2 runs ended")
    assert [d.event for d in ended] == ["job:success"] * 2
    assert runner.settler.queued == 0
    for claim in claims:
        assert app.get_job(claim.job_id).status is JobStatus.COMPLETED


def test_a_failed_claim_gives_its_outcomes_back_to_their_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The claim that carried the outcomes failed: each goes back to its worker, which
    writes it as if it had never been handed off (nothing is lost)."""
    monkeypatch.setattr(settler_module, "HANDOFF_WAIT", 30.0)
    app, runner, claims, ended = _handing_off(2)
    wait_for(lambda: runner.settler.queued == 2, message="2 outcomes handed off")

    def down(items: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("settle_and_claim: connection refused")

    app.store.settle_and_claim = down  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        runner.claim_batch(2)
    wait_for(lambda: len(ended) == 2, message="2 runs ended")
    assert [d.event for d in ended] == ["job:success"] * 2
    for claim in claims:
        assert app.get_job(claim.job_id).status is JobStatus.COMPLETED
