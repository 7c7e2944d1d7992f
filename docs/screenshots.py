"""Take the dashboard screenshots of the docs (docs/images/dashboard-*.png).

Run by hand (not part of ``make test``), after a change to the dashboard's looks::

    .venv/bin/python docs/screenshots.py

It fills an in-process store (``memory://``) with a plausible hour of work — jobs of
several tasks and queues completed, failed, running and due, repeating schedules — on
a fake clock, serves the standalone dashboard on a free local port and photographs each
page in Debian's Chromium (Playwright, as the browser tests).
"""

from __future__ import annotations

import random
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mongosched import App, JobStatus, RetryPolicy, __version__, current_job  # noqa: E402
from mongosched._core.records import RunnerInfo  # noqa: E402
from mongosched.dashboard import StandaloneDashboard  # noqa: E402
from mongosched.testing import FakeClock, drain  # noqa: E402
from tests.support.browser import launch, missing, serve  # noqa: E402

OUT = ROOT / "docs" / "images"
TOKEN = "screenshot-token-0123456789"


class PaymentDeclined(Exception):
    pass


def build() -> tuple[App, FakeClock, dict[str, Any]]:
    clock = FakeClock()
    clock.advance(hours=-1)
    app = App("memory://screenshots", clock=clock)
    rng = random.Random(7)

    @app.task(name="emails.send", queue="emails", retry=RetryPolicy(retries=2, delay=30))
    def send(user_id: int, template: str = "welcome") -> str:
        if rng.random() < 0.04:
            raise TimeoutError("smtp.example.net:587 timed out after 10 s")
        return f"sent {template} to {user_id}"

    @app.task(name="billing.charge", queue="billing", retry=0)
    def charge(account: str, cents: int) -> dict[str, Any]:
        if rng.random() < 0.12:
            raise PaymentDeclined(f"card of {account} declined: insufficient funds")
        return {"account": account, "charged": cents, "currency": "EUR"}

    @app.task(name="images.resize", queue="media")
    def resize(path: str, width: int) -> str:
        return f"{path}@{width}w"

    @app.task(name="reports.daily", cron="0 6 * * *", timezone="Europe/Berlin")
    def daily() -> None: ...

    @app.task(name="cache.warm", every=300)
    def warm() -> None: ...

    @app.task(name="search.reindex", cron="*/15 * * * *")
    def reindex() -> None: ...

    @app.task(name="exports.build", queue="media")
    def export(account: str) -> None: ...

    @app.task(name="audit.flush", queue="audit")
    def flush(batch: int) -> None: ...

    @app.task(name="webhooks.deliver", retry=RetryPolicy(retries=3, delay=20))
    def deliver(url: str) -> None:
        attempt = current_job().attempt  # type: ignore[union-attr]
        raise ConnectionError(
            ["502 Bad Gateway", "503 Service Unavailable", "read timed out after 10 s"][
                attempt % 3
            ]
            + f" from {url}"
        )

    # What Django's tasks framework enqueues (mongosched.contrib.django): one task,
    # each job labelled with the Django task's path.
    @app.task(name="mongosched.contrib.django.run_task", retry=0)
    def run_task(
        path: str, args: list[Any], kwargs: dict[str, Any], backend: str, **_: Any
    ) -> None:
        if path.endswith("sync_inventory") and rng.random() < 0.15:
            raise ConnectionError("erp.example.net refused the connection")

    def django(path: str, *args: Any) -> None:
        run_task.configure(label=f"shop.tasks.{path}", priority=4.6).schedule(
            path=f"shop.tasks.{path}",
            args=list(args),
            kwargs={"notify": True},
            backend="default",
            django_priority=10,
            run_after=None,
        )

    app.ensure_schedules()
    for _ in range(60):  # an hour of work, a minute at a time
        for _ in range(rng.randint(6, 14)):
            send.schedule(
                rng.randint(1000, 9999), template=rng.choice(["welcome", "reset", "digest"])
            )
        for _ in range(rng.randint(1, 4)):
            charge.schedule(f"acct_{rng.randint(100, 999)}", rng.choice([990, 1990, 4900]))
        for _ in range(rng.randint(2, 6)):
            resize.schedule(f"uploads/{rng.randint(1, 10**6)}.jpg", rng.choice([320, 640, 1280]))
        for _ in range(rng.randint(1, 3)):
            django("send_receipt", rng.randint(10000, 99999))
        django("sync_inventory", rng.choice(["EU", "US"]))
        if rng.random() < 0.05:
            deliver.schedule(f"https://hooks.example.com/{rng.randint(100, 999)}")
        drain(app)
        clock.advance(minutes=1)
    # Work due now and later, and a few running jobs held by two workers.
    for i in range(40):
        send.schedule(4000 + i, template="digest")
    for i in range(12):
        resize.configure(delay=timedelta(minutes=5)).schedule(f"uploads/late-{i}.jpg", 640)
    for i in range(3):
        export.schedule(f"acct_{900 + i}")
    for i in range(2):  # a task no runner registers: the overview warns of it
        flush.schedule(i)
    for i in range(5):
        django("send_receipt", 70000 + i)
    clock.advance(seconds=95)
    for owner, tasks in (
        ("web-1.prod:4121:runner", ["images.resize", "exports.build"]),
        ("worker-2.prod:877:runner", ["emails.send", "exports.build"]),
    ):
        for _ in range(2):
            claimed = app.store.claims.claim(
                owner=owner, tasks=tasks, queues=None, now=app.now(), lease_duration=30
            )
            if claimed is not None and claimed.lease is not None:
                app.store.leases.write_progress(
                    claimed.id, claimed.lease.token, 0.6, "rendering page 12 of 20", app.now()
                )
    # The runners that hold them, as the live registry lists runners (and one that
    # stopped answering a while ago), a paused queue and a paused schedule.
    now = app.now()
    everything = [
        "emails.send",
        "billing.charge",
        "images.resize",
        "exports.build",
        "cache.warm",
        "webhooks.deliver",
        "mongosched.contrib.django.run_task",
    ]
    for i, (host, pid, queues, threads, busy, seen) in enumerate(
        [
            ("web-1.prod", 4121, ("media",), 4, 2, 2),
            ("worker-2.prod", 877, None, 8, 2, 1),
            ("worker-3.prod", 912, ("emails", "billing"), 8, 0, 3),
            ("worker-4.prod", 1533, None, 8, 0, 48),
        ]
    ):
        app.store.admin.save_runner(
            RunnerInfo(
                id=f"w{i}",
                name=f"{host}:{pid}:runner",
                host=host,
                pid=pid,
                queues=queues,
                tasks=tuple(everything),
                workers=threads,
                in_flight=busy,
                started_at=now - timedelta(hours=5 - i, minutes=7 * i),
                last_seen=now - timedelta(seconds=seen),
                version=__version__,
            ),
            now + timedelta(minutes=10),
        )
    app.pause(queue="media")
    app.pause(schedule="schedule:search.reindex")
    app.pause(task="shop.tasks.send_receipt")
    failed = app.get_jobs(task="webhooks.deliver", status="failed", limit=1)
    django_job = app.get_jobs(label="shop.tasks.sync_inventory", status="failed", limit=1)
    done = app.get_jobs(task="billing.charge", status="completed", limit=1)
    # A webhook that failed, retried by an operator from the command line and then from
    # the dashboard: its page shows three runs and who started each.
    retried = None
    if failed:
        retried = failed[0]
        clock.advance(minutes=3)
        with app.audit.acting("alice@ops-laptop", "cli"):
            app.retry_job(retried.id)
        while retried.refresh().status is not JobStatus.FAILED:  # 4 attempts, backing off
            drain(app)
            clock.advance(seconds=90)
        with app.audit.acting("bob", "dashboard"):
            app.retry_job(retried.id)
        drain(app)
    return app, clock, {
        "failed": failed[0] if failed else None,
        "django": django_job[0] if django_job else None,
        "retried": retried,
        "done": done[0] if done else None,
    }


