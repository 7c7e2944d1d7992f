"""Batched claims in the runner: a backlog is claimed in batches for the free workers,
a lone job by a single claim, jobs of tasks with a concurrency limit one at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from mongosched import App, JobStatus
from mongosched._core.outcome import given_back
from mongosched.errors import StoreUnavailable
from tests.support.tasks import Recorder, Unreadable
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
        self.outcomes: list[int] = []
        """How many outcomes each batched claim wrote."""
        claim, settle_and_claim = store.claims.claim, store.claims.settle_and_claim

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
                self.outcomes.append(len(items))
            return settled, got

        store.claims.claim = single  # type: ignore[method-assign]
        store.claims.settle_and_claim = batch  # type: ignore[method-assign]


def test_a_backlog_is_claimed_in_batches_and_each_job_runs_once(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    recorder = Recorder()
    gate = threading.Event()

    @app.task(name="work", retry=0)
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
    assert app.store.permits.permit_holders("limited", app.now()) == 1
    # Nothing more of the limited task while its one permit is held.
    assert runner.claim_batch(8) == []
    for claim in claims:
        runner.run_claim(claim)
    # Once the permit is free (and the pause after finding it taken is over): the next.
    again = wait_for(lambda: runner.claim_batch(8), message="the next limited job")
    assert [c.task.name for c in again] == ["limited"]


def _failing_once(part: Any, name: str, error: BaseException, after: str | None = None) -> Any:
    """Make ``part.<name>`` (of a store's parts) raise ``error`` once (once
    ``part.<after>`` returned jobs, if given); returns a list that records each time it
    raised."""
    raised: list[Any] = []
    armed = [after is None]
    call = getattr(part, name)

    def failing(*args: Any, **kwargs: Any) -> Any:
        if armed[0] and not raised:
            raised.append(args)
            raise error
        return call(*args, **kwargs)

    setattr(part, name, failing)
    if after is not None:
        before = getattr(part, after)

        def arming(*args: Any, **kwargs: Any) -> Any:
            got = before(*args, **kwargs)
            armed[0] = armed[0] or bool(got[1])
            return got

        setattr(part, after, arming)
    return raised


def _given_back(app: App, count: int) -> None:
    """Every job of ``app`` is pending, its attempt uncounted (none of ``count`` runs)."""
    pending = app.get_jobs(status="pending", limit=100)
    assert len(pending) == count and all(job.attempts == 0 for job in pending)


def test_a_store_error_after_the_batched_claim_gives_its_claims_back() -> None:
    """With a limited task, a batch step is a batched claim and then a single one: when
    that single claim fails, the jobs the batched claim took are given back, uncounted
    (the caller, who gets the error, never sees them)."""
    app = App("memory://")
    app.task(name="free", retry=0)(lambda: None)
    app.task(name="limited", concurrency=1)(lambda: None)
    app.schedule_bulk(app.tasks["free"].job() for _ in range(5))
    runner = app.runner(workers=4)
    runner.prepare()
    raised = _failing_once(app.store.claims, "claim", StoreUnavailable("claim: connection refused"))
    with pytest.raises(StoreUnavailable):
        runner.claim_batch(4)
    assert raised
    _given_back(app, 5)
    assert len(runner.claim_batch(4)) == 4  # and they can be claimed again


@pytest.mark.parametrize("failure", [StoreUnavailable("refused"), RuntimeError("a bug")])
def test_a_claim_whose_admission_fails_is_given_back_and_the_others_run(failure: Exception) -> None:
    """Whatever fails while a claimed job is admitted, that job is given back,
    uncounted, and the other jobs of its batch are claimed."""
    app = App("memory://")
    app.task(name="free")(lambda: None)
    jobs = app.schedule_bulk(app.tasks["free"].job() for _ in range(4))
    runner = app.runner(workers=4)
    admit = runner.claimer.gate.admit

    def failing(claim: Any, now: Any) -> Any:
        if claim.job_id == jobs[1].id:
            raise failure
        return admit(claim, now)

    runner.claimer.gate.admit = failing  # type: ignore[method-assign]
    claims = runner.claim_batch(4)
    assert [c.job_id for c in claims] == [jobs[0].id, jobs[2].id, jobs[3].id]
    back = jobs[1].refresh()
    assert back.status is JobStatus.PENDING and back.attempts == 0
    runner.claimer.gate.admit = admit  # type: ignore[method-assign]
    for claim in claims:
        runner.run_claim(claim)
    # A single claim too: its job is given back, and the error reaches the caller.
    runner.claimer.gate.admit = failing  # type: ignore[method-assign]
    with pytest.raises(type(failure)):
        runner.claim_next()
    assert back.refresh().status is JobStatus.PENDING and back.attempts == 0


def test_a_store_error_between_the_two_claims_of_a_round_costs_no_job_a_run(
    make_app: Callable[..., App],
) -> None:
    """A started runner with a backlog and a limited task: the single claim that follows
    a batched claim fails once. The jobs the batched claim took still run (once each,
    within the lease, not after it expired: a job without retries, ``retry=0``, would
    then fail)."""
    app = make_app(lease_duration=2.0)
    recorder = Recorder()
    free = app.task(name="free", retry=0)(recorder.ran)
    app.task(name="limited", concurrency=1)(lambda: None)
    raised = _failing_once(
        app.store.claims,
        "claim",
        StoreUnavailable("claim: connection refused"),
        after="settle_and_claim",
    )
    app.schedule_bulk(free.job(n) for n in range(60))
    runner = app.runner(workers=4).start()
    wait_for(lambda: app.count_jobs(status="completed") == 60, timeout=20, message="60 done")
    assert runner.stop(timeout=10)
    assert raised and recorder.counts() == {n: 1 for n in range(60)}


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
    settle, settle_many = store.leases.settle, store.claims.settle_many

    def slow_settle(*args: Any) -> Any:
        writing.set()
        gate.wait(10)  # the first write is on its way...
        return settle(*args)

    def counted(items: Any, *args: Any) -> Any:
        bulks.append(len(items))
        return settle_many(items, *args)

    store.leases.settle = slow_settle  # type: ignore[method-assign]
    store.claims.settle_many = counted  # type: ignore[method-assign]
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
    app.task(name="work", retry=2)(lambda n: n * 10)
    events: list[Any] = []
    for name in ("job:success", "job:lease_lost"):
        app.on(name, lambda event, name=name: events.append((name, event.job)))
    jobs = app.schedule_bulk(app.tasks["work"].job(n) for n in range(3))
    runner, other = app.runner(workers=3), app.runner(workers=1, name="other")
    claims = runner.claim_batch(3)
    lost = claims[1]
    # Its lease runs out; the reaper gives the job back and another runner takes it.
    app.store.leases.reap(
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


def _deferring(
    count: int, *, running: int | None = None, database: Any = None
) -> tuple[App, Any, list[Any], Any]:
    """An app with ``2 * count`` jobs due, a runner whose settler defers outcomes to the
    next batched claim, and ``running`` (default ``count``) of ``count`` jobs claimed
    and run, each in a thread of its own: (app, runner, the claims, the events sent).
    ``database``: on the server (else memory://)."""
    app = App("memory://") if database is None else App(database=database)
    app.task(name="work")(lambda n: n * 10)
    events: list[tuple[str, Any, str]] = []
    for name in ("job:success", "job:lease_lost"):
        app.on(
            name,
            lambda event, name=name: events.append(
                (name, event.job, threading.current_thread().name)
            ),
        )
    app.schedule_bulk(app.tasks["work"].job(n) for n in range(2 * count))
    runner = app.runner(workers=count)
    runner.settler.claiming = lambda: True
    claims = runner.claim_batch(count)
    threads = [
        threading.Thread(target=runner.run_claim, args=(claim,), daemon=True)
        for claim in claims[: count if running is None else running]
    ]
    for thread in threads:
        thread.start()
    for thread in threads:  # a worker does not wait for an outcome it deferred
        thread.join(10)
        assert not thread.is_alive()
    return app, runner, claims, events


def _assert_completed(app: App, claims: list[Any]) -> None:
    for claim in claims:
        job = app.get_job(claim.job_id)
        assert job is not None and job.status is JobStatus.COMPLETED
        assert job.result == job.args[0] * 10


@pytest.mark.parametrize("on", ["memory", "server"])
def test_deferred_outcomes_ride_in_the_next_batched_claims_write(
    on: str, request: pytest.FixtureRequest
) -> None:
    """With a backlog, a finished job's outcome waits for the dispatcher's next claim,
    which writes it with the jobs it claims and has it announced (its event sent, in a
    worker); its worker goes on at once. On the server the write gives back what
    landed without the jobs' records: a listener still gets each job as stored."""
    database = request.getfixturevalue("database") if on == "server" else None
    app, runner, claims, events = _deferring(3, database=database)
    assert runner.settler.queued == 3 and all(c.deferred for c in claims)
    assert all(app.get_job(c.job_id).status is JobStatus.RUNNING for c in claims)
    assert events == [] and runner.finished == 0  # not announced yet
    spy = ClaimSpy(app)
    after_writes: list[Any] = []
    runner.settler.run_soon = after_writes.append  # a runner's workers run them
    more = runner.claim_batch(3)
    assert spy.outcomes == [3] and [c.record.args for c in more] == [(3,), (4,), (5,)]
    _assert_completed(app, claims)
    assert events == [] and len(after_writes) == 1  # one work item announces the three
    after_writes[0]()
    assert sorted(job.id for _, job, _ in events) == sorted(c.job_id for c in claims)
    assert all(name == "job:success" and job.result == job.args[0] * 10 for name, job, _ in events)
    for _, job, _ in events:
        stored = app.get_job(job.id)
        assert job.status is stored.status and job.finished_at == stored.finished_at
        assert job.history == stored.history
    assert runner.finished == 3 and runner.settler.queued == 0


def test_deferred_outcomes_no_claim_takes_are_flushed() -> None:
    """The backlog ended, a claim failed or the runner stops: a flush writes the
    outcomes deferred (nothing waits on them), and they are announced."""
    app, runner, claims, events = _deferring(2)
    assert runner.settler.queued == 2 and events == []
    runner.settler.flush()
    assert runner.settler.queued == 0
    _assert_completed(app, claims)
    assert sorted(job.id for _, job, _ in events) == sorted(c.job_id for c in claims)
    assert runner.finished == 2


def test_the_writer_on_its_way_writes_what_was_deferred_meanwhile() -> None:
    """A worker was writing its own outcome when others were deferred: the claim
    that came meanwhile could not take them; that writer writes them once done."""
    app, runner, claims, events = _deferring(3, running=0)
    store = app.store
    writing, gate = threading.Event(), threading.Event()
    settle = store.leases.settle

    def slow_settle(*args: Any) -> Any:
        writing.set()
        gate.wait(10)  # the first write is on its way...
        return settle(*args)

    store.leases.settle = slow_settle  # type: ignore[method-assign]
    runner.settler.claiming = lambda: False  # ...a worker writes its own
    first = threading.Thread(target=runner.run_claim, args=(claims[0],), daemon=True)
    first.start()
    assert writing.wait(10)
    runner.settler.claiming = lambda: True
    for claim in claims[1:]:
        runner.run_claim(claim)  # deferred at once
    assert runner.settler.queued == 2
    spy = ClaimSpy(app)
    assert len(runner.claim_batch(2)) == 2 and spy.outcomes == [0]  # the writer takes them
    gate.set()
    first.join(10)
    assert runner.settler.queued == 0
    _assert_completed(app, claims)
    assert runner.finished == 2 and len(events) == 3  # (run_claim alone counts none)


def test_a_failed_claim_gives_its_outcomes_back_and_a_flush_writes_them() -> None:
    """The claim that carried the outcomes failed: they go back to the queue, and the
    flush the dispatcher makes when it stops batching writes them (nothing is lost)."""
    app, runner, claims, events = _deferring(2)

    def down(items: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("settle_and_claim: connection refused")

    settle_and_claim = app.store.claims.settle_and_claim
    app.store.claims.settle_and_claim = down  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        runner.claim_batch(2)
    assert runner.settler.queued == 2 and events == []
    app.store.claims.settle_and_claim = settle_and_claim  # type: ignore[method-assign]
    runner.settler.flush()
    _assert_completed(app, claims)
    assert runner.finished == 2 and len(events) == 2


def test_a_deferred_result_that_cannot_be_stored_fails_the_job_after_the_write() -> None:
    """The claim's write refuses a result BSON cannot hold: what follows the write fails the job
    instead (written then, by the worker that announces it), as a worker writing its own
    outcome would."""
    app = App("memory://")
    app.task(name="odd")(lambda: object())
    app.task(name="work")(lambda: None)
    failed: list[Any] = []
    app.on("job:fail", lambda event: failed.append(event.job))
    odd = app.schedule("odd")
    app.schedule_bulk(app.tasks["work"].job() for _ in range(2))
    runner = app.runner(workers=2)
    runner.settler.claiming = lambda: True
    claims = runner.claim_batch(1)
    assert [c.job_id for c in claims] == [odd.id]
    runner.run_claim(claims[0])
    assert claims[0].deferred and runner.settler.queued == 1
    assert len(runner.claim_batch(2)) == 2 and runner.finished == 1
    job = app.get_job(odd.id)
    assert job is not None and job.status is JobStatus.FAILED
    assert job.error is not None and "return value" in job.error.message
    assert [j.id for j in failed] == [odd.id]


def test_a_result_whose_encoding_raises_anything_fails_its_job_alone_in_a_batch() -> None:
    """Encoding a result may raise anything (here the KeyError of a mapping whose
    values cannot be read): in a batched claim's write, that is its own job's
    SerializationError. It fails once, without retrying; the others' outcomes are written."""
    app = App("memory://")
    app.task(name="work", retry=3)(lambda n: Unreadable() if n == 1 else n * 10)
    app.schedule_bulk(app.tasks["work"].job(n) for n in range(6))
    runner = app.runner(workers=3)
    runner.settler.claiming = lambda: True
    claims = runner.claim_batch(3)
    for claim in claims:
        runner.run_claim(claim)  # deferred
    assert runner.settler.queued == 3
    assert len(runner.claim_batch(3)) == 3 and runner.finished == 3
    _assert_completed(app, [claims[0], claims[2]])
    bad = app.get_job(claims[1].job_id)
    assert bad is not None and bad.status is JobStatus.FAILED and bad.attempts == 1
    assert bad.error is not None and bad.error.type == "SerializationError"
    assert "task 'work': return value" in bad.error.message


def test_a_result_that_cannot_be_encoded_costs_no_other_job_a_run(
    make_app: Callable[..., App],
) -> None:
    """A started runner with a backlog: one job's result cannot be encoded. It fails
    alone, once; every other job runs once and completes."""
    app = make_app(lease_duration=2.0)
    recorder = Recorder()
    work = app.task(name="work", retry=3)(lambda n: recorder.ran(n, Unreadable() if n == 40 else n))
    spy = ClaimSpy(app)
    jobs = app.schedule_bulk(work.job(n) for n in range(80))
    runner = app.runner(workers=4).start()
    wait_for(lambda: runner.finished >= 80, timeout=30, message="80 jobs finished")
    assert runner.stop(timeout=10)
    assert spy.settled_with_claims > 0  # outcomes rode in batched claims
    assert recorder.counts() == {n: 1 for n in range(80)}
    assert app.count_jobs(status="completed") == 79
    failed = jobs[40].refresh()
    assert failed.status is JobStatus.FAILED and failed.attempts == 1
    assert failed.error is not None and failed.error.type == "SerializationError"


def test_a_deferred_outcome_whose_lease_was_lost_is_announced_as_lost() -> None:
    """Written with a claim, an outcome fenced off (its lease lost meanwhile) is announced as
    a lost lease: the job is left to whoever holds it now."""
    app, runner, claims, events = _deferring(2)
    lost = claims[0]
    app.store.leases.reap(
        lost.record, lost.until + timedelta(seconds=1), given_back(lost.record, app.now())
    )
    assert app.runner(workers=1, name="other").claim_next(job_id=lost.job_id) is not None
    runner.claim_batch(2)
    assert lost.lost and app.get_job(lost.job_id).status is JobStatus.RUNNING  # the other's
    _assert_completed(app, claims[1:])
    announced = sorted((name, job.id) for name, job, _ in events)
    assert announced == sorted([("job:lease_lost", lost.job_id), ("job:success", claims[1].job_id)])
    assert runner.finished == 2


def test_with_a_backlog_outcomes_are_announced_in_workers_and_all_before_stop_returns(
    make_app: Callable[..., App],
) -> None:
    """A started runner with a backlog: deferred outcomes are announced in worker threads
    (never the dispatcher, which must not run listeners), and a graceful stop waits
    until every one is written."""
    app = make_app()
    app.task(name="work")(lambda n: n * 10)
    threads: set[str] = set()
    app.on("job:success", lambda event: threads.add(threading.current_thread().name))
    spy = ClaimSpy(app)
    app.schedule_bulk(app.tasks["work"].job(n) for n in range(300))
    runner = app.runner(workers=4).start()
    wait_for(lambda: runner.finished >= 150, timeout=60, message="150 finished")
    assert runner.stop(timeout=30)
    assert spy.settled_with_claims > 0
    running = app.count_jobs(status="running")
    completed = app.count_jobs(status="completed")
    assert running == 0 and completed == runner.finished == runner.claimed
    assert threads and all(name.startswith("mongosched-worker") for name in threads), threads


def test_run_claims_gives_back_a_keyed_concurrency_slot(make_app: Callable[..., App]) -> None:
    """A job run by :meth:`run_claims` releases what its claim held, as :meth:`run_claim`
    does: its key's slot is free for the next job of that key at once."""
    app = make_app(lease_duration=30.0)
    app.task(name="keyed", concurrency=1, concurrency_key="tenant")(lambda tenant: tenant)
    first, second = (app.tasks["keyed"].schedule("t1") for _ in range(2))
    runner = app.runner(workers=1)
    claim = runner.claim_next(job_id=first.id)
    assert claim is not None and claim.slot_key is not None
    assert runner.run_claims([claim])[0] is not None
    assert first.refresh().status is JobStatus.COMPLETED
    assert runner.claim_next(job_id=second.id) is not None  # the key's slot is free


def test_a_job_scheduled_here_is_not_missed_by_candidates_read_ahead(
    make_app: Callable[..., App],
) -> None:
    """Under a backlog, batched claims keep candidates read ahead (on MongoDB): a job
    scheduled in this process wakes the dispatcher, which tells them to read again,
    and once the backlog is over they are forgotten."""
    app = make_app()
    gate = threading.Event()

    @app.task(name="work", retry=0)
    def work(n: int) -> None:
        gate.wait(10)

    app.schedule_bulk(work.job(n) for n in range(40))
    runner = app.runner(workers=4).start()
    ahead = runner.dispatcher.steps.claimer.ahead
    wait_for(lambda: runner.claimed >= 4, message="the first jobs claimed")
    ahead.woken = False
    work.schedule(100)
    assert ahead.woken  # the next claim reads the candidates again
    ahead.docs = ["kept"]  # (memory:// keeps nothing: only the dispatcher's drop clears it)
    gate.set()
    wait_for(lambda: app.count_jobs(status="completed") == 41, timeout=30, message="41 done")
    wait_for(lambda: ahead.docs == [], message="the kept candidates dropped")
    assert not runner.flight.batching
    assert runner.stop(timeout=10)


def test_two_runners_reading_ahead_on_one_backlog_run_each_job_once(
    database: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runners of two processes (two apps here) drain one backlog on a server, each
    reading ahead: the jobs they keep overlap, and the claims' fences keep every job to
    one run. (A server's claims are slower than ReadAhead.FOR apart, which would turn
    reading ahead off: here it lasts longer. The second runner starts once the first
    has spent candidates it kept: two runners that start together may both find their
    claims short from the first, and a short claim ends reading ahead.)"""
    from mongosched.store.mongo.claims import MongoClaims
    from mongosched.store.parts import ReadAhead

    monkeypatch.setattr(ReadAhead, "FOR", timedelta(seconds=30))
    kept = []
    spent = MongoClaims._kept

    def counting(self: MongoClaims, *args: Any) -> Any:
        docs, was_kept = spent(self, *args)
        kept.append(was_kept)
        return docs, was_kept

    monkeypatch.setattr(MongoClaims, "_kept", counting)
    recorder = Recorder()
    apps = [App(database=database, lease_duration=10, poll_interval=0.05) for _ in range(2)]
    for app in apps:
        app.task(name="work", retry=0)(lambda n: recorder.enter(n) or recorder.leave())
    apps[0].schedule_bulk(apps[0].get_task("work").job(n) for n in range(80))
    runners = [apps[0].runner(workers=4).start()]
    try:
        wait_for(lambda: any(kept), timeout=30, message="a claim spent candidates read ahead")
        runners.append(apps[1].runner(workers=4).start())
        wait_for(
            lambda: apps[0].count_jobs(status="completed") == 80, timeout=60, message="80 done"
        )
    finally:
        for runner in runners:
            assert runner.stop(timeout=10)
        for app in apps:
            app.close()
    assert len(recorder.counts()) == 80 and set(recorder.counts().values()) == {1}
    assert len(runners) == 2 and all(runner.finished > 0 for runner in runners)
