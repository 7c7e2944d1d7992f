"""Job control: dedupe, concurrency limits, cancellation, timeouts, queries, events,
retention."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from mongosched import App, Cancellation, Event, JobStatus, RetryPolicy, current_job
from mongosched.errors import ConfigurationError, JobNotFound, JobStateError, JobTimeout
from mongosched.testing import FakeClock, drain
from tests.support.tasks import Recorder
from tests.support.waiting import wait_for

# Dedupe --------------------------------------------------------------------------------------


def test_dedupe_active_returns_the_existing_job_until_it_finishes(app: App) -> None:
    app.task(name="email")(lambda uid: uid)
    first = app.get_task("email").configure(dedupe_key="email:1").schedule(1)
    second = app.get_task("email").configure(dedupe_key="email:1").schedule(1)
    assert second.id == first.id and app.count_jobs() == 1
    other_task = app.task(name="sms")(lambda uid: uid).configure(dedupe_key="email:1").schedule(1)
    assert other_task.id != first.id  # keys are per task
    drain(app)
    assert first.refresh().status is JobStatus.COMPLETED
    # the key is free again
    third = app.get_task("email").configure(dedupe_key="email:1").schedule(1)
    assert third.id != first.id and third.status is JobStatus.PENDING


def test_dedupe_holds_while_running(app: App) -> None:
    inside = threading.Event()
    release = threading.Event()

    @app.task(name="sync")
    def sync() -> None:
        inside.set()
        release.wait(10)

    job = sync.configure(dedupe_key="k").schedule()
    runner = app.runner(workers=1).start()
    assert inside.wait(10)
    # active scope: running holds the key
    assert sync.configure(dedupe_key="k").schedule().id == job.id
    release.set()
    job.wait(timeout=10)
    runner.stop()


def test_dedupe_pending_scope_allows_one_waiting_behind_one_running(app: App) -> None:
    inside, release = threading.Event(), threading.Event()

    @app.task(name="sync")
    def sync(n: int) -> int:
        inside.set()
        release.wait(10)
        return n

    running = sync.configure(dedupe_key="user:9", dedupe_scope="pending").schedule(1)
    runner = app.runner(workers=1).start()
    assert inside.wait(10)
    waiting = sync.configure(dedupe_key="user:9", dedupe_scope="pending").schedule(2)
    assert waiting.id != running.id  # the running one does not hold the pending key
    again = sync.configure(dedupe_key="user:9", dedupe_scope="pending").schedule(3)
    assert again.id == waiting.id  # single-flight: coalesced into the waiting one
    release.set()
    assert waiting.wait(timeout=10).result == 2
    runner.stop()
    assert app.count_jobs(task="sync") == 2


def test_sixteen_threads_scheduling_one_key_make_one_job(app: App) -> None:
    app.task(name="once")(lambda: None)
    barrier = threading.Barrier(16)
    ids: list[Any] = []
    lock = threading.Lock()

    def schedule() -> None:
        barrier.wait()
        job = app.get_task("once").configure(dedupe_key="the-key").schedule()
        with lock:
            ids.append(job.id)

    threads = [threading.Thread(target=schedule) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(ids) == 16 and len(set(ids)) == 1
    assert app.count_jobs(task="once") == 1


def test_schedule_bulk_is_one_insert_and_resolves_dedupe(app: App) -> None:
    task = app.task(name="t")(lambda n: n)
    existing = task.configure(dedupe_key="dup").schedule(0)
    jobs = app.schedule_bulk(
        [
            task.job(1),
            task.configure(delay=5).job(2),
            task.configure(dedupe_key="dup").job(3),
            task.configure(dedupe_key="dup").job(4),
        ]
    )
    assert [j.args for j in jobs[:2]] == [[1], [2]]
    assert jobs[2].id == existing.id and jobs[3].id == existing.id
    assert app.count_jobs(task="t") == 3
    assert jobs[1].run_at - jobs[0].run_at >= timedelta(seconds=4.9)
    with pytest.raises(ConfigurationError, match="task.job"):
        app.schedule_bulk([("t", 1)])  # type: ignore[list-item]


# Concurrency limits ------------------------------------------------------------------------


def test_concurrency_limit_holds_across_runners(make_app: Callable[..., App]) -> None:
    recorder = Recorder()
    timeline: list[int] = []

    def limited(n: int) -> int:
        recorder.enter(n)
        with recorder.lock:
            timeline.append(recorder.running)
        time.sleep(0.02)  # the job's own work (not a test wait)
        recorder.leave()
        return n

    apps = [make_app() for _ in range(3)]
    for app in apps:
        app.task(name="limited", concurrency=2)(limited)
    apps[0].schedule_bulk(apps[0].tasks["limited"].job(n) for n in range(30))
    runners = [app.runner(workers=4).start() for app in apps]
    wait_for(lambda: apps[0].count_jobs(status="completed") == 30, timeout=60, message="30 done")
    for runner in runners:
        runner.stop()
    assert recorder.peak == 2 and max(timeline) == 2, timeline
    assert sorted(recorder.calls) == list(range(30))
    assert (
        apps[0].store.permits.permit_holders("limited", apps[0].now()) == 0
    )  # every permit released


def test_a_crashed_holder_permit_frees_itself_when_its_lease_expires(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    app.task(name="solo", concurrency=1)(lambda: "ran")
    store = app.store
    store.permits.ensure_permits("solo", 1)
    later = clock() + timedelta(seconds=5)
    assert store.permits.take_permit("solo", 1, "dead", 1, "x", clock(), later)
    assert not store.permits.take_permit("solo", 1, "t2", 2, "y", clock(), later)
    job = app.schedule("solo")
    runner = app.runner(workers=1)
    runner.prepare()
    assert runner.claim_next() is None  # claimed, but no permit: given back, uncounted
    assert job.refresh().status is JobStatus.PENDING and job.attempts == 0
    clock.advance(seconds=6)
    assert store.permits.take_permit(
        "solo", 1, "t3", 3, "z", clock(), clock() + timedelta(seconds=5)
    )


# Cancellation -----------------------------------------------------------------------------------


def test_cancel_pending_job_never_starts(app: App) -> None:
    ran: list[int] = []
    app.task(name="t")(lambda: ran.append(1))
    cancelled: list[Event] = []
    app.on("job:cancel", cancelled.append)
    job = app.get_task("t").configure(dedupe_key="k").schedule()
    assert app.cancel(job.id) is Cancellation.CANCELLED
    assert drain(app) == 0 and ran == []
    job.refresh()
    assert job.status is JobStatus.CANCELLED and job.finished_at is not None
    assert [e.job.id for e in cancelled] == [job.id]
    assert app.get_task("t").configure(dedupe_key="k").schedule().id != job.id  # key released
    assert app.cancel(job.id) is Cancellation.ALREADY_FINISHED
    with pytest.raises(JobNotFound):
        app.cancel("0123456789abcdef01234567")


def test_cancel_running_job_is_seen_within_a_heartbeat_and_ends_cancelled(app: App) -> None:
    seen = threading.Event()

    @app.task(name="export")
    def export() -> str:
        ctx = current_job()
        assert ctx is not None
        while not ctx.is_cancelled():
            time.sleep(0.01)
        seen.set()
        raise RuntimeError(f"stopped: {ctx.cancel_reason}")  # raising still ends cancelled

    job = export.schedule()
    runner = app.runner(workers=1, heartbeat_interval=0.05).start()
    wait_for(lambda: job.refresh().status is JobStatus.RUNNING)
    assert app.cancel(job.id) is Cancellation.REQUESTED
    assert seen.wait(5)
    assert job.wait(timeout=5).status is JobStatus.CANCELLED
    assert job.attempts == 1
    runner.stop()


# Timeouts ---------------------------------------------------------------------------------------------


def test_timeout_interrupts_a_pure_python_loop_and_follows_retry_policy(app: App) -> None:
    caught: list[str] = []

    @app.task(name="spin", timeout=0.2, retry=RetryPolicy(retries=1, delay=0))
    def spin() -> None:
        try:
            while True:
                pass
        except JobTimeout:
            ctx = current_job()
            caught.append(ctx.cancel_reason if ctx else "?")
            raise

    job = spin.schedule()
    runner = app.runner(workers=1).start()
    job.wait(timeout=10)
    runner.stop()
    assert job.status is JobStatus.FAILED and job.attempts == 2  # retried once, then failed
    assert job.error.type == "JobTimeout" and "timeout of 0.2 s" in job.error.message
    assert caught == ["timeout", "timeout"]


def test_a_cooperative_task_sees_its_timeout_as_cancellation(app: App) -> None:
    @app.task(name="polite", timeout=0.2, retry=0)
    def polite() -> str:
        ctx = current_job()
        assert ctx is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                time.sleep(0.01)
            except JobTimeout:
                return "swallowed"  # even if it swallows the interrupt, the job failed
        return "never"

    job = polite.schedule()
    runner = app.runner(workers=1).start()
    job.wait(timeout=10)
    runner.stop()
    assert job.status is JobStatus.FAILED and job.error.type == "JobTimeout"


# Queries, updates, stats ---------------------------------------------------------------------------------


def test_get_jobs_filters_sorts_and_pages_stably(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    a = app.task(name="a")(lambda: None)
    b = app.task(name="b", queue="q2")(lambda: None)
    for _ in range(7):
        a.schedule()
        b.schedule()
    clock.advance(seconds=1)
    assert app.count_jobs() == 14
    assert app.count_jobs(task="a") == 7 and app.count_jobs(queue="q2") == 7
    page1 = app.get_jobs(task="a", sort=("created_at", 1), limit=3)
    page2 = app.get_jobs(task="a", sort=("created_at", 1), limit=3, skip=3)
    page3 = app.get_jobs(task="a", sort=("created_at", 1), limit=3, skip=6)
    ids = [j.id for j in page1 + page2 + page3]
    assert len(ids) == 7 == len(set(ids))  # same timestamps, still no repeats or gaps
    drain(app)
    assert app.count_jobs(status="completed") == 14
    assert app.count_jobs(status=["failed", "pending"]) == 0
    with pytest.raises(ConfigurationError, match="unknown status 'done'"):
        app.get_jobs(status="done")
    with pytest.raises(ConfigurationError, match="sort"):
        app.get_jobs(sort=("args", 1))


def test_update_job_changes_pending_jobs_only(app: App) -> None:
    inside, release = threading.Event(), threading.Event()
    app.task(name="t")(lambda n: n)

    @app.task(name="hold")
    def hold() -> None:
        inside.set()
        release.wait(10)

    job = app.get_task("t").configure(delay=3600).schedule(1)
    updated = app.update_job(job.id, priority=2, args=[5], delay=0)
    assert (updated.priority, updated.args) == (2, [5]) and updated.run_at <= app.now()
    with pytest.raises(ConfigurationError, match="priority"):
        app.update_job(job.id, priority=42)
    with pytest.raises(ConfigurationError, match="cannot change status"):
        app.update_job(job.id, status="completed")
    running = hold.schedule()
    runner = app.runner(workers=1, queues=["default"]).start()
    assert inside.wait(10)
    with pytest.raises(JobStateError, match="is running"):
        app.update_job(running.id, priority=1)
    release.set()
    running.wait(timeout=10)
    runner.stop()


def test_retry_job_brings_back_a_failed_job(app: App) -> None:
    attempts: list[int] = []

    @app.task(name="t", retry=0)
    def t() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("first time")
        return "second time"

    job = t.schedule()
    drain(app)
    assert job.refresh().status is JobStatus.FAILED
    again = app.retry_job(job.id)
    assert again.status is JobStatus.PENDING and again.attempts == 0
    drain(app)
    assert job.refresh().status is JobStatus.COMPLETED and job.result == "second time"
    with pytest.raises(JobStateError, match="only failed, cancelled or expired"):
        app.retry_job(job.id)


def test_progress_is_visible_on_the_job(app: App) -> None:
    step = threading.Event()
    go_on = threading.Event()

    @app.task(name="copy")
    def copy() -> None:
        ctx = current_job()
        assert ctx is not None
        assert ctx.set_progress(0.4, "copied 400/1000")
        step.set()
        go_on.wait(10)

    job = copy.schedule()
    runner = app.runner(workers=1).start()
    assert step.wait(10)
    progress = job.refresh().progress
    assert progress is not None and progress.value == 0.4 and progress.message == "copied 400/1000"
    go_on.set()
    job.wait(timeout=10)
    runner.stop()


def test_stats_counts_by_task_and_status(app: App) -> None:
    app.task(name="ok")(lambda: 1)
    app.task(name="bad", retry=0)(lambda: 1 / 0)
    for _ in range(3):
        app.schedule("ok")
    app.schedule("bad")
    app.get_task("ok").configure(delay=3600).schedule()
    drain(app)
    stats = app.stats()
    assert stats["by_task"] == {"ok": {"completed": 3, "pending": 1}, "bad": {"failed": 1}}
    assert stats["totals"]["completed"] == 3 and stats["totals"]["failed"] == 1
    assert stats["oldest_due"] is None and stats["running"] == []
    assert stats["backlog"] == {}  # nothing due
    early = app.now() - timedelta(seconds=30)
    app.get_task("ok").configure(queue="q", run_at=early).schedule()
    app.get_task("ok").configure(queue="q").schedule()
    backlog = app.stats()["backlog"]
    assert list(backlog) == ["q"] and backlog["q"]["due"] == 2
    assert backlog["q"]["oldest_run_at"] == early and backlog["q"]["late_seconds"] >= 30
    app.cancel_jobs(queue="q")
    app.get_task("ok").schedule()
    claim = app.runner(workers=1).claim_next()
    assert claim is not None
    assert [r["id"] for r in app.stats()["running"]] == [claim.job_id]
    assert app.stats(running=False)["running"] == []


# Retention ----------------------------------------------------------------------------------------------


def test_finished_jobs_get_delete_at_from_the_retention_settings(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock, keep_completed=timedelta(hours=1), keep_failed=timedelta(days=2))
    app.task(name="ok")(lambda: 1)
    app.task(name="bad", retry=0)(lambda: 1 / 0)
    ok, bad = app.schedule("ok"), app.schedule("bad")
    waiting = app.get_task("ok").configure(delay=60).schedule()
    drain(app)
    assert ok.refresh().delete_at == ok.finished_at + timedelta(hours=1)
    assert bad.refresh().delete_at == bad.finished_at + timedelta(days=2)
    assert waiting.refresh().delete_at is None  # only finished jobs expire
    forever = make_app(clock=clock, keep_completed=None)
    forever.task(name="ok")(lambda: 1)
    kept = forever.schedule("ok")
    drain(forever)
    assert kept.refresh().status is JobStatus.COMPLETED and kept.delete_at is None


def test_purge_deletes_old_finished_jobs_only(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    app.task(name="ok")(lambda: 1)
    old = app.schedule("ok")
    drain(app)
    clock.advance(days=8)
    recent = app.schedule("ok")
    drain(app)
    waiting = app.get_task("ok").configure(delay=60).schedule()
    assert app.purge(status="completed", older_than=timedelta(days=7)) == 1
    assert app.get_job(old.id) is None
    assert app.get_job(recent.id) is not None and app.get_job(waiting.id) is not None
    with pytest.raises(ConfigurationError, match="only final statuses"):
        app.purge(status="pending")


# Events --------------------------------------------------------------------------------------------------


def test_events_follow_a_job_through_retry_to_success(app: App) -> None:
    names: list[tuple[str, str | None]] = []
    for name in (
        "job:created",
        "job:start",
        "job:retry",
        "job:success",
        "job:fail",
        "runner:start",
        "runner:stop",
    ):
        app.on(name, lambda e: names.append((e.name, type(e.error).__name__ if e.error else None)))

    @app.task(name="t", retry=1)
    def t() -> str:
        ctx = current_job()
        if ctx and ctx.attempt == 1:
            raise OSError("once")
        return "ok"

    runner = app.runner(workers=1)
    runner.start()
    t.schedule().wait(timeout=10)
    runner.stop()
    assert names == [
        ("runner:start", None),
        ("job:created", None),
        ("job:start", None),
        ("job:retry", "OSError"),
        ("job:start", None),
        ("job:success", None),
        ("runner:stop", None),
    ]
    with pytest.raises(ConfigurationError, match="unknown event"):
        app.on("job:exploded", print)
