"""A workflow's job page shows its steps as a timeline, gathered jobs linked."""

from __future__ import annotations

from datetime import timedelta

from mongosched import App
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
