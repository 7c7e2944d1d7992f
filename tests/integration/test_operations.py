"""Operating the system: bulk retry/cancel/purge by filter, pause and resume, schedule
edits at runtime (and what a deploy does with them), throughput."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest

from mongosched import App, Event, JobStatus
from mongosched.errors import ConfigurationError, JobNotFound, JobStateError
from mongosched.store import schedule_id
from mongosched.testing import FakeClock, drain
from tests.support.waiting import wait_for

START = datetime(2031, 3, 3, 8, 0, tzinfo=timezone.utc)  # ahead of real time (TTL)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def failing_app(make_app: Callable[..., App], clock: FakeClock) -> App:
    app = make_app(clock=clock)

    @app.task(name="boom", retry=0)
    def boom(kind: str) -> None:
        raise {"value": ValueError, "key": KeyError}[kind](kind)

    @app.task(name="ok")
    def ok() -> str:
        return "ok"

    return app


# Bulk ------------------------------------------------------------------------------------------
def test_retry_jobs_by_filter_in_batches(make_app: Callable[..., App], clock: FakeClock) -> None:
    app = failing_app(make_app, clock)
    for _ in range(7):
        app.schedule("boom", "value")
    app.schedule("boom", "key")
    app.schedule("ok")
    drain(app)
    assert app.count_jobs(status="failed") == 8
    assert app.count_jobs(error_type="ValueError") == 7
    assert app.retry_jobs(error_type="ValueError", dry_run=True) == 7
    assert app.count_jobs(status="failed") == 8  # a dry run changes nothing
    assert app.retry_jobs(task="boom", error_type="ValueError", batch_size=3) == 7
    assert app.count_jobs(status="pending") == 7
    again = app.get_jobs(status="pending", limit=0)
    assert all(j.attempts == 0 and j.run_at == clock() for j in again)
    assert app.retry_jobs(task="boom", error_type="ValueError") == 0  # they are pending
    with pytest.raises(ConfigurationError, match="retry_jobs: only failed, cancelled or expired"):
        app.retry_jobs(status="completed")
    with pytest.raises(ConfigurationError, match="unknown status"):
        app.retry_jobs(status="broken")


def test_retry_jobs_runs_expired_jobs_again_as_retry_job_does(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    """Bulk retry takes the statuses a single retry takes: an expired job too."""
    app = make_app(clock=clock)
    ran: list[int] = []
    task = app.task(name="t")(ran.append)
    late = [task.configure(expires=timedelta(seconds=1)).schedule(n) for n in range(3)]
    clock.advance(seconds=5)
    drain(app)
    assert app.count_jobs(status="expired") == 3 and ran == []
    assert app.retry_jobs(status="expired") == 3
    assert all(job.refresh().status is JobStatus.PENDING for job in late)
    drain(app)
    assert sorted(ran) == [0, 1, 2]


def test_retry_jobs_by_time_range(make_app: Callable[..., App], clock: FakeClock) -> None:
    app = failing_app(make_app, clock)
    app.schedule("boom", "value")
    drain(app)
    clock.advance(minutes=10)
    late = app.schedule("boom", "value")
    drain(app)
    since = START + timedelta(minutes=5)
    assert app.count_jobs(finished_after=since) == 1
    assert app.count_jobs(created_before=since) == 1
    assert app.retry_jobs(finished_after=since) == 1
    assert late.refresh().status is JobStatus.PENDING
    with pytest.raises(ConfigurationError, match="finished_after must be timezone-aware"):
        app.retry_jobs(finished_after=datetime(2031, 1, 1))
    for call in (app.get_jobs, app.count_jobs, app.retry_jobs, app.cancel_jobs, app.purge_jobs):
        with pytest.raises(ConfigurationError, match=f"{call.__name__}: unknown filter 'stauts'"):
            call(stauts="failed")  # type: ignore[call-arg]


def test_cancel_jobs_cancels_waiting_and_asks_running(make_app: Callable[..., App]) -> None:
    app = make_app()
    inside, release = threading.Event(), threading.Event()

    @app.task(name="slow")
    def slow() -> None:
        inside.set()
        release.wait(10)

    @app.task(name="later")
    def later() -> None: ...

    running = slow.schedule()
    runner = app.runner(workers=1).start()
    assert inside.wait(10)
    waiting = [later.configure(delay=3600).schedule() for _ in range(5)]
    assert app.cancel_jobs(dry_run=True) == 6
    assert app.cancel_jobs(batch_size=2) == 6
    assert all(j.refresh().status is JobStatus.CANCELLED for j in waiting)
    assert running.refresh().cancel_requested
    release.set()
    assert wait_for(lambda: running.refresh().status is JobStatus.CANCELLED)
    runner.stop()
    with pytest.raises(ConfigurationError, match="finished jobs cannot be cancelled"):
        app.cancel_jobs(status="failed")


def test_purge_jobs_deletes_finished_jobs_only(make_app: Callable[..., App]) -> None:
    app = make_app()
    app.task(name="ok")(lambda: None)
    app.task(name="boom", retry=0)(lambda: 1 / 0)
    for _ in range(3):
        app.schedule("ok")
        app.schedule("boom")
    drain(app)
    waiting = app.get_task("ok").configure(delay=60).schedule()
    assert app.purge_jobs(status="failed", dry_run=True) == 3
    assert app.purge_jobs(task="boom") == 3
    assert app.count_jobs() == 4
    assert app.purge_jobs(error_type="ZeroDivisionError") == 0
    assert app.purge_jobs(batch_size=1) == 3
    assert [j.id for j in app.get_jobs()] == [waiting.id]
    with pytest.raises(ConfigurationError, match="only finished jobs can be purged"):
        app.purge_jobs(status="pending")


def test_throughput_counts_finished_jobs_per_bucket(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = failing_app(make_app, clock)
    app.schedule("ok")
    app.schedule("boom", "key")
    drain(app)
    clock.advance(minutes=1, seconds=30)
    app.schedule("ok")
    drain(app)
    clock.advance(seconds=10)
    rows = app.throughput(START, timedelta(minutes=1))
    assert rows == [(START, 1, 1), (START + timedelta(minutes=1), 1, 0)]


# Pause and resume ----------------------------------------------------------------------------
def test_pause_a_task_or_queue_and_resume(make_app: Callable[..., App]) -> None:
    app = make_app()
    events: list[Event] = []
    app.on("control:pause", events.append)
    app.on("control:resume", events.append)
    app.task(name="a")(lambda: "a")
    app.task(name="b")(lambda: "b")
    app.pause(task="a")
    app.pause(task="a")  # once
    app.pause(queue="slow")
    a = app.schedule("a")
    b_slow = app.get_task("b").configure(queue="slow").schedule()
    b = app.schedule("b")
    assert drain(app) == 1
    assert b.refresh().status is JobStatus.COMPLETED
    assert a.refresh().status is b_slow.refresh().status is JobStatus.PENDING
    assert [(p.kind, p.name) for p in app.pauses()] == [("queue", "slow"), ("task", "a")]
    assert drain(app, queues=["slow", "default"]) == 0  # a runner with its own queues too
    app.resume(task="a")
    assert drain(app) == 1 and a.refresh().status is JobStatus.COMPLETED
    app.resume(queue="slow")
    assert drain(app) == 1 and b_slow.refresh().status is JobStatus.COMPLETED
    assert app.pauses() == []
    assert [(e.name, e.pause.kind) for e in events if e.pause] == [
        ("control:pause", "task"),
        ("control:pause", "queue"),
        ("control:resume", "task"),
        ("control:resume", "queue"),
    ]
    with pytest.raises(ConfigurationError, match="exactly one of queue, task or schedule"):
        app.pause(queue="x", task="y")
    with pytest.raises(ConfigurationError, match="exactly one"):
        app.resume()


def test_pause_a_label_holds_its_jobs_alone(make_app: Callable[..., App]) -> None:
    """A label (a Django task's path) is paused as a task is: its jobs wait, ``paused``,
    while the task's other jobs run; one scheduled after the pause, claimed by a runner,
    is held too, never run; resuming runs them."""
    app = make_app()
    ran: list[str] = []
    run = app.task(name="run")(ran.append)
    mail = run.configure(label="app.mail").schedule("mail")
    other = run.configure(label="app.other").schedule("other")
    plain = run.schedule("plain")
    assert mail.label == "app.mail" and plain.label is None
    assert app.count_jobs(label="app.mail") == 1
    assert [j.id for j in app.get_jobs(label="app.other")] == [other.id]
    app.pause(task="app.mail")
    assert mail.refresh().status is JobStatus.PAUSED
    late = run.configure(label="app.mail").schedule("late")
    assert drain(app) == 2 and sorted(ran) == ["other", "plain"]
    assert late.refresh().status is JobStatus.PAUSED and late.attempts == 0
    app.resume(task="app.mail")
    assert drain(app) == 2 and sorted(ran) == ["late", "mail", "other", "plain"]
    with pytest.raises(ConfigurationError, match="task 'run': label must be"):
        run.configure(label="").schedule("x")


def test_a_resume_the_runner_has_not_read_yet_leaves_nothing_held(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    """A runner whose pause set still holds a pause that was just lifted (it reads the
    set once per poll interval) claims the label's or schedule's job: its hold is
    checked against the stored pauses, so the job is pending again, not held for good,
    and runs."""
    app = make_app(clock=clock, poll_interval=3600)
    ran: list[str] = []
    run = app.task(name="run")(ran.append)
    app.task(name="tick", every=60)(lambda: ran.append("tick"))
    app.ensure_schedules()
    app.pause(task="app.mail")
    app.pause(schedule="tick")
    runner = app.runner(workers=1)
    runner.claimer.pause_set.refresh(every_queue=True, force=True)  # sees both pauses
    mail = run.configure(label="app.mail").schedule("mail")
    app.resume(task="app.mail")
    app.resume(schedule="tick")
    clock.advance(minutes=1)
    claim, taken = runner.claimer.take()
    assert claim is None and taken  # given back: the set still said paused
    claim, taken = runner.claimer.take()  # the set was read again at once
    assert claim is not None
    runner.claimer.give_back(claim)
    assert mail.refresh().status is JobStatus.PENDING
    tick = app.get_job(schedule_id("tick"))
    assert tick is not None and tick.status is JobStatus.PENDING
    assert drain(app) == 2 and sorted(ran) == ["mail", "tick"]


def test_the_sweep_releases_a_hold_left_with_no_pause_behind_it(
    make_app: Callable[..., App],
) -> None:
    """A process that died between a hold and its check of the pause leaves a job
    held with no pause behind it: the reaper's sweep makes it pending again."""
    app = make_app()
    ran: list[str] = []
    run = app.task(name="run")(ran.append)
    app.pause(task="app.mail")
    mail = run.configure(label="app.mail").schedule("mail")
    app.store.admin.pause_label("app.mail", app.now())
    app.store.admin.remove_pause("task", "app.mail")  # not through resume: nothing released
    assert mail.refresh().status is JobStatus.PAUSED
    assert app.runner().sweep() == 1
    assert mail.refresh().status is JobStatus.PENDING
    assert drain(app) == 1 and ran == ["mail"]


def test_a_running_runner_stops_claiming_within_a_poll_interval(
    make_app: Callable[..., App],
) -> None:
    app = make_app(poll_interval=0.05)
    done: list[int] = []
    app.task(name="t")(done.append)
    runner = app.runner(workers=2).start()
    app.schedule("t", 1)
    wait_for(lambda: done == [1])
    app.pause(queue="default")
    # every runner reads the pause set at most one poll interval later
    wait_for(lambda: runner.claimer.pause_set.queues == {"default"})
    for n in range(5):
        app.schedule("t", n + 2)
    assert not wait_for_quiet(lambda: len(done) > 1, 0.3)
    app.resume(queue="default")
    wait_for(lambda: len(done) == 6)
    runner.stop()


def wait_for_quiet(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether ``condition`` became true within ``seconds`` (a bounded negative check)."""
    try:
        wait_for(condition, timeout=seconds)
    except AssertionError:
        return False
    return True


def test_pause_a_schedule_and_resume_under_its_misfire_policy(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    ran: list[datetime] = []

    @app.task(name="tick", every=60, misfire="coalesce")
    def tick() -> None:
        ran.append(clock())

    app.ensure_schedules()
    app.pause(schedule="tick")
    row = app.schedules()[0]
    assert row["paused"] is True and row["status"] == "paused"
    clock.advance(minutes=5)
    assert drain(app) == 0
    app.resume(schedule="tick")
    assert app.schedules()[0]["paused"] is False
    assert drain(app) == 1  # coalesced: one run for the missed slots
    assert ran == [START + timedelta(minutes=5)]
    after = app.get_job(schedule_id("tick"))
    assert after is not None and after.status is JobStatus.PENDING
    assert after.run_at == START + timedelta(minutes=6)


@contextmanager
def tick_running(app: App, clock: FakeClock) -> Iterator[None]:
    """Schedule ``tick`` (every 60 s) on ``app``, start a runner and hold the body while its
    first run is inside; on exit, let that run end and wait until the schedule is pending
    again, then stop the runner."""
    inside, release = threading.Event(), threading.Event()

    @app.task(name="tick", every=60)
    def tick() -> None:
        inside.set()
        release.wait(10)

    app.ensure_schedules()
    clock.advance(minutes=1)
    runner = app.runner(workers=1).start()
    try:
        assert inside.wait(10)
        yield
        release.set()
        wait_for(lambda: app.get_job(schedule_id("tick")).status is JobStatus.PENDING)  # type: ignore[union-attr]
    finally:
        release.set()
        runner.stop()


def test_a_schedule_paused_while_it_runs_stops_after_the_run(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    with tick_running(app, clock):
        app.pause(schedule=schedule_id("tick"))
    clock.advance(minutes=1)  # its next slot is due; a runner that claims it holds it
    assert drain(app) == 0
    held = app.get_job(schedule_id("tick"))
    assert held is not None and held.status is JobStatus.PAUSED and held.attempts == 0


# Schedule edits --------------------------------------------------------------------------------
def test_update_schedule_recomputes_the_next_slot(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    events: list[Event] = []
    app.on("schedule:update", events.append)
    app.task(name="tick", cron="0 * * * *")(lambda: None)
    app.ensure_schedules()
    row = app.update_schedule("tick", cron="*/15 * * * *", timezone="Europe/Berlin")
    assert row["rule"] == "*/15 * * * *" and row["timezone"] == "Europe/Berlin"
    assert row["next_run"] == START + timedelta(minutes=15)
    assert row["edited_at"] == START and row["paused"] is False
    row = app.update_schedule(schedule_id("tick"), priority=1, queue="ops")
    assert (row["priority"], row["queue"], row["rule"]) == (1, "ops", "*/15 * * * *")
    assert len(events) == 2 and events[0].job is not None
    row = app.update_schedule("tick", every=timedelta(minutes=2))
    assert row["rule"] == "every 120.0s" and row["next_run"] == START + timedelta(minutes=2)
    with pytest.raises(ConfigurationError, match="timezone applies only with cron"):
        app.update_schedule("tick", timezone="UTC")
    with pytest.raises(ConfigurationError, match="give at least one"):
        app.update_schedule("tick")
    with pytest.raises(JobNotFound):
        app.update_schedule("nothing", priority=1)
    with pytest.raises(ConfigurationError, match="priority"):
        app.update_schedule("tick", priority=99)


def test_update_schedule_refuses_a_running_schedule(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    with tick_running(app, clock):
        with pytest.raises(JobStateError, match="try again when the run ends"):
            app.update_schedule("tick", every=30)
    assert app.update_schedule("tick", every=30)["rule"] == "every 30.0s"


def test_a_deploy_keeps_an_edit_until_the_code_changes(
    make_app: Callable[..., App], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    first = make_app(clock=clock)
    first.task(name="tick", cron="0 * * * *")(lambda: None)
    first.ensure_schedules()
    first.update_schedule("tick", cron="30 * * * *")
    # the next deploy declares the same: the edit stays, and the log says so
    same = make_app(clock=clock)
    same.task(name="tick", cron="0 * * * *")(lambda: None)
    with caplog.at_level(logging.INFO, logger="mongosched"):
        same.ensure_schedules()
    assert same.schedules()[0]["rule"] == "30 * * * *"
    assert "keeps the operator's edit" in caplog.text
    caplog.clear()
    # a deploy whose code changed the declaration wins, and says it replaced the edit
    changed = make_app(clock=clock)
    changed.task(name="tick", cron="0 */2 * * *")(lambda: None)
    with caplog.at_level(logging.INFO, logger="mongosched"):
        changed.ensure_schedules()
    row = changed.schedules()[0]
    assert row["rule"] == "0 */2 * * *" and row["edited_at"] is None
    assert "replaces the edit" in caplog.text


# Workers -------------------------------------------------------------------------------------
def test_runners_register_refresh_go_stale_and_leave(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    inside, release = threading.Event(), threading.Event()

    @app.task(name="slow")
    def slow() -> None:
        inside.set()
        release.wait(10)

    runner = app.runner(workers=2, name="r1")
    runner.registration.interval = 0.05
    runner.start()
    (entry,) = wait_for(app.live_runners)
    assert (entry.name, entry.workers, entry.queues, entry.in_flight) == ("r1", 2, None, 0)
    assert entry.tasks == ("slow",) and entry.started_at == START and not entry.stale
    assert entry.pid > 0 and entry.host and entry.version
    slow.schedule()
    assert inside.wait(10)
    assert wait_for(lambda: app.live_runners()[0].in_flight == 1)
    clock.advance(seconds=5)
    assert wait_for(lambda: app.live_runners()[0].last_seen == START + timedelta(seconds=5))
    release.set()
    runner.stop()
    assert app.live_runners() == []
    # a runner that died without stopping: stale after a while, forgotten later
    dead = app.runner(name="dead")
    dead.registration.refresh()
    clock.advance(seconds=20)
    (gone,) = app.live_runners()
    assert gone.name == "dead" and gone.stale
    clock.advance(minutes=10)
    assert app.live_runners() == []