def main() -> int:
    why = missing()
    if why:
        print(f"cannot take screenshots: {why}")  # noqa: T201 - a script
        return 1
    from playwright.sync_api import sync_playwright

    app, _, found = build()
    OUT.mkdir(parents=True, exist_ok=True)
    with serve(StandaloneDashboard(app, TOKEN)) as base, sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page(viewport={"width": 1280, "height": 860}, device_scale_factor=1)
        page.goto(base + "login")
        page.screenshot(path=str(OUT / "dashboard-login.png"))
        page.fill("#token", TOKEN)
        page.click("button[type=submit]")
        page.goto(base + "jobs")
        page.wait_for_url(base + "jobs")
        shots = [
            ("overview", "?window=1h"),
            ("jobs", "jobs?status=failed"),
            ("job-django", f"jobs/{found['django'].id}" if found["django"] else "jobs"),
            ("job-retried", f"jobs/{found['retried'].id}" if found["retried"] else "jobs"),
            ("job-completed", f"jobs/{found['done'].id}" if found["done"] else "jobs"),
            ("jobs-django", "jobs?label=shop.tasks.sync_inventory"),
            ("schedules", "schedules"),
            ("workers", "runners"),
            ("schedule-edit", "schedules/edit?id=schedule:reports.daily"),
        ]
        if callable(getattr(app, "retry_jobs", None)):
            shots.append(("confirm", "bulk/retry?task=billing.charge&status=failed"))
        for name, path in shots:
            # The jobs lists at 1,400 px: what the widest rows must fit.
            wide = name.startswith("jobs")
            page.set_viewport_size({"width": 1400 if wide else 1280, "height": 860})
            page.goto(base + path)
            page.screenshot(path=str(OUT / f"dashboard-{name}.png"), full_page=not wide)
            print(f"docs/images/dashboard-{name}.png")  # noqa: T201 - a script
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
