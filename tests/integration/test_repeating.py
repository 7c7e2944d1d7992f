"""Repeating jobs in the running system: one schedule per task however many instances
start, exact slots, misfire policies, no overlap, retries, cancellation, rule changes."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mongosched import App, Cancellation, Cron, Every, JobStatus, current_job
from mongosched.errors import ConfigurationError, InvalidSchedule
from mongosched.store import schedule_id
from mongosched.testing import FakeClock, drain
from tests.support.tasks import Recorder
from tests.support.waiting import wait_for

START = datetime(2031, 3, 3, 8, 0, tzinfo=timezone.utc)  # a Monday, ahead of real time (TTL)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def slots_run(app: App, task: str) -> list[datetime]:
    return [c.scheduled_for for c in app._ran[task]]  # type: ignore[attr-defined]


def recording_app(make_app: Callable[..., App], clock: FakeClock, **task_options: Any) -> App:
    """An app whose task ``tick`` records the slot each run was for."""
    app = make_app(clock=clock)
    app._ran = {"tick": []}  # type: ignore[attr-defined]

    @app.task(name="tick", **task_options)
    def tick() -> str:
        ctx = current_job()
        assert ctx is not None
        app._ran["tick"].append(ctx)  # type: ignore[attr-defined]
        return "ok"

    return app


def test_ten_instances_starting_at_once_make_one_schedule_and_one_run_per_slot(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    runs = Recorder()
    apps = [make_app(clock=clock) for _ in range(10)]
    for app in apps:
        app.task(name="hourly", cron="0 * * * *")(lambda: runs.enter(current_job().scheduled_for))  # type: ignore[union-attr]
    barrier = threading.Barrier(10)

    def start(app: App) -> None:
        barrier.wait()
        app.runner(workers=1).prepare()  # what each runner does at start

    threads = [threading.Thread(target=start, args=(a,)) for a in apps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert apps[0].count_jobs(task="hourly") == 1
    job = apps[0].get_job(schedule_id("hourly"))
    assert job is not None and job.run_at == START + timedelta(hours=1)
    clock.advance(hours=1)
    barrier = threading.Barrier(10)

    def work(app: App) -> None:
        barrier.wait()
        drain(app)

    threads = [threading.Thread(target=work, args=(a,)) for a in apps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert runs.calls == [START + timedelta(hours=1)]  # one run for the slot, in all
    assert job.refresh().run_at == START + timedelta(hours=2)


def test_slots_come_from_the_nominal_slot_not_the_finish_time(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = recording_app(make_app, clock, every=timedelta(minutes=5))
    app.ensure_schedules()
    rng = random.Random(5)
    for _ in range(40):
        clock.set(app.get_job(schedule_id("tick")).run_at + timedelta(seconds=rng.uniform(0, 200)))
        assert drain(app) == 1
    slots = slots_run(app, "tick")
    assert slots == [START + timedelta(minutes=5 * (n + 1)) for n in range(40)]  # zero drift


def test_misfire_coalesce_runs_once_after_an_outage_then_returns_to_its_slots(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = recording_app(make_app, clock, cron="0 9 * * *", misfire="coalesce")
    app.ensure_schedules()
    clock.advance(days=3, hours=3)  # down from 08:00 day 0 to 11:00 day 3
    assert drain(app) == 1
    job = app.get_job(schedule_id("tick"))
    assert slots_run(app, "tick") == [START.replace(hour=9) + timedelta(days=3)]
    assert job.run_at == START.replace(hour=9) + timedelta(days=4)


def test_misfire_all_runs_each_missed_slot_once_bounded(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = recording_app(make_app, clock, cron="0 9 * * *", misfire="all", max_catchup=3)
    app.ensure_schedules()
    clock.advance(days=5, hours=3)  # slots on days 0..5 missed: 6, bounded to the last 3
    drain(app)
    nine = START.replace(hour=9)
    assert slots_run(app, "tick") == [nine + timedelta(days=d) for d in (3, 4, 5)]
    assert app.get_job(schedule_id("tick")).run_at == nine + timedelta(days=6)


def test_misfire_skip_runs_no_missed_slot(make_app: Callable[..., App], clock: FakeClock) -> None:
    app = recording_app(make_app, clock, cron="0 9 * * *", misfire="skip")
    app.ensure_schedules()
    clock.advance(days=3, hours=3)
    drain(app)
    assert slots_run(app, "tick") == []
    assert app.get_job(schedule_id("tick")).run_at == START.replace(hour=9) + timedelta(days=4)
    clock.set(START.replace(hour=9) + timedelta(days=4, seconds=2))  # on time: runs
    drain(app)
    assert slots_run(app, "tick") == [START.replace(hour=9) + timedelta(days=4)]


def test_a_repeating_job_never_overlaps_itself(app: App) -> None:
    recorder = Recorder()
    done = threading.Event()

    @app.task(name="slow_tick", every=0.02)
    def slow_tick() -> None:
        recorder.enter(1)
        done.wait(0.1)  # each run lasts longer than the interval
        recorder.leave()

    runner = app.runner(workers=4).start()
    wait_for(lambda: len(recorder.calls) >= 4, message="4 runs")
    runner.stop()
    assert recorder.peak == 1


def test_failed_run_retries_then_the_schedule_goes_on_with_the_error_recorded(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    attempts: list[int] = []

    @app.task(name="flaky", every=timedelta(hours=1), retry=1)
    def flaky() -> None:
        ctx = current_job()
        attempts.append(ctx.attempt if ctx else 0)
        raise RuntimeError("down")

    app.ensure_schedules()
    clock.advance(hours=1)
    assert drain(app) == 2  # attempt 1, retry (no delay), attempt 2
    job = app.get_job(schedule_id("flaky"))
    assert attempts == [1, 2]
    assert job.status is JobStatus.PENDING and job.attempts == 0
    assert job.run_at == START + timedelta(hours=2)
    assert job.last_run is not None and job.last_run.error is not None
    assert job.last_run.status is JobStatus.FAILED and job.last_run.error.message == "down"


def test_a_coalesced_run_that_retries_keeps_the_slot_it_ran_for(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    slots: list[datetime | None] = []

    @app.task(name="late", cron="0 9 * * *", retry=1)
    def late() -> None:
        ctx = current_job()
        slots.append(ctx.scheduled_for if ctx else None)
        if len(slots) == 1:
            raise RuntimeError("first attempt fails")

    app.ensure_schedules()
    clock.advance(days=2, hours=2)  # slots on days 0, 1 and 2 are due: coalesced to day 2
    assert drain(app) == 2
    day2 = START.replace(hour=9) + timedelta(days=2)
    assert slots == [day2, day2]  # the retry ran the same slot, not the stale day-0 one
    job = app.get_job(schedule_id("late"))
    assert job.last_run is not None
    assert job.last_run.slot == day2 and job.last_run.status is JobStatus.COMPLETED
    assert job.run_at == day2 + timedelta(days=1)


def test_cancelling_a_repeating_job_stops_it_for_good(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = recording_app(make_app, clock, every=timedelta(minutes=1))
    app.ensure_schedules()
    assert app.cancel(schedule_id("tick")) is Cancellation.CANCELLED
    clock.advance(minutes=10)
    app.runner(workers=1).prepare()  # a runner's start does not bring it back
    assert drain(app) == 0 and slots_run(app, "tick") == []
    assert app.get_job(schedule_id("tick")).status is JobStatus.CANCELLED


def test_a_changed_rule_in_code_is_picked_up_at_the_next_start(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    old = make_app(clock=clock)
    old.task(name="report", cron="0 9 * * *")(lambda: None)
    old.runner(workers=1).prepare()
    assert old.get_job(schedule_id("report")).run_at == START.replace(hour=9)
    new = make_app(clock=clock)  # the next deploy
    new.task(name="report", cron="30 8 * * *", priority=2)(lambda: None)
    new.runner(workers=1).prepare()
    job = new.get_job(schedule_id("report"))
    assert job.repeat["cron"] == "30 8 * * *" and job.priority == 2
    assert job.run_at == START.replace(hour=8, minute=30)
    assert new.count_jobs(task="report") == 1


def test_dynamic_repeating_jobs_with_payload_and_dedupe(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    seen: list[tuple[str, datetime | None]] = []

    @app.task(name="poll")
    def poll(feed: str) -> None:
        ctx = current_job()
        seen.append((feed, ctx.scheduled_for if ctx else None))

    news = poll.configure(repeat=Every(seconds=30), dedupe_key="poll:news")
    job = news.schedule("news")
    again = news.schedule("news")
    assert again.id == job.id
    daily = poll.configure(repeat=Cron("0 6 * * 1")).schedule("sports")
    assert job.run_at == START + timedelta(seconds=30)
    assert daily.run_at == START.replace(day=10, hour=6)  # next Monday 06:00
    clock.advance(seconds=61)
    drain(app)
    assert seen == [("news", START + timedelta(seconds=60))]  # two slots due: coalesced
    assert job.refresh().run_at == START + timedelta(seconds=90)
    rows = {row["task"] + ":" + str(row["id"]): row for row in app.schedules()}
    assert len(rows) == 2
    assert app.cancel(job.id) is Cancellation.CANCELLED
    assert news.schedule("news").id != job.id


def test_schedules_lists_every_repeating_job(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    app.task(name="daily", cron="0 9 * * *", timezone="Asia/Kolkata")(lambda: None)
    app.task(name="often", every=timedelta(minutes=5))(lambda: None)
    app.task(name="oneoff")(lambda: None)
    app.ensure_schedules()
    app.schedule("oneoff")
    rows = {row["task"]: row for row in app.schedules()}
    assert set(rows) == {"daily", "often"}
    assert rows["daily"]["rule"] == "0 9 * * *" and rows["daily"]["timezone"] == "Asia/Kolkata"
    assert rows["often"]["next_run"] == START + timedelta(minutes=5)
    assert rows["daily"]["last_run"] is None


@pytest.mark.parametrize(
    "options, message",
    [
        ({"cron": "61 * * * *"}, "61"),
        ({"cron": "not a cron"}, "not a cron"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "Mars/Olympus"),
        ({"every": 0}, "every"),
        ({"every": -5}, "every"),
        ({"cron": "0 9 * * *", "misfire": "sometimes"}, "misfire|policy"),
    ],
)
def test_bad_rules_are_refused_at_decoration(app: App, options: dict, message: str) -> None:
    with pytest.raises(InvalidSchedule, match=f"task 'bad'.*({message})"):
        app.task(name="bad", **options)(lambda: None)
    assert "bad" not in app.tasks


def test_repeat_must_be_a_rule(app: App) -> None:
    app.task(name="t")(lambda: None)
    with pytest.raises(ConfigurationError, match="repeat must be a Cron or Every"):
        app.get_task("t").configure(repeat="0 9 * * *").schedule()
    with pytest.raises(ConfigurationError, match="task 'd': repeat must be a Cron or Every"):
        app.task(name="d", repeat="0 9 * * *")(lambda: None)  # type: ignore[arg-type]


def test_the_decorator_takes_repeat_as_configure_does(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    app.task(name="often", repeat=Every(seconds=30))(lambda: None)
    app.task(name="daily", repeat=Cron("0 9 * * *", timezone="Europe/Berlin"))(lambda: None)
    app.task(name="spelled", cron="0 9 * * *", timezone="Europe/Berlin")(lambda: None)
    assert app.tasks["often"].rule == Every(30)
    assert app.tasks["daily"].repeat_document() == app.tasks["spelled"].repeat_document()
    app.ensure_schedules()
    assert app.get_job(schedule_id("often")).run_at == START + timedelta(seconds=30)


@pytest.mark.parametrize(
    "options", [{"cron": "0 9 * * *"}, {"every": 5}, {"timezone": "Europe/Berlin"}]
)
def test_repeat_with_cron_every_or_timezone_is_refused(app: App, options: dict) -> None:
    with pytest.raises(ConfigurationError, match="task 'both': give one of repeat, cron"):
        app.task(name="both", repeat=Every(60), **options)(lambda: None)


def test_ensure_schedules_creates_once_and_only_for_the_queues_asked(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    app.task(name="nightly", cron="0 2 * * *", queue="reports")(lambda: None)
    app.task(name="often", every=60)(lambda: None)
    assert app.ensure_schedules(queues=["default"]) == ["often"]
    assert app.get_job(schedule_id("nightly")) is None
    assert app.ensure_schedules() == ["nightly"]
    assert app.ensure_schedules() == []
    assert app.count_jobs() == 2
