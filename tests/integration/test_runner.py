"""The running system: claims, leases, fencing, retries, order, shutdown, recovery."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from mongosched import App, Event, Fail, JobStatus, RetryPolicy, current_job
from mongosched._core import outcome
from mongosched.app import reconfigure, runner_host
from mongosched.errors import StoreUnavailable
from mongosched.retry import DEFAULT_RETRY
from mongosched.store.memory import MemoryStore
from mongosched.testing import FakeClock, drain
from tests.support.stalls import LostHeartbeats
from tests.support.tasks import Recorder
from tests.support.waiting import wait_child, wait_for


def test_a_job_runs_and_its_result_is_stored(app: App) -> None:
    @app.task(name="add")
    def add(a: int, b: int) -> dict[str, int]:
        ctx = current_job()
        assert ctx is not None and ctx.task == "add" and ctx.attempt == 1
        return {"sum": a + b}

    runner = app.runner(workers=2).start()
    job = add.schedule(2, 3).wait(timeout=10)
    assert job.status is JobStatus.COMPLETED
    assert job.result == {"sum": 5}
    assert job.attempts == 1 and job.lease is None and job.error is None
    assert job.started_at is not None and job.finished_at >= job.started_at
    assert job.delete_at is not None  # retention applies to finished jobs
    assert runner.stop(timeout=5)


def test_racing_runners_never_claim_a_job_twice(make_app: Callable[..., App]) -> None:
    """3 apps x 3 runners x 1 worker + ... : 12 worker threads over 300 jobs."""
    recorder = Recorder()
    apps = [make_app() for _ in range(3)]
    for app in apps:
        app.task(name="work", retry=0)(lambda n: recorder.enter(n) or recorder.leave())
    jobs = apps[0].schedule_bulk(apps[0].tasks["work"].job(n) for n in range(300))
    runners = [app.runner(workers=2) for app in apps for _ in range(2)]
    for runner in runners:
        runner.start()
    wait_for(lambda: apps[0].count_jobs(status="completed") == 300, timeout=60, message="300 done")
    for runner in runners:
        assert runner.stop(timeout=10)
    counts = recorder.counts()
    assert sorted(counts) == list(range(300))
    assert set(counts.values()) == {1}, [n for n, c in counts.items() if c > 1]
    assert {j.refresh().attempts for j in jobs} == {1}
    assert sum(r.claimed for r in runners) == 300
    assert sum(1 for r in runners if r.claimed) >= 2  # the work really was shared


def test_priority_first_then_fifo_by_due_time(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    order: list[str] = []

    @app.task(name="t")
    def t(label: str) -> None:
        order.append(label)

    t.configure(delay=2).schedule("p5-second")
    t.configure(delay=1).schedule("p5-first")
    t.configure(priority=1, delay=3).schedule("p1")
    t.configure(priority=10).schedule("p10")
    t.configure(delay=60).schedule("p5-future")
    clock.advance(seconds=5)
    assert drain(app) == 4
    assert order == ["p1", "p5-first", "p5-second", "p10"]  # the future one waits
    clock.advance(seconds=60)
    assert drain(app) == 1 and order[-1] == "p5-future"


def test_retries_follow_the_policy_on_the_injected_clock(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    seen: list[int] = []

    @app.task(
        name="flaky",
        retry=RetryPolicy(retries=3, backoff="exponential", delay=10, retry_on=(IOError,)),
    )
    def flaky() -> str:
        ctx = current_job()
        assert ctx is not None
        seen.append(ctx.attempt)
        if ctx.attempt < 3:
            raise OSError(f"boom {ctx.attempt}")
        return "ok"

    job = flaky.schedule()
    start = clock()
    assert drain(app) == 1
    job.refresh()
    assert job.status is JobStatus.PENDING and job.attempts == 1
    assert job.run_at == start + timedelta(seconds=10)
    assert job.error is not None and job.error.type == "OSError" and "boom 1" in job.error.message
    assert "Traceback" in (job.error.traceback or "")
    clock.advance(seconds=9)
    assert drain(app) == 0  # not due yet
    clock.advance(seconds=1)
    assert drain(app) == 1
    assert job.refresh().run_at == clock() + timedelta(seconds=20)  # 10 * 2
    clock.advance(seconds=20)
    assert drain(app) == 1
    job.refresh()
    assert (job.status, job.result, job.attempts, seen) == (JobStatus.COMPLETED, "ok", 3, [1, 2, 3])


def test_attempts_spent_ends_failed_with_the_last_error(app: App) -> None:
    @app.task(name="bad", retry=2)
    def bad() -> None:
        raise RuntimeError("always")

    job = bad.schedule()
    assert drain(app) == 3  # retry=2: the first attempt and two retries, no delay
    job.refresh()
    assert job.status is JobStatus.FAILED and (job.attempts, job.max_attempts) == (3, 3)
    assert job.error is not None and (job.error.type, job.error.message) == (
        "RuntimeError",
        "always",
    )
    assert job.error.path == "builtins.RuntimeError"
    assert "RuntimeError: always" in (job.error.traceback or "")


def test_retry_zero_never_retries_and_a_policy_without_a_count_keeps_the_default(
    app: App,
) -> None:
    once = app.task(name="once", retry=0)(lambda: 1 / 0)
    default = app.task(name="default", retry=RetryPolicy(delay=0))(lambda: 1 / 0)
    a, b = once.schedule(), default.schedule()
    drain(app)
    assert (a.refresh().status, a.attempts) == (JobStatus.FAILED, 1)
    assert (b.refresh().status, b.attempts) == (JobStatus.FAILED, 1 + DEFAULT_RETRY.retries)


def test_a_final_failure_logs_its_traceback_once_and_a_retry_one_short_line(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="flaky", retry=1)
    def flaky() -> None:
        raise ValueError("nope")

    flaky.schedule()
    with caplog.at_level(logging.INFO, logger="mongosched"):
        assert drain(app) == 2
    retry, final = [r for r in caplog.records if "(flaky)" in r.getMessage()]
    assert (retry.levelno, retry.exc_info) == (logging.WARNING, None)
    assert "attempt 1/2 failed (ValueError: nope); retrying in 0.0 s" in retry.getMessage()
    assert final.levelno == logging.ERROR and "failed on attempt 2/2" in final.getMessage()
    assert final.exc_info is not None and isinstance(final.exc_info[1], ValueError)
    assert caplog.text.count("Traceback (most recent call last)") == 1
    assert 'raise ValueError("nope")' in caplog.text


def test_a_timeout_logs_one_line_without_a_lone_exception_line(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """A timeout's error is made by the runner, never raised: its final line has no
    traceback to print, so none is attached (it printed a stray
    ``mongosched.errors.JobTimeout: ...`` line with no ``Traceback`` header)."""

    @app.task(name="stuck", timeout=0.2, retry=0)
    def stuck() -> None:
        job = current_job()
        while job is not None and not job.is_cancelled():
            time.sleep(0.01)

    job = stuck.schedule()
    with caplog.at_level(logging.INFO, logger="mongosched"):
        runner = app.runner(workers=1, poll_interval=0.02).start()
        try:
            assert job.wait(timeout=10).status is JobStatus.FAILED
        finally:
            runner.stop(timeout=5)
    final = [r for r in caplog.records if "(stuck) failed on attempt" in r.getMessage()]
    assert len(final) == 1 and final[0].exc_info is None
    assert "JobTimeout: task 'stuck' exceeded its timeout" in final[0].getMessage()
    assert "\nmongosched.errors.JobTimeout" not in caplog.text


def test_fail_and_unlisted_exceptions_do_not_retry(app: App) -> None:
    @app.task(name="give_up", retry=4)
    def give_up() -> None:
        raise Fail("customer deleted")

    @app.task(name="typo", retry=RetryPolicy(retries=4, retry_on=(IOError,)))
    def typo() -> None:
        raise KeyError("x")

    a, b = give_up.schedule(), typo.schedule()
    assert drain(app) == 2
    assert (a.refresh().status, a.attempts, a.error.message) == (
        JobStatus.FAILED,
        1,
        "customer deleted",
    )
    assert (b.refresh().status, b.attempts, b.error.type) == (JobStatus.FAILED, 1, "KeyError")


def test_a_result_that_is_not_bson_fails_the_job_clearly(app: App) -> None:
    @app.task(name="weird", retry=2)
    def weird() -> object:
        return object()

    job = weird.schedule()
    drain(app)
    job.refresh()
    assert job.status is JobStatus.FAILED and job.attempts == 1
    assert "task 'weird': return value is not BSON-encodable" in job.error.message


def test_lost_lease_is_taken_over_and_the_late_completion_is_rejected(
    make_app: Callable[..., App], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = (
        make_app(clock=clock, lease_duration=30),
        make_app(clock=clock, lease_duration=30),
    )
    release, started = threading.Event(), threading.Event()
    lost: list[Event] = []
    first.on("job:lease_lost", lost.append)

    @first.task(name="work", retry=2)
    def slow() -> str:
        started.set()
        release.wait(20)
        return "first"

    second.task(name="work", retry=2)(lambda: "second")

    # The first runner's heartbeats never reach the database: as if hung.
    a = first.runner(workers=1, reap_interval=0.05)
    a.steps.keeper.store = LostHeartbeats(a.store)
    a.start()
    job = slow.schedule()
    assert started.wait(10)
    clock.advance(seconds=31)  # its lease (30 s) has run out
    b = second.runner(workers=1, reap_interval=0.05).start()
    wait_for(lambda: job.refresh().status is JobStatus.COMPLETED, message="takeover")
    assert job.result == "second" and job.attempts == 2
    assert job.error is None
    release.set()
    with caplog.at_level(logging.WARNING, logger="mongosched"):
        assert a.stop(timeout=10)
    assert job.refresh().result == "second"  # the late write changed nothing
    assert [e.job.id for e in lost] == [job.id]
    assert any("lease lost" in r.getMessage() for r in caplog.records)
    b.stop(timeout=5)


def test_crashed_worker_job_runs_again_then_fails_when_attempts_are_spent(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    ran: list[int] = []

    @app.task(name="victim", retry=1)
    def victim() -> None:
        ran.append(1)

    job = victim.schedule()
    runner = app.runner(workers=1)

    def crash() -> None:
        """A worker claims the job and dies: no heartbeat, no outcome."""
        claimed = app.store.claims.claim(
            owner="dead", tasks=["victim"], queues=None, now=app.now(), lease_duration=5
        )
        assert claimed is not None and claimed.id == job.id

    crash()
    assert runner.reap() == 0  # lease still valid
    clock.advance(seconds=6)
    assert runner.reap() == 1
    job.refresh()
    assert job.status is JobStatus.PENDING and job.attempts == 1
    assert job.error.path == "mongosched.errors.LeaseLost" and "runner dead" in job.error.message
    crash()  # attempt 2 dies too: attempts are spent
    clock.advance(seconds=6)
    assert runner.reap() == 1
    job.refresh()
    assert job.status is JobStatus.FAILED and job.attempts == 2 and ran == []
    assert "attempt 2 of 2" in job.error.message


def test_reaper_loses_to_a_heartbeat_that_lands_first(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    app.task(name="t")(lambda: None)
    job = app.schedule("t")
    claimed = app.store.claims.claim(
        owner="w", tasks=["t"], queues=None, now=app.now(), lease_duration=5
    )
    assert claimed is not None and claimed.lease is not None
    token = claimed.lease.token
    clock.advance(seconds=6)
    expired = app.store.leases.leases_expired(app.now())
    assert [record.id for record in expired] == [job.id]
    renewal = app.store.leases.renew(job.id, token, app.now(), app.now() + timedelta(seconds=5))
    assert renewal.held  # the heartbeat wins the race
    decision = outcome.decide(
        expired[0], outcome.Ending.LEASE_EXPIRED, now=app.now(), retention=app.retention
    )
    assert app.store.leases.reap(expired[0], app.now(), decision.settlement) is None
    assert job.refresh().status is JobStatus.RUNNING


def test_graceful_stop_finishes_in_flight_jobs(app: App) -> None:
    release = threading.Event()
    started = Recorder()

    @app.task(name="slow")
    def slow(n: int) -> int:
        started.enter(n)
        release.wait(10)
        return n

    jobs = [slow.schedule(n) for n in range(3)]
    runner = app.runner(workers=3).start()
    wait_for(lambda: len(started.calls) == 3, message="3 started")
    stopper = threading.Thread(
        target=lambda: results.append(runner.stop(graceful=True, timeout=10))
    )
    results: list[bool] = []
    stopper.start()
    wait_for(lambda: not runner.is_running, message="dispatcher stopped")
    extra = slow.schedule(99)  # scheduled after stop: must not be claimed
    release.set()
    stopper.join(10)
    assert results == [True]
    assert [j.refresh().status for j in jobs] == [JobStatus.COMPLETED] * 3
    assert app.count_jobs(status="running") == 0  # no live lease left behind
    assert extra.refresh().status is JobStatus.PENDING
    assert not runner.is_running


def test_non_graceful_stop_interrupts_and_requeues(app: App) -> None:
    started = threading.Event()

    @app.task(name="loop")
    def loop() -> None:
        started.set()
        while True:  # pure-Python loop: the interrupt stops it
            pass

    job = loop.schedule()
    runner = app.runner(workers=1).start()
    assert started.wait(10)
    assert runner.stop(graceful=False, timeout=10)
    job.refresh()
    assert job.status is JobStatus.PENDING and job.attempts == 0  # handed back, uncounted


def test_unknown_task_jobs_are_left_pending_and_reported(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    web, worker = make_app(), make_app()
    web.task(name="only.in.web")(lambda: None)
    worker.task(name="known")(lambda: None)
    job = web.schedule("only.in.web")
    runner = worker.runner(workers=1)
    with caplog.at_level(logging.WARNING, logger="mongosched"):
        runner.start()
        wait_for(lambda: any("only.in.web (1)" in r.getMessage() for r in caplog.records))
    runner.stop(timeout=5)
    assert job.refresh().status is JobStatus.PENDING
    assert worker.stats()["unknown_tasks"] == {"only.in.web": 1}


def test_a_listener_added_or_removed_takes_effect_at_the_next_event(app: App) -> None:
    """A runner makes an event's job view only for listeners (its host's ``listening``): one
    added between two jobs hears the second, one removed hears nothing more."""
    app.task(name="t")(lambda: 1)
    heard: list[Any] = []

    def listener(event: Event) -> None:
        heard.append((event.name, event.job.id if event.job else None))

    host = runner_host(app)
    assert not host.listening("job:success")
    first = app.schedule("t")
    drain(app)
    app.on("job:success", listener)
    assert host.listening("job:success") and not host.listening("job:start")
    second = app.schedule("t")
    drain(app)
    app.off("job:success", listener)
    assert not host.listening("job:success")
    app.schedule("t")
    drain(app)
    assert first.refresh().status is JobStatus.COMPLETED
    assert heard == [("job:success", second.id)]


def test_listener_errors_never_break_scheduling_or_running(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[str] = []

    def broken(event: Event) -> None:
        raise RuntimeError("listener bug")

    for name in ("job:created", "job:start", "job:success"):
        app.on(name, broken)
        app.on(name, lambda e: events.append(e.name))
    app.task(name="t")(lambda: 1)
    with caplog.at_level(logging.ERROR, logger="mongosched"):
        job = app.schedule("t")
        drain(app)
    assert job.refresh().status is JobStatus.COMPLETED
    assert events == ["job:created", "job:start", "job:success"]
    assert (
        sum(
            "listener bug" in (r.exc_text or "") or "raised" in r.getMessage()
            for r in caplog.records
        )
        == 3
    )


def test_database_outage_is_survived(app: App, caplog: pytest.LogCaptureFixture) -> None:
    """The dispatcher logs, backs off and resumes when the store cannot be reached."""
    app.task(name="t")(lambda: "ok")
    store = app.store
    real_claim = store.claims.claim
    failures = {"left": 3}

    def flaky_claim(**kwargs: Any) -> Any:
        if failures["left"]:
            failures["left"] -= 1
            raise StoreUnavailable("connection refused")
        return real_claim(**kwargs)

    store.claims.claim = flaky_claim  # type: ignore[method-assign]
    job = app.schedule("t")
    runner = app.runner(workers=1, poll_interval=0.01)
    with caplog.at_level(logging.WARNING, logger="mongosched"):
        runner.start()
        assert job.wait(timeout=10).status is JobStatus.COMPLETED
    runner.stop()
    assert failures["left"] == 0
    assert any("database error" in r.getMessage() for r in caplog.records)


def test_wake_ups_during_an_outage_do_not_hurry_the_retries(app: App) -> None:
    """A wake-up ends a database backoff early, but retries stay a poll interval apart at
    least: wake-ups arriving all through an outage never turn into a busy loop."""
    app.task(name="t")(lambda: "ok")
    attempts: list[float] = []

    def failing_claim(**kwargs: Any) -> Any:
        attempts.append(time.monotonic())
        raise StoreUnavailable("connection refused")

    app.store.claims.claim = failing_claim  # type: ignore[method-assign]
    runner = app.runner(workers=1, poll_interval=0.2).start()
    try:
        wait_for(lambda: attempts, message="a first claim")
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            runner.wake()
            time.sleep(0.001)
        gaps = [b - a for a, b in zip(attempts, attempts[1:], strict=False)]
    finally:
        runner.stop(timeout=5)
    assert len(attempts) <= 8, f"{len(attempts)} claims in about a second"
    assert all(gap >= 0.19 for gap in gaps), gaps


def test_start_runner_starts_one_per_process_and_stop_runner_stops_it(app: App) -> None:
    assert app.in_process_runner is None and app.stop_runner() is True  # nothing to stop
    first = app.start_runner(workers=1)
    assert app.start_runner(workers=1) is first and app.in_process_runner is first
    assert app.stop_runner() is True and not first.is_running
    assert app.in_process_runner is None
    second = app.start_runner(workers=1)
    assert second is not first and second.is_running
    app.stop_runner()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_its_own_in_process_runner(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """A pre-forking server's worker runs jobs without calling start_runner itself."""

    @app.task(name="where")
    def where() -> int:
        return os.getpid()

    parent_runner = app.start_runner(workers=1, poll_interval=0.05)
    with caplog.at_level(logging.WARNING, logger="mongosched"):
        pid = os.fork()
        if pid == 0:  # the child: report through the exit code only
            code = 1
            try:
                runner = app.in_process_runner
                started = runner is not None and runner is not parent_runner
                assert runner is not None and started and runner.is_running
                assert (runner.workers, runner.poll_interval) == (1, 0.05)  # same options
                done = where.schedule().wait(timeout=10)
                code = 0 if done.status is JobStatus.COMPLETED else 2
            finally:
                os._exit(code)
        code = wait_child(pid)
    assert code == 0, "the child did not start a runner of its own, or it ran no job"
    assert app.in_process_runner is parent_runner and parent_runner.is_running
    assert "forked while its in-process runner was running" in caplog.text
    app.stop_runner()


