"""The operator's verbs of the command: bulk retry/cancel/purge, pause, resume, pauses,
schedule-edit, workers, and the paused column of schedules."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mongosched import App, JobStatus, current_job
from mongosched.cli import main
from mongosched.operations.audit import local_actor
from mongosched.testing import FakeClock, drain
from tests.support.bounds import bounded_app
from tests.support.server_fixtures import shared_db
from tests.support.waiting import wait_for

__all__ = ["bounded_app", "shared_db"]

START = datetime(2031, 3, 3, 8, 0, tzinfo=timezone.utc)


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    def run(*argv: str, app: App) -> Run:
        capsys.readouterr()
        code = main(list(argv), app=app)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


@pytest.fixture
def ops(make_app: Callable[..., App], clock: FakeClock) -> App:
    app = make_app(clock=clock)
    app.task(name="ok")(lambda: None)

    @app.task(name="boom", retry=0)
    def boom(kind: str = "value") -> None:
        raise {"value": ValueError, "key": KeyError}[kind](kind)

    return app


def test_bulk_retry_cancel_purge(ops: App, clock: FakeClock, cli: Callable[..., Run]) -> None:
    for _ in range(3):
        ops.schedule("boom")
    ops.schedule("boom", "key")
    drain(ops)
    run = cli("retry", app=ops)
    assert run.code == 2 and "give a filter" in run.err and "--all" in run.err
    run = cli("retry", "--error-type", "ValueError", "--dry-run", app=ops)
    assert (run.code, run.out.strip()) == (0, "would retry 3 job(s)")
    assert ops.count_jobs(status="failed") == 4
    run = cli("retry", "--task", "boom", "--since", "1h", "--batch-size", "2", "--json", app=ops)
    assert run.code == 0, run.err
    assert run.json() == {"action": "retry", "dry_run": False, "count": 4}
    assert ops.count_jobs(status="pending") == 4
    run = cli("cancel", "--task", "boom", "--status", "pending", app=ops)
    assert (run.code, run.out.strip()) == (0, "cancelled (or asked to cancel) 4 job(s)")
    clock.advance(hours=2)
    assert cli("purge", "--since", "1h", app=ops).out.strip() == "deleted 0 job(s)"
    run = cli("purge", "--before", "1h", "--status", "cancelled", app=ops)
    assert run.out.strip() == "deleted 4 job(s)" and ops.count_jobs() == 0
    run = cli("purge", "--status", "pending", "--all", app=ops)
    assert run.code == 2 and "invalid status 'pending'" in run.err
    run = cli("retry", "--since", "yesterday", app=ops)
    assert run.code == 2 and "invalid time 'yesterday'" in run.err
    when = (START + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert cli("cancel", "--created-before", when, "--dry-run", app=ops).out.strip() == (
        "would cancel 0 job(s)"
    )


def test_pause_resume_pauses_and_schedules(
    ops: App, clock: FakeClock, cli: Callable[..., Run]
) -> None:
    ops.task(name="tick", every=60)(lambda: None)
    ops.ensure_schedules()
    assert cli("pauses", app=ops).out.strip() == "nothing is paused"
    run = cli("pause", "--queue", "default", app=ops)
    assert run.code == 0 and run.out.startswith("queue default paused")
    assert cli("pause", "--schedule", "tick", app=ops).code == 0
    run = cli("pause", "--queue", "a", "--task", "b", app=ops)
    assert run.code == 2 and "not allowed with" in run.err
    assert cli("pause", app=ops).code == 2
    rows = cli("pauses", "--json", app=ops).json()
    assert [(r["kind"], r["name"]) for r in rows] == [
        ("queue", "default"),
        ("schedule", "schedule:tick"),
    ]
    (row,) = cli("schedules", "--json", app=ops).json()
    assert (row["paused"], row["status"]) == (True, "paused")
    header = cli("schedules", app=ops).out.splitlines()[0]
    assert header.split()[:6] == ["ID", "TASK", "RULE", "TIMEZONE", "STATUS", "PAUSED"]
    job = ops.schedule("ok")
    assert drain(ops) == 0
    assert cli("resume", "--queue", "default", app=ops).out.strip() == "queue default resumed"
    assert cli("resume", "--schedule", "schedule:tick", app=ops).code == 0
    assert drain(ops) == 1 and job.refresh().status is JobStatus.COMPLETED
    run = cli("resume", "--schedule", "nothing", app=ops)
    assert run.code == 3 and "no repeating schedule 'nothing'" in run.err


def test_schedule_edit(ops: App, cli: Callable[..., Run]) -> None:
    ops.task(name="tick", cron="0 * * * *")(lambda: None)
    ops.ensure_schedules()
    run = cli("schedule-edit", "tick", "--cron", "*/5 * * * *", "--timezone", "Asia/Tokyo", app=ops)
    assert run.code == 0, run.err
    assert "*/5 * * * * in Asia/Tokyo" in run.out and "next run 2031-03-03 08:05:00" in run.out
    row = cli(
        "schedule-edit", "tick", "--every", "90s", "--priority", "2", "--json", app=ops
    ).json()
    assert (row["rule"], row["priority"], row["timezone"]) == ("every 90.0s", 2, None)
    run = cli("schedule-edit", "tick", "--cron", "* * * * *", "--every", "1m", app=ops)
    assert run.code == 2
    run = cli("schedule-edit", "tick", "--cron", "61 * * * *", app=ops)
    assert run.code == 1 and "invalid cron expression" in run.err


def test_trigger_and_backfill(ops: App, clock: FakeClock, cli: Callable[..., Run]) -> None:
    slots: list[datetime | None] = []

    @ops.task(name="daily", cron="0 6 * * *")
    def daily() -> None:
        ctx = current_job()
        slots.append(ctx.scheduled_for if ctx else None)

    ops.ensure_schedules()
    run = cli("trigger", "daily", app=ops)
    assert run.code == 0 and run.out.startswith("schedule daily triggered: job ")
    assert drain(ops) == 1 and slots == [START]
    run = cli("backfill", "daily", "--start", "3d", "--end", "2031-03-03T06:00Z", app=ops)
    assert run.code == 0, run.err
    assert "in 1 job(s)" in run.out  # from 3 days ago (08:00): 03-01 to 03-03 at 06:00
    assert "slots 2031-03-01 06:00:00+00:00 to 2031-03-03 06:00:00+00:00" in run.out
    lanes = cli("backfill", "daily", "--start", "3d", "--end", "1d", "--at-once", "3",
                "--json", app=ops).json()  # fmt: skip
    # Those two slots are the first backfill's still to run: no lane is made again,
    # and the lane that runs them is returned (a slot is one run, however cut).
    assert [lane["first"] for lane in lanes] == ["2031-03-01T06:00:00.000Z"]
    assert drain(ops) == 3
    six = START.replace(hour=6)
    assert sorted(s for s in slots[1:] if s) == [six - timedelta(days=d) for d in (2, 1, 0)]
    run = cli("backfill", "daily", "--start", "1d", "--end", "3d", app=ops)
    assert run.code == 1 and "is before start" in run.err
    assert cli("trigger", "nothing", app=ops).code == 3


def test_verbs_on_a_finished_schedule_are_refused(ops: App, cli: Callable[..., Run]) -> None:
    ops.task(name="daily", cron="0 6 * * *")(lambda: None)
    ops.ensure_schedules()
    ops.cancel("schedule:daily")
    verbs = {
        "pause": ["pause", "--schedule", "daily"],
        "resume": ["resume", "--schedule", "daily"],
        "trigger_schedule": ["trigger", "daily"],
        "update_schedule": ["schedule-edit", "daily", "--every", "1m"],
        "backfill": ["backfill", "daily", "--start", "3d", "--end", "1d"],
    }
    for verb, argv in verbs.items():
        run = cli(*argv, app=ops)
        assert (run.code, run.out) == (1, ""), argv
        assert run.err == (
            f"mongosched: error: {verb}: schedule schedule:daily (daily) was cancelled, "
            "which stops it for good (app.retry_job brings it back)\n"
        )
    assert ops.count_jobs() == 1 and ops.pauses() == []


def test_runners_lists_live_runners(make_app: Callable[..., App], cli: Callable[..., Run]) -> None:
    app = make_app()
    assert cli("runners", app=app).out.strip() == "no runners registered"
    runner = app.runner(workers=3, queues=["a", "b"], name="w1").start()
    wait_for(lambda: app.live_runners())
    run = cli("runners", app=app)
    header, row = run.out.splitlines()
    assert header.split()[:3] == ["NAME", "HOST", "PID"]
    assert row.split()[0] == "w1" and "a,b" in row
    assert run.err == ""
    (data,) = cli("runners", "--json", app=app).json()
    assert (data["name"], data["workers"], data["queues"], data["stale"]) == (
        "w1",
        3,
        ["a", "b"],
        False,
    )
    runner.stop()
    assert app.live_runners() == []


def test_audit_lists_what_the_commands_did_and_who_ran_them(
    ops: App, clock: FakeClock, cli: Callable[..., Run]
) -> None:
    assert cli("audit", app=ops).out.strip() == "no operator action recorded"
    ops.schedule("boom")
    drain(ops)
    assert cli("retry", "--task", "boom", app=ops).code == 0
    assert cli("pause", "--queue", "reports", app=ops).code == 0
    ops.resume(queue="reports", actor="alice")  # through the API
    run = cli("audit", "--json", app=ops)
    assert run.code == 0, run.err
    who = local_actor()
    got = [(e["actor"], e["via"], e["action"], e["count"], e["target"]) for e in run.json()]
    assert got == [
        ("alice", "api", "resume", None, "queue reports"),
        (who, "cli", "pause", None, "queue reports"),
        (who, "cli", "retry", 1, "task=boom, statuses=failed/cancelled/expired"),
    ]
    assert [e["known_by"] for e in run.json()] == ["argument", "process user", "process user"]
    lines = cli("audit", "--limit", "2", app=ops).out.splitlines()
    headers = ["AT", "(UTC)", "ACTOR", "VIA", "ACTION", "JOBS", "TARGET", "DETAIL", "KNOWN", "BY"]
    assert lines[0].split() == headers
    assert len(lines) == 3 and "alice" in lines[1] and "resume" in lines[1]
    assert lines[1].rstrip().endswith("argument")


BEYOND = [
    (["jobs", "purge", "--older-than", "99999999999d"], "--older-than: must be a finite number"),
    (["retry", "--since", "99999999999d"], "--since: must be a finite number"),
    (["cancel", "--created-before", "99999999999d"], "--created-before: must be a finite"),
    (["jobs", "list", "--limit", "1e20"], "--limit: must be a whole number"),
    (["jobs", "list", "--limit", str(2**63)], "--limit: must be a whole number from 0 to"),
    (["audit", "--limit", "1e20"], "--limit: must be a whole number"),
    (["audit", "--limit", str(2**63)], "--limit: must be a whole number from 1 to"),
    (["retry", "--all", "--batch-size", str(2**63)], "--batch-size: must be a whole number"),
    (["backfill", "t", "--start", "99999999d", "--end", "1d"], "--start: must be a finite"),
    (["backfill", "t", "--start", "0001-01-01T00:00Z", "--end", "1d"], "--start: must be from"),
    (["backfill", "t", "--start", "1d", "--end", "9999-12-31T23:59Z"], "--end: must be from"),
    (["backfill", "t", "--start", "9999-12-30T00:00Z", "--end", "9999-12-31Z"], "--start: must"),
    (["backfill", "t", "--start", "2d", "--end", "1d", "--at-once", str(2**63)], "--at-once:"),
    (["schedule-edit", "t", "--every", "99999999999d"], "--every: must be a finite number"),
    (["pause", "--queue", "q" * 5000], "queue must be at most 1,024 characters"),
    # Digits other than ASCII's, which int(), float() and str.isdigit() take: refused.
    (["jobs", "list", "--limit", "²"], "--limit: must be a whole number, not"),
    (["backfill", "t", "--start", "2d", "--end", "1d", "--at-once", "١"], "--at-once: must be"),
    (["schedule-edit", "t", "--priority", "١"], "--priority: must be a whole number, not"),
    (["schedule-edit", "t", "--priority", "11"], "--priority: must be an int from 1 to 10"),
    (["--timeout", "١", "jobs", "list"], "--timeout: must be a number > 0, not"),
    (["workflows", "fork", "x", "--from", "²"], "--from: must be a whole number, not"),
    (["dashboard", "--token", "t", "--port", "١"], "--port: must be a whole number, not"),
    (["worker", "m:app", "--metrics-port", "70000"], "--metrics-port: must be an int from 0 to"),
]


@pytest.mark.parametrize(("argv", "said"), BEYOND, ids=[" ".join(a)[:40] for a, _ in BEYOND])
def test_a_value_beyond_its_bound_is_a_usage_error(
    bounded_app: App, cli: Callable[..., Run], argv: list[str], said: str
) -> None:
    jobs = sorted((str(j.id), j.status.value, j.run_at) for j in bounded_app.get_jobs(limit=0))
    run = cli(*argv, app=bounded_app)
    assert (run.code, run.out) == (2, ""), run.err
    assert said in run.err and "Traceback" not in run.err
    assert run.err.splitlines()[-1].startswith("mongosched")  # argparse's usage, then one line
    assert len(run.err) < 2000  # the value itself is not repeated whole
    after = sorted((str(j.id), j.status.value, j.run_at) for j in bounded_app.get_jobs(limit=0))
    assert after == jobs and bounded_app.pauses() == []
