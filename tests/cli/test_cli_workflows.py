"""The ``workflows`` verb: a workflow's timeline, and cancel, retry and fork."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mongosched import App, JobStatus
from mongosched.cli import main
from mongosched.testing import FakeClock, drain

START = datetime(2031, 3, 3, 8, 0, tzinfo=timezone.utc)


def run(capsys: pytest.CaptureFixture[str], app: App, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv), app=app)
    return code, capsys.readouterr().out


def test_show_prints_the_timeline_and_retry_fork_cancel_act(
    make_app: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(clock=FakeClock(START))
    calls, broken = Counter[str](), {"yes": True}

    @app.step(name="charge")
    def charge() -> int:
        calls["charge"] += 1
        return 10

    @app.step(name="ship", retry=0)
    def ship(paid: int) -> int:
        calls["ship"] += 1
        if broken["yes"]:
            raise ValueError("no\x1b[2Jcourier")
        return paid * 2

    @app.workflow(name="orders")
    def orders() -> int:
        return ship(charge())

    @app.workflow(name="sleeper")
    def sleeper() -> None:
        app.sleep(timedelta(hours=1))

    job = orders.schedule()
    drain(app)
    code, text = run(capsys, app, "workflows", "show", str(job.id))
    assert code == 0
    assert "failed" in text
    assert "step    charge  tries 1" in text and "result 10" in text
    assert "ship" in text and "error ValueError: no\\x1b[2Jcourier" in text
    assert "\x1b" not in text  # a user's control characters are escaped
    code, text = run(capsys, app, "workflows", "show", str(job.id), "--json")
    assert [step["name"] for step in json.loads(text)["steps"]] == ["charge", "ship"]

    broken["yes"] = False
    assert run(capsys, app, "workflows", "retry", str(job.id))[0] == 0
    drain(app)
    assert job.refresh().result == 20 and calls == {"charge": 1, "ship": 2}

    code, text = run(capsys, app, "workflows", "fork", str(job.id), "--from", "1")
    assert code == 0
    drain(app)
    assert calls == {"charge": 1, "ship": 3}  # the fork kept the first step

    sleeping = sleeper.schedule()
    drain(app)
    code, text = run(capsys, app, "workflows", "show", str(sleeping.id))
    assert "waiting: sleep" in text and "until 2031-03-03 09:00:00" in text
    assert run(capsys, app, "workflows", "cancel", str(sleeping.id))[0] == 0
    assert sleeping.refresh().status is JobStatus.CANCELLED

    plain = app.task(name="plain")(lambda: None).schedule()
    assert run(capsys, app, "workflows", "show", str(plain.id))[0] == 3


def test_show_names_the_event_waited_for_and_jobs_cancel_stops_a_workflow(
    make_app: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(clock=FakeClock(START))

    @app.workflow(name="approval")
    def approval() -> Any:
        first = app.wait_for("approved", timeout=timedelta(hours=4))
        return first, app.wait_for("shipped", timeout=timedelta(hours=1))

    job = approval.schedule()
    drain(app)
    app.send(job.id, "approved", {"by": "ops"})
    drain(app)
    code, text = run(capsys, app, "workflows", "show", str(job.id))
    assert code == 0
    assert "for event 'approved' until 2031-03-03 12:00:00" in text
    assert 'received \'approved\': {"by": "ops"}' in text
    assert "waiting: wait for event 'shipped' until 2031-03-03 09:00:00" in text
    assert run(capsys, app, "jobs", "cancel", str(job.id))[0] == 0  # a workflow's cancel
    assert job.refresh().status is JobStatus.CANCELLED
    assert [e.action for e in app.audit.entries()] == ["cancel"]
    assert run(capsys, app, "workflows", "cancel", str(job.id))[0] != 0  # already ended
