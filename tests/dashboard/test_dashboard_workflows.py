"""A workflow's job page shows its steps as a timeline, gathered jobs linked."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from mongosched import App, JobStatus
from mongosched.dashboard.standalone import StandaloneDashboard
from mongosched.testing import drain
from tests.dashboard.test_dashboard import TOKEN, Client


def test_a_workflow_job_page_shows_its_steps(app: App) -> None:
    @app.step(name="charge")
    def charge() -> int:
        return 10

    @app.task(name="pack")
    def pack() -> str:
        return "box"

    @app.workflow(name="orders")
    def orders() -> None:
        charge()
        app.gather([pack.job()])
        app.sleep(timedelta(hours=1))

    job = orders.schedule()
    drain(app)
    drain(app)
    child = app.get_jobs(task="pack", limit=1)[0]
    page = Client(StandaloneDashboard(app, TOKEN), headers={"Authorization": f"Bearer {TOKEN}"})
    body = page.get(f"/jobs/{job.id}").body
    assert "<h2>Steps</h2>" in body
    assert "charge" in body and "gather" in body and "sleep" in body
    assert f'href="/jobs/{child.id}"' in body  # the gathered job, linked


def test_the_steps_panel_names_the_event_waited_for_and_received(app: App) -> None:
    @app.workflow(name="approval")
    def approval() -> None:
        app.wait_for("approved")
        app.wait_for("shipped")

    job = approval.schedule()
    drain(app)
    app.send(job.id, "approved", "by ops")
    drain(app)
    page = Client(StandaloneDashboard(app, TOKEN), headers={"Authorization": f"Bearer {TOKEN}"})
    body = page.get(f"/jobs/{job.id}").body
    assert "for event approved until" in body and "received approved:" in body
    assert "by ops" in body and "for event shipped until" in body


def test_the_workflow_buttons_cancel_retry_and_fork(app: App) -> None:
    calls, broken = Counter[str](), {"yes": True}

    @app.step(name="first")
    def first() -> int:
        calls["first"] += 1
        return 1

    @app.step(name="second")
    def second(n: int) -> int:
        calls["second"] += 1
        if broken["yes"]:
            raise ValueError("down")
        return n + 1

    @app.workflow(name="two")
    def two() -> int:
        return second(first())

    client = Client(StandaloneDashboard(app, TOKEN), headers={"Accept": "text/html"})
    form = client.get("/login")
    client.post("/login", {"csrf_token": form.csrf(), "token": TOKEN, "next": "/"})

    def act(path: str, **fields: str) -> Any:
        confirm = client.get(path + ("?from=" + fields["from"] if fields else ""))
        assert confirm.status == 200, confirm.body
        return client.post(path, {"csrf_token": confirm.csrf(), **fields})

    job = two.schedule()
    drain(app)
    page = client.get(f"/jobs/{job.id}").body
    assert "Retry from failed step" in page and "Fork from 1" in page
    assert client.post(f"/jobs/{job.id}/retry-workflow", {}).status == 403  # no CSRF token
    broken["yes"] = False
    assert act(f"/jobs/{job.id}/retry-workflow").status == 303
    drain(app)
    assert job.refresh().result == 2 and calls == {"first": 1, "second": 2}
    assert act(f"/jobs/{job.id}/fork", **{"from": "1"}).status == 303
    drain(app)
    assert calls == {"first": 1, "second": 3}  # the fork kept the first step
    assert app.count_jobs(task="two", status="completed") == 2

    sleeper_job = two.schedule()
    broken["yes"] = True
    assert act(f"/jobs/{sleeper_job.id}/cancel-workflow").status == 303
    assert sleeper_job.refresh().status is JobStatus.CANCELLED
    done = {(e.via, e.action) for e in app.audit.entries()}
    assert {("dashboard", "retry"), ("dashboard", "cancel")} <= done  # audited