def test_reconfigure_moves_an_app_to_another_store_keeping_tasks_and_listeners() -> None:
    names = [f"reconfigure-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    app = App(f"memory://{names[0]}", poll_interval=0.05)
    created: list[Event] = []
    app.on("job:created", created.append)

    @app.task(name="t")
    def t() -> str:
        return "done"

    before = app.start_runner(workers=1)
    try:
        reconfigure(app, App(f"memory://{names[1]}", poll_interval=0.02, lease_duration=3))
        assert (app.uri, app.poll_interval, app.lease_duration) == (
            f"memory://{names[1]}",
            0.02,
            3,
        )
        assert not before.is_running  # it held the old store
        runner = app.in_process_runner
        assert runner is not None and runner.store is app.store and runner.poll_interval == 0.02
        job = t.schedule()  # a task registered before follows its app
        assert job.wait(timeout=10).result == "done"
        assert [event.job.id for event in created] == [job.id]
        assert App(f"memory://{names[1]}").get_job(job.id) is not None
        assert App(f"memory://{names[0]}").get_job(job.id) is None
    finally:
        app.stop_runner(timeout=5)
        for name in names:
            MemoryStore.forget(name)


def from_script(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as if defined at the top of a script run as ``python hello.py``."""
    fn.__module__, fn.__qualname__ = "__main__", fn.__name__
    return fn


def test_a_runner_explains_due_jobs_of_a_script_task_once_per_task(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    script, worker = make_app(), make_app()

    def greet(name: str) -> str:
        return f"hello {name}"

    script.task(from_script(greet)).schedule("ann")  # named __main__.greet
    script.task(from_script(lambda: None)).schedule()  # __main__.<lambda>
    worker.task(name="hello.greet")(greet)  # what the worker importing hello.py registers
    runner = worker.runner(workers=1)
    with caplog.at_level(logging.WARNING, logger="mongosched"):
        assert runner.report_unknown_tasks() == {"__main__.greet": 1, "__main__.<lambda>": 1}
        assert len(runner.report_unknown_tasks()) == 2
    explained = [r.getMessage() for r in caplog.records if r.name == "mongosched.runner"]
    about_greet = [m for m in explained if "task '__main__.greet'" in m]
    assert len(about_greet) == 1, explained  # once, not per check
    assert "this process knows it as 'hello.greet'" in about_greet[0]
    assert "@app.task(name='greet')" in about_greet[0]
    assert len([m for m in explained if "task '__main__.<lambda>'" in m]) == 1
    assert worker.count_jobs(status="pending") == 2  # left as they are


class _SlowCount(int):
    """A count whose ``+`` lets other threads run in the middle (as a free-threaded
    interpreter may at any point of ``x += 1``): unguarded increments from several
    threads then lose some."""

    def __add__(self, other: Any) -> _SlowCount:
        time.sleep(0.001)
        return _SlowCount(int(self) + int(other))


def test_jobs_finished_in_many_worker_threads_are_each_counted() -> None:
    """``finished`` (reported by ``health()``) counts every job that its worker threads
    end, however they interleave: it is guarded by the runner's lock."""
    app = App("memory://")
    app.task(name="t")(lambda: None)
    app.schedule_bulk(app.tasks["t"].job() for _ in range(40))
    runner = app.runner(workers=40)
    claims = runner.claim_batch(40)
    for claim in claims:
        runner.flight.add(claim)
    runner.flight.finished = _SlowCount(0)
    threads = [
        threading.Thread(target=lambda part=part: [runner.flight.done(c) for c in part])
        for part in (claims[n::8] for n in range(8))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert runner.finished == 40 and runner.in_flight == 0


def _blocked_while_held(
    lock: Any, call: Callable[[], Any], seen: Callable[[], Any] = lambda: None
) -> tuple[bool, Any]:
    """Whether ``call()``, run in another thread, waits while ``lock`` is held here
    (for 0.2 s), and what ``seen()`` says meanwhile."""
    done = threading.Event()
    with lock:
        thread = threading.Thread(target=lambda: (call(), done.set()))
        thread.start()
        waited = not done.wait(0.2)
        meanwhile = seen()
    thread.join(10)
    return waited and done.is_set(), meanwhile


def test_the_jobs_in_flight_are_read_under_their_lock() -> None:
    """The settler asks how many other jobs run (to wait for their outcomes): it reads
    the claims in flight under the lock that guards them."""
    runner = App("memory://").runner(workers=2)
    assert _blocked_while_held(runner.flight.idle, runner.flight.others)[0]


def test_a_stop_cancels_a_job_under_its_claims_lock(app: App) -> None:
    """A stop that interrupts a job marks it cancelled under its claim's lock, as the
    heartbeat marks a timeout or a cancel (so the first reason stays the job's): not
    while another thread holds that lock."""
    started, gate = threading.Event(), threading.Event()
    app.task(name="t")(lambda: (started.set(), gate.wait(10)))
    app.schedule("t")
    runner = app.runner(workers=1).start()
    try:
        assert started.wait(10)
        [claim] = runner.flight.held()
        stop = partial(runner.stop, graceful=False, timeout=5)
        waited, reason = _blocked_while_held(claim._lock, stop, lambda: claim.ctx.cancel_reason)
        assert waited and reason is None
        assert claim.ctx.cancel_reason == "shutdown"
    finally:
        gate.set()
        runner.stop(timeout=5)
