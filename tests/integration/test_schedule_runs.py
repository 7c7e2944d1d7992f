"""Repeating jobs' runs in the running system: jitter, overlap policies, missed slots
made visible, pause after failed runs; each across several runners of one store."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mongosched import App, current_job
from mongosched._core.runs import jitter_offset
from mongosched.errors import InvalidSchedule, ScheduleFinished
from mongosched.events import Event
from mongosched.observe.metrics import instrument, render
from mongosched.operations.admin import AdminOperations
from mongosched.store import schedule_id
from mongosched.testing import FakeClock, drain
from tests.support.tasks import Recorder
from tests.support.waiting import wait_for

START = datetime(2031, 3, 3, 8, 0, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def runners(
    make_app: Callable[..., App],
    clock: FakeClock,
    body: Callable[[], Any] = lambda: None,
    count: int = 2,
    **options: Any,
) -> tuple[list[App], list[datetime]]:
    """``count`` apps on one store (each as one runner would be), each with task
    ``tick`` declared with ``options``; returns them and the slots run, in order."""
    ran: list[datetime] = []
    apps = []
    for _ in range(count):
        app = make_app(clock=clock)

        @app.task(name="tick", **options)
        def tick() -> None:
            ctx = current_job()
            assert ctx is not None and ctx.scheduled_for is not None
            ran.append(ctx.scheduled_for)
            body()

        apps.append(app)
    apps[0].ensure_schedules()
    return apps, ran


def drain_all(apps: list[App]) -> int:
    return sum(drain(app) for app in apps)


def test_jitter_starts_each_slot_once_at_the_same_offset_in_every_runner(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    jitter = timedelta(minutes=20)
    apps, ran = runners(make_app, clock, cron="0 * * * *", jitter=jitter)
    starts = []
    for hour in range(1, 6):
        slot = START + timedelta(hours=hour)
        offset = jitter_offset(schedule_id("tick"), slot, jitter)
        job = apps[1].get_job(schedule_id("tick"))
        assert job.scheduled_for == slot and job.run_at == slot + offset
        clock.set(slot + offset - timedelta(milliseconds=1))
        assert drain_all(apps) == 0  # not before its offset, in any runner
        clock.set(slot + offset)
        assert drain_all(apps) == 1  # then once, in all
        starts.append(offset)
    assert ran == [START + timedelta(hours=h) for h in range(1, 6)]
    assert len(set(starts)) == 5 and all(timedelta(0) <= o < jitter for o in starts)


def long_runs(clock: FakeClock, lasting: timedelta) -> Callable[[], None]:
    """A task body whose run lasts ``lasting`` on the fake clock."""
    return lambda: clock.advance(lasting)


@pytest.mark.parametrize("misfire", ["skip", "coalesce"])
def test_a_slot_whose_jittered_start_has_not_come_is_not_run_early_nor_the_last_missed(
    make_app: Callable[..., App], clock: FakeClock, misfire: str
) -> None:
    # Found by the model's machine (finding S1): picked up after 08:02 but before
    # 08:02's jittered start, the schedule ran 08:02 early and counted 08:01 missed.
    jitter = timedelta(seconds=45)
    apps, ran = runners(make_app, clock, cron="* * * * *", jitter=jitter, misfire=misfire)
    first, second = START + MINUTE, START + 2 * MINUTE
    offset = jitter_offset(schedule_id("tick"), second, jitter)
    assert offset > timedelta(0)  # 08:02 is due after 08:02
    clock.set(second)  # 08:01 started at most 45 s ago: on time, whatever the policy
    assert drain_all(apps) == 1
    assert ran == [first]
    job = apps[1].get_job(schedule_id("tick"))
    assert job.missed is None
    assert (job.scheduled_for, job.run_at) == (second, second + offset)
    clock.set(second + offset)
    assert drain_all(apps) == 1 and ran == [first, second]


def test_a_backfill_lane_that_ends_failed_keeps_its_failed_runs_in_a_row(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    # Found by the model's machine (finding S2): a lane's last run wrote failures=0.
    def fail() -> None:
        raise RuntimeError("down")

    apps, ran = runners(make_app, clock, fail, cron="0 9 * * *", retry=0)
    nine = START.replace(hour=9)
    [lane] = apps[0].backfill("tick", nine - timedelta(days=3), nine - timedelta(days=1))
    assert drain_all(apps) == 3
    lane.refresh()
    assert lane.status.value == "failed" and lane.last_run is not None
    assert (lane.last_run.slot, lane.last_run.failures) == (nine - timedelta(days=1), 3)


def test_overlap_skip_drops_slots_that_came_due_during_a_run_and_says_so(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    apps, ran = runners(
        make_app, clock, long_runs(clock, timedelta(minutes=2, seconds=30)), cron="* * * * *"
    )
    seen: list[Event] = []
    apps[1].on("schedule:missed", seen.append)
    instrument(apps[1])  # its metrics count from here
    clock.set(START + MINUTE)
    for app in (apps[1], apps[0], apps[1]):  # runs alternate between the runners
        assert drain(app) == 1
        clock.set(app.get_job(schedule_id("tick")).run_at)
    # 08:01 ran to 08:03:30 (08:02, 08:03 missed); 08:04 to 08:06:30; 08:07 ...
    assert ran == [START + m * MINUTE for m in (1, 4, 7)]
    job = apps[0].get_job(schedule_id("tick"))
    assert job.missed is not None and job.missed.count == 6 and job.missed.reason == "overlap"
    assert job.missed.last_slot == START + 9 * MINUTE
    assert [e.missed for e in seen] == [2, 2]  # the events of apps[1]'s runs
    assert 'mongosched_schedule_missed_slots_total{task="tick"} 4' in render(apps[1])


def test_overlap_buffer_one_runs_once_right_after_a_long_run(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    lasting = timedelta(minutes=2, seconds=30)
    apps, ran = runners(make_app, clock, long_runs(clock, lasting), cron="* * * * *",
                        overlap="buffer_one", misfire="skip", misfire_grace=5)  # fmt: skip
    clock.set(START + MINUTE)
    assert drain(apps[0], limit=1) == 1  # 08:01 runs to 08:03:30
    job = apps[1].get_job(schedule_id("tick"))
    assert job.scheduled_for == START + 3 * MINUTE and job.run_at == clock()
    clock.advance(seconds=2)  # 32 s after 08:03, past the grace, but due at 08:03:30: runs
    assert drain(apps[1], limit=1) == 1
    assert ran == [START + MINUTE, START + 3 * MINUTE]
    job.refresh()
    assert job.missed is not None and (job.missed.count, job.missed.reason) == (3, "overlap")


def test_misfire_drops_are_counted_on_the_schedule_and_sent_as_events(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    apps, ran = runners(make_app, clock, cron="0 9 * * *", misfire="coalesce")
    seen: list[Event] = []
    apps[0].on("schedule:missed", seen.append)
    clock.advance(days=3, hours=3)
    assert drain(apps[0]) == 1
    assert [e.missed for e in seen] == [3]  # days 0, 1, 2 dropped; day 3 ran
    job = apps[1].get_job(schedule_id("tick"))
    assert job.missed is not None
    assert (job.missed.count, job.missed.reason) == (3, "misfire")
    assert job.missed.last_slot == START.replace(hour=9) + timedelta(days=2)
    row = apps[1].schedules()[0]
    assert row["missed"] == 3 and row["missed_reason"] == "misfire"


def test_a_schedule_pauses_itself_after_failed_runs_in_a_row(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    outcomes = iter(["fail", "ok", "fail", "fail", "fail"])

    def body() -> None:
        if next(outcomes) == "fail":
            raise RuntimeError("upstream down")

    apps, ran = runners(make_app, clock, body, every=timedelta(minutes=1), retry=0,
                        pause_after=2)  # fmt: skip
    events: list[Event] = []
    apps[0].on("control:pause", events.append)
    instrument(apps[0])
    for n in range(1, 5):
        clock.set(START + n * MINUTE)
        assert drain(apps[n % 2]) == 1
    # fail, ok (the count starts again), fail, fail: paused by apps[0]'s runner
    schedule = apps[0].schedules()[0]
    assert schedule["paused"] and schedule["status"] == "paused"
    reason = "paused after 2 failed runs in a row (pause_after=2)"
    assert schedule["paused_reason"] == reason
    assert [(p.kind, p.reason) for p in apps[0].pauses()] == [("schedule", reason)]
    assert [e.pause.reason if e.pause else None for e in events] == [reason]
    assert 'mongosched_schedule_pauses_total{schedule="schedule:tick"} 1' in render(apps[0])
    clock.advance(hours=1)
    assert drain_all(apps) == 0  # paused: nothing runs
    apps[0].resume(schedule="tick")
    assert drain_all(apps) == 1 and len(ran) == 5


def test_trigger_runs_a_schedule_once_now_without_moving_its_next_slot(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    apps, ran = runners(make_app, clock, cron="0 9 * * *")
    schedule = apps[0].get_job(schedule_id("tick"))
    clock.advance(minutes=10)
    job = apps[1].trigger_schedule("tick")
    assert job.id != schedule.id and job.scheduled_for == clock()
    assert drain_all(apps) == 1
    assert ran == [clock()] and job.refresh().status.value == "completed"
    assert schedule.refresh().run_at == START.replace(hour=9)  # its slot did not move
    assert schedule.last_run is None


def test_backfill_runs_each_slot_of_a_range_once_and_in_order(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    apps, ran = runners(make_app, clock, cron="0 9 * * *")
    nine = START.replace(hour=9)
    start, end = nine - timedelta(days=5, hours=1), nine - timedelta(days=1)
    lanes = apps[0].backfill("tick", start, end, at_once=2)
    assert [lane.scheduled_for for lane in lanes] == [
        nine - timedelta(days=5),
        nine - timedelta(days=3),
    ]
    again = apps[1].backfill("tick", start, end, at_once=2)  # the same range: not doubled
    assert [j.id for j in again] == [j.id for j in lanes]
    assert drain_all(apps) == 5
    assert ran == [nine - timedelta(days=d) for d in (5, 4, 3, 2, 1)]
    assert {lane.refresh().status.value for lane in lanes} == {"completed"}
    assert apps[0].get_job(schedule_id("tick")).run_at == nine  # its own slot goes on


def test_backfill_of_a_range_again_with_another_at_once_runs_each_slot_once(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    apps, ran = runners(make_app, clock, cron="0 9 * * *")
    nine = START.replace(hour=9)
    start, end = nine - timedelta(days=6), nine - timedelta(days=1)
    first = apps[0].backfill("tick", start, end, at_once=2)
    again = apps[1].backfill("tick", start, end, at_once=3)  # cut another way
    assert {j.id for j in again} <= {j.id for j in first}
    drain_all(apps)
    assert ran == [nine - timedelta(days=d) for d in (6, 5, 4, 3, 2, 1)]


def test_backfill_runs_at_most_at_once_slots_at_a_time(make_app: Callable[..., App]) -> None:
    recorder = Recorder()
    apps = [make_app() for _ in range(2)]
    for app in apps:

        @app.task(name="slow", every=timedelta(hours=1))
        def slow() -> None:
            ctx = current_job()
            assert ctx is not None
            recorder.enter(ctx.scheduled_for)
            deadline, pause = time.monotonic() + 1.0, threading.Event()
            while recorder.running < 3 and time.monotonic() < deadline:
                pause.wait(0.005)  # until the other lanes' runs meet this one
            recorder.leave()

    apps[0].ensure_schedules()
    slot = apps[0].get_job(schedule_id("slow")).scheduled_for
    apps[0].backfill("slow", slot - timedelta(hours=12), slot - timedelta(hours=1), at_once=3)
    for app in apps:
        app.runner(workers=4).start()
    wait_for(lambda: len(recorder.calls) >= 12, message="12 backfilled slots")
    assert recorder.peak == 3
    assert sorted(recorder.counts().values()) == [1] * 12


def ctx_wait(ctx: Any, seconds: float) -> None:
    """Wait until the job is cancelled (seen at a heartbeat) or ``seconds`` passed."""
    deadline = time.monotonic() + seconds
    pause = threading.Event()
    while not ctx.is_cancelled() and time.monotonic() < deadline:
        pause.wait(0.01)


def overlapping(make_app: Callable[..., App], overlap: str) -> tuple[list[App], Recorder]:
    """Two apps with a runner each and a task ``long`` every 50 ms whose runs last
    until cancelled (or 2 s)."""
    recorder = Recorder()
    apps = [make_app(lease_duration=2.0) for _ in range(2)]  # a cancel lands in 2/3 s
    for app in apps:

        @app.task(name="long", every=0.05, overlap=overlap)
        def long() -> None:
            ctx = current_job()
            assert ctx is not None
            recorder.enter(ctx.scheduled_for)
            try:
                ctx_wait(ctx, 2.0)
            finally:
                recorder.leave()

    apps[0].ensure_schedules()
    for app in apps:
        app.runner(workers=4).start()
    return apps, recorder


def test_overlap_allow_starts_each_slot_beside_the_running_ones(
    make_app: Callable[..., App],
) -> None:
    apps, recorder = overlapping(make_app, "allow")
    wait_for(lambda: recorder.peak >= 4, message="4 runs at once")
    assert max(recorder.counts().values()) == 1  # each slot once, across both runners


def test_overlap_cancel_running_cancels_the_running_one_when_a_slot_starts(
    make_app: Callable[..., App],
) -> None:
    apps, recorder = overlapping(make_app, "cancel_running")

    def cancelled() -> int:
        return apps[0].count_jobs(task="long", status="cancelled")

    wait_for(lambda: cancelled() >= 3, message="3 runs cancelled by later slots")
    assert max(recorder.counts().values()) == 1
    # Each run (2 s unless cancelled) was cancelled by the next slot's: none completed.
    assert apps[1].count_jobs(task="long", status="completed") == 0


def test_eager_mode_runs_a_trigger_and_each_slot_of_a_backfill_at_once(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock, eager=True)
    ran: list[datetime | None] = []

    @app.task(name="tick", every=timedelta(hours=1))
    def tick() -> None:
        ctx = current_job()
        ran.append(ctx.scheduled_for if ctx else None)

    app.ensure_schedules()
    assert app.trigger_schedule(tick).status.value == "completed"
    slot = app.get_job(schedule_id("tick")).scheduled_for
    lanes = app.backfill(tick, slot - timedelta(hours=3), slot - timedelta(hours=1), at_once=2)
    assert [lane.status.value for lane in lanes] == ["completed", "completed"]
    assert ran == [START] + [slot - timedelta(hours=h) for h in (3, 2, 1)]


def test_a_jitter_as_long_as_the_interval_is_refused(app: App) -> None:
    with pytest.raises(
        InvalidSchedule, match="jitter \\(60 s\\) must be shorter than its interval"
    ):
        app.task(name="t", every=60, jitter=60)(lambda: None)
    with pytest.raises(InvalidSchedule, match="task 't2': overlap must be one of"):
        app.task(name="t2", cron="* * * * *", overlap="queue")(lambda: None)
    assert app.tasks == {}


def test_a_finished_backfill_is_no_longer_listed_as_a_schedule(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    apps, _ = runners(make_app, clock, cron="0 9 * * *")
    nine = START.replace(hour=9)
    lanes = apps[0].backfill("tick", nine - timedelta(days=3), nine - timedelta(days=1), at_once=3)
    listed = {str(s["id"]) for s in apps[0].schedules()}
    assert {str(lane.id) for lane in lanes} <= listed  # live while they run
    drain_all(apps)
    listed = {str(s["id"]) for s in apps[0].schedules()}
    assert listed == {schedule_id("tick")}  # the declared schedule only


RACED_VERBS: dict[str, Callable[[App], Any]] = {
    "pause": lambda app: app.pause(schedule="tick"),
    "resume": lambda app: app.resume(schedule="tick"),
    "trigger_schedule": lambda app: app.trigger_schedule("tick"),
    "update_schedule": lambda app: app.update_schedule("tick", every=60),
    "backfill": lambda app: app.backfill("tick", START - timedelta(days=3), START),
}


@pytest.mark.parametrize("verb", sorted(RACED_VERBS))
def test_a_schedule_that_finishes_between_the_read_and_the_write_refuses_it(
    make_app: Callable[..., App], clock: FakeClock, monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    """The refusal of a finished schedule is in the write: cancelled after the
    operation read it and before it wrote, it is refused all the same, and nothing
    of the operation is left (no run, no lane, no pause, no edit)."""
    read = AdminOperations.named

    def read_then_cancelled(admin: AdminOperations, schedule: Any, what: str) -> Any:
        record = read(admin, schedule, what)
        if what == verb:
            apps[0].cancel(record.id)  # it finishes between the read and the write
        return record

    monkeypatch.setattr(AdminOperations, "named", read_then_cancelled)
    apps, ran = runners(make_app, clock, cron="0 9 * * *", count=1)
    if verb == "resume":
        apps[0].pause(schedule="tick")
    before = apps[0].get_job(schedule_id("tick")).repeat
    with pytest.raises(
        ScheduleFinished,
        match=f"^{verb}: schedule {schedule_id('tick')} \\(tick\\) was cancelled, which stops",
    ):
        RACED_VERBS[verb](apps[0])
    assert apps[0].count_jobs(task="tick") == 1  # the schedule alone: no run, no lane
    assert apps[0].pauses() == []
    schedule = apps[0].get_job(schedule_id("tick"))
    assert schedule.status.value == "cancelled" and schedule.repeat == before
    clock.advance(days=2)
    assert drain_all(apps) == 0 and ran == []


def test_a_finished_schedule_refuses_pause_resume_trigger_edit_and_backfill(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    apps, ran = runners(make_app, clock, cron="0 9 * * *")
    app = apps[0]
    nine = START.replace(hour=9)
    [lane] = app.backfill("tick", nine - timedelta(days=2), nine - timedelta(days=1))
    drain_all(apps)
    assert lane.refresh().status.value == "completed"
    app.pause(schedule="tick")
    app.cancel(schedule_id("tick"))  # switched off while paused: its pause stays stored
    runs = len(ran)
    refusals: list[tuple[str, Callable[[Any], Any]]] = [
        ("pause", lambda s: app.pause(schedule=s)),
        ("trigger_schedule", app.trigger_schedule),
        ("update_schedule", lambda s: app.update_schedule(s, every=60)),
        ("backfill", lambda s: app.backfill(s, nine - timedelta(days=4), nine)),
        ("resume", lambda s: app.resume(schedule=s)),
    ]
    for verb, act in refusals:
        with pytest.raises(
            ScheduleFinished,
            match=f"^{verb}: backfill job {lane.id} \\(tick\\) has completed: it has no slots",
        ):
            act(str(lane.id))
        with pytest.raises(
            ScheduleFinished,
            match=f"^{verb}: schedule {schedule_id('tick')} \\(tick\\) was cancelled, which stops",
        ):
            act("tick")
    assert app.pauses() == []  # the resume removed the pause it could no longer undo
    assert drain_all(apps) == 0 and len(ran) == runs  # nothing was made to run
    assert app.get_job(schedule_id("tick")).status.value == "cancelled"
    assert [e.action for e in app.audit.entries(limit=2)] == ["resume", "cancel"]
