"""The dashboard end to end in a real headless Chromium (Debian's ``chromium`` driven
by Playwright): the standalone server on a free port over a ``memory://`` store shared
with the test, and the Django and Flask mounts.

One browser for the session, a fresh context (cookies) per test. The tests skip, saying
why, where Playwright or Chromium is missing, and fail instead under
``MONGOSCHED_REQUIRE_BROWSER=1`` (CI).
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from mongosched import App, JobStatus, RetryPolicy, current_job
from mongosched.dashboard import StandaloneDashboard
from mongosched.store.memory import MemoryStore
from mongosched.testing import drain
from tests.support.browser import launch, require_browser, serve
from tests.support.dashboard import NEXT_TARGETS, TOKEN, XSS, hold, populate

pytestmark = pytest.mark.browser
pytest_plugins = ["tests.djangoproject.fixtures"]  # project: the Django test project


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    require_browser()
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    browser = launch(playwright)
    try:
        yield browser
    finally:
        browser.close()
        playwright.stop()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A fresh browser (no cookies); it fails the test if a script opens a dialog."""
    yield from _page(chromium, None)


@pytest.fixture
def signed_in(chromium: Any, session_state: Any) -> Iterator[Any]:
    """A browser holding the session of a sign-in through the form."""
    yield from _page(chromium, session_state)


def _page(chromium: Any, state: Any) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900}, storage_state=state)
    context.set_default_timeout(10_000)
    opened = context.new_page()
    dialogs: list[str] = []
    opened.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    opened.dialogs = dialogs
    try:
        yield opened
    finally:
        context.close()
    assert dialogs == [], f"a script ran in the page: {dialogs}"


@pytest.fixture(scope="module")
def shared() -> Iterator[App]:
    name = f"browser-{uuid.uuid4().hex[:8]}"
    app = App(f"memory://{name}")
    populate(app)
    yield app
    MemoryStore.forget(name)


@pytest.fixture(scope="module")
def base(shared: App) -> Iterator[str]:
    with serve(StandaloneDashboard(shared, TOKEN)) as url:
        yield url


@pytest.fixture(scope="module")
def session_state(chromium: Any, base: str) -> Any:
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(base + "login")
        page.fill("#token", TOKEN)
        page.click("button[type=submit]")
        page.wait_for_url(base)
        return context.storage_state()
    finally:
        context.close()


def sign_in(page: Any, base: str) -> None:
    page.goto(base + "jobs")
    assert "/login?next=" in page.url
    page.fill("#token", "not the token")
    page.click("button[type=submit]")
    assert page.locator(".warning").inner_text() == "That token is not right."
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(base + "jobs")


def test_sign_in_and_load_every_page(page: Any, base: str, shared: App) -> None:
    sign_in(page, base)
    for path, heading in (
        ("", "Overview"),
        ("jobs", "Jobs"),
        ("schedules", "Schedules"),
        ("runners", "Runners"),
        ("audit", "Audit trail"),
    ):
        reply = page.goto(base + path)
        assert reply.status == 200, path
        assert page.locator("h1").inner_text() == heading
    page.goto(base)
    # 24 h by the hour (and the current one, when the hour turned since the page's now)
    assert page.locator("figure.chart svg rect.done").count() in (24, 25)
    assert "4 failed" in page.locator("figure.chart figcaption").inner_text()
    assert page.locator("text=tick").count() >= 1
    # The page's own stylesheet applied (assets come from the package, nothing else).
    colour = page.evaluate("getComputedStyle(document.querySelector('header.top')).backgroundColor")
    assert colour == "rgb(23, 32, 46)"
    metrics = page.goto(base + "metrics")
    assert metrics.status == 200 and "mongosched_jobs" in page.content()


def test_filter_jobs_open_a_failed_one_and_retry_it(signed_in: Any, base: str, shared: App) -> None:
    page = signed_in
    page.goto(base + "jobs")
    page.fill("input[name=task]", "boom")
    page.check("input[name=status][value=failed]")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r".*task=boom.*status=failed.*"))
    rows = page.locator("table.jobs tbody tr")
    assert rows.count() == 3
    assert page.locator(".summary").inner_text().startswith("3 jobs match")
    rows.first.locator("a.mono").click()
    assert page.locator("h1").inner_text() == "boom"
    assert "Traceback (most recent call last)" in page.locator("pre.traceback").inner_text()
    job_id = page.url.rsplit("/", 1)[1]
    assert shared.get_job(job_id).status is JobStatus.FAILED  # type: ignore[union-attr]
    page.click("text=Retry…")
    assert page.locator("h1").inner_text() == "Retry job"
    assert shared.get_job(job_id).status is JobStatus.FAILED  # type: ignore[union-attr]
    page.click("form button.primary")
    assert page.locator(".notice").inner_text() == "Job queued to run again."
    assert page.locator("dl.facts .badge").first.inner_text() == "pending"
    assert shared.get_job(job_id).status is JobStatus.PENDING  # type: ignore[union-attr]


def test_the_jobs_list_shows_arguments_run_time_and_errors(
    signed_in: Any, base: str, shared: App
) -> None:
    page = signed_in
    page.goto(base + "jobs?task=add")
    headers = page.locator("table.jobs thead th").all_text_contents()
    row = page.locator("table.jobs tbody tr").first.locator("td").all_inner_texts()
    cells = dict(zip(headers, row, strict=True))
    assert cells["Arguments"] == "2, 3"
    assert re.fullmatch(r"\d+ ms", cells["Run time"]), cells
    done = shared.get_jobs(task="add", limit=1)[0]
    assert cells["Job"] == "…" + str(done.id)[-8:]
    page.goto(base + "jobs?" + urllib.parse.urlencode({"task": XSS}))
    error = page.locator("table.jobs tbody tr td .error").first
    assert error.inner_text() == f"RuntimeError: {XSS}"  # as text: no script ran
    offered = page.locator("#task-names option").evaluate_all("os => os.map(o => o.value)")
    assert {"add", "boom", XSS} <= set(offered)


def test_a_running_jobs_page_refreshes_itself(signed_in: Any, base: str, shared: App) -> None:
    @shared.task(name="long-haul")
    def long_haul() -> None: ...

    job = long_haul.schedule()
    hold(shared, "long-haul", "runner-b")
    page = signed_in
    page.goto(base + f"jobs/{job.id}")
    assert page.locator("label.refresh input").is_checked()
    page.goto(base + "jobs")  # other pages refresh only when the reader asks
    assert page.locator("label.refresh").count() == 0
    page.goto(base)
    assert not page.locator("label.refresh input").is_checked()


def test_pause_and_resume_a_queue(signed_in: Any, base: str, shared: App) -> None:
    page = signed_in
    page.goto(base)
    row = page.locator("section.panel:has(h2:text-is('Queues'))").locator("tr", has_text="slow")
    row.locator("text=Pause").click()
    assert page.locator("h1").inner_text() == "Pause queue"
    page.click("form button.danger")
    assert page.locator(".notice").inner_text() == "Paused."
    assert [(p.kind, p.name) for p in shared.pauses()] == [("queue", "slow")]
    row = page.locator("section.panel:has(h2:text-is('Queues'))").locator("tr", has_text="slow")
    assert row.locator(".badge").inner_text() == "paused"
    row.locator("text=Resume").click()
    page.click("form button.primary")
    assert page.locator(".notice").inner_text() == "Resumed."
    assert shared.pauses() == []


def test_the_audit_trail_shows_who_did_what(signed_in: Any, base: str, shared: App) -> None:
    page = signed_in
    shared.pause(queue="nightly", actor=XSS)  # through the API, hostile text as its actor
    page.goto(base + "pause?kind=task&name=add")
    page.click("form button.danger")
    assert page.locator(".notice").inner_text() == "Paused."
    page.click("nav >> text=Audit")
    assert page.locator("h1").inner_text() == "Audit trail"
    rows = page.locator("table tbody tr")
    first = rows.nth(0).locator("td").all_inner_texts()
    second = rows.nth(1).locator("td").all_inner_texts()
    assert first[1:6] == ["dashboard token", "dashboard", "pause", "", "task add"]
    assert second[1:6] == [XSS, "api", "pause", "", "queue nightly"]  # as text: no script ran
    shared.resume(task="add")
    shared.resume(queue="nightly")


def test_job_text_is_shown_as_text(signed_in: Any, base: str, shared: App) -> None:
    page = signed_in
    hostile = shared.get_jobs(task=XSS, limit=1)[0]
    page.goto(f"{base}jobs/{hostile.id}")
    assert page.locator("h1").inner_text() == XSS
    assert XSS in page.locator("pre.code").first.inner_text()
    logs = page.locator("section.panel:has(h2:text-is('Logs')) table.logs tbody tr")
    assert logs.count() == 1  # what the task logged, kept with its job, as text
    cells = logs.first.locator("td").all_inner_texts()
    assert cells[1:] == ["WARNING", "hostile", "1", f"about to fail: {XSS}"]
    assert page.locator("script:not([src])").count() == 0
    # (the page fixture fails the test if any dialog opened)


def test_the_overview_counts_over_the_window_picked(signed_in: Any, base: str, shared: App) -> None:
    page = signed_in
    page.goto(base)
    labels = page.locator(".cards .label").all_text_contents()
    assert "Due later" in labels and "Failed, 24 h" in labels
    page.click("nav.window >> text=1 h")
    page.wait_for_url(base + "?window=1h")
    assert page.locator("nav.window a[aria-current=page]").inner_text() == "1 h"
    failed = page.locator(".card", has_text="Failed, 1 h").locator(".value").inner_text()
    since = shared.now() - timedelta(hours=1)
    assert failed == str(shared.count_jobs(status="failed", finished_after=since))
    assert page.locator("figure.chart svg rect.done").count() in (30, 31)  # 2 min each
    assert page.locator("h2", has_text="Throughput, last 1 h").count() == 1


def test_a_jobs_page_lists_the_error_of_each_attempt(
    signed_in: Any, base: str, shared: App
) -> None:
    @shared.task(name="flaky", retry=RetryPolicy(retries=2, delay=0))
    def flaky() -> None:
        raise ValueError(f"attempt {current_job().attempt}")  # type: ignore[union-attr]

    job = flaky.schedule()
    drain(shared)
    page = signed_in
    page.goto(f"{base}jobs/{job.id}")
    items = page.locator("ol.attempts > li")
    assert items.count() == 3
    assert [items.nth(i).locator("p").first.inner_text().split(" · ")[0] for i in range(3)] == [
        "Attempt 1 retried",
        "Attempt 2 retried",
        "Attempt 3 failed",
    ]
    assert "ValueError: attempt 2" in items.nth(1).inner_text()
    # Only the last traceback is open; a click opens another.
    assert items.nth(2).locator("pre.traceback").is_visible()
    assert not items.nth(0).locator("pre.traceback").is_visible()
    items.nth(0).locator("summary").click()
    assert "attempt 1" in items.nth(0).locator("pre.traceback").inner_text()


def test_a_retried_job_shows_its_runs_and_who_started_each(
    signed_in: Any, base: str, shared: App
) -> None:
    """After an operator's retry (from the command line) and one from the dashboard, the
    job's page shows three runs, each headed by who started it; each attempt names
    its runner, host and pid; the audit link leads to the job's entries and back."""

    @shared.task(name="twice", retry=RetryPolicy(retries=1, delay=0))
    def twice() -> None:
        raise ConnectionError(f"503 on attempt {current_job().attempt}")  # type: ignore[union-attr]

    job = twice.schedule()
    drain(shared)
    with shared.audit.acting("alice@ops-laptop", "cli"):
        shared.retry_job(job.id)
    drain(shared)
    page = signed_in
    page.goto(f"{base}jobs/{job.id}")
    page.locator(".actions a", has_text="Retry").click()
    page.click("form button.primary")
    drain(shared)
    page.goto(f"{base}jobs/{job.id}")
    heads = page.locator("ol.runs p.run-head").all_inner_texts()
    assert len(heads) == 3
    assert heads[0].startswith("Run 1 · as scheduled")
    assert heads[1].startswith("Run 2 · retried by alice@ops-laptop via cli")
    assert heads[2].startswith("Run 3 · retried by dashboard token via dashboard")
    runs = page.locator("ol.runs > li")
    attempts = runs.nth(1).locator("ol.attempts > li")
    assert attempts.count() == 2
    first = shared.get_job(job.id).history[2]  # type: ignore[union-attr]
    line = attempts.nth(0).locator("p").first.inner_text()
    assert f"runner {first.runner} on {first.host} pid {first.pid}" in line
    assert "ConnectionError: 503 on attempt 2" in attempts.nth(1).inner_text()
    runs.nth(1).locator("a", has_text="audit").click()
    rows = page.locator("table tbody tr")
    assert rows.count() == 2
    assert "alice@ops-laptop" in rows.nth(1).inner_text()
    rows.nth(1).locator("a").click()
    assert page.url == f"{base}jobs/{job.id}"


def test_a_completed_job_shows_who_ran_it(signed_in: Any, base: str, shared: App) -> None:
    @shared.task(name="done-by")
    def done_by() -> int:
        return 1

    job = done_by.schedule()
    drain(shared)
    ran = shared.get_job(job.id).history  # type: ignore[union-attr]
    assert len(ran) == 1 and ran[0].pid is not None
    page = signed_in
    page.goto(f"{base}jobs/{job.id}")
    line = page.locator("ol.runs ol.attempts > li p").first.inner_text()
    assert line.startswith("Attempt 1 completed · ")
    assert f"runner {ran[0].runner} on {ran[0].host} pid {ran[0].pid}" in line
    page.locator("ol.attempts a.mono").first.click()
    assert page.locator("h1").inner_text() == "Runners"


def test_a_django_task_shows_its_own_call_and_the_list_fits_a_narrow_screen(
    signed_in: Any, base: str, shared: App
) -> None:
    """A Django task's job (as mongosched.contrib.django enqueues it) shows the task's own
    arguments and Django priority; at 1,400 px the jobs list shows its last column."""
    run = shared.task(name="mongosched.contrib.django.run_task")(lambda **kw: None)
    path = "shop.tasks.resize_product_image_for_the_storefront_gallery"
    job = run.configure(label=path, priority=4.6).schedule(
        path=path,
        args=[42, "uploads/very/long/path/to/a/product/image/that/goes/on/and/on.jpg"],
        kwargs={"width": 1280, "formats": ["webp", "avif", "jpeg"]},
        backend="default",
        django_priority=10,
        run_after=None,
    )
    page = signed_in
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{base}jobs?label={path}")
    row = page.locator("table.jobs tbody tr").first
    args = row.locator(".args")
    assert args.get_attribute("title") == (
        '42, "uploads/very/long/path/to/a/product/image/that/goes/on/and/on.jpg", '
        'width=1280, formats=["webp","avif","jpeg"]'
    )
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1400, f"the jobs list is {width} px wide"
    error_cell = row.locator("td").last.bounding_box()
    assert error_cell is not None and error_cell["x"] + error_cell["width"] <= 1400
    page.goto(f"{base}jobs/{job.id}")
    priority = page.locator("dl.facts dt:has-text('Priority') + dd").inner_text()
    assert priority.startswith("10 (Django priority; runs at mongosched priority 4.6)")
    panel = page.locator("section.panel", has=page.locator("h2", has_text="Arguments"))
    codes = panel.locator("> pre.code").all_inner_texts()
    assert '"uploads/very' in codes[0] and "42" in codes[0] and '"width": 1280' in codes[1]
    assert not panel.locator("details pre").is_visible()  # the wrapper, folded


def test_labelled_jobs_are_shown_filtered_and_paused_by_label(
    signed_in: Any, base: str, shared: App
) -> None:
    run = shared.task(name="django-like")(lambda text: text)
    mail = run.configure(label="shop.tasks.mail").schedule("m")
    run.configure(label="shop.tasks.invoice").schedule("i")
    page = signed_in
    page.goto(base + "jobs")
    page.fill("input[name=task]", "shop.tasks.mail")
    page.click("form.filters button[type=submit]")
    rows = page.locator("table.jobs tbody tr")
    assert rows.count() == 1
    assert rows.first.locator("td").nth(1).inner_text().split("\n") == [
        "shop.tasks.mail",
        "django-like",
    ]
    rows.first.locator("a.mono").click()
    assert page.locator("h1").inner_text() == "shop.tasks.mail"
    page.locator("dl.facts").locator("text=Pause").click()
    assert page.locator("h1").inner_text() == "Pause task"
    page.click("form button.danger")
    assert page.locator(".notice").inner_text() == "Paused."
    assert mail.refresh().status is JobStatus.PAUSED
    assert page.locator("dl.facts .badge").first.inner_text() == "paused"
    page.locator("dl.facts").locator("text=Resume").click()
    page.click("form button.primary")
    assert mail.refresh().status is JobStatus.PENDING
    assert [j.status for j in shared.get_jobs(label="shop.tasks.invoice")] == [JobStatus.PENDING]


HOSTILE_NEXT = "login?next=/%09/other.host/x"  # a tab: a browser drops it, then "//"


def offsite(page: Any, base: str) -> list[str]:
    """The URLs off the dashboard's origin that ``page`` asks for from now on."""
    origin, asked = base.rstrip("/") + "/", list[str]()
    page.on("request", lambda r: None if r.url.startswith(origin) else asked.append(r.url))
    return asked


def settled_on(page: Any, url: str, go: Callable[[], Any]) -> str:
    """Where ``page`` is once ``go()`` (a navigation) is over and it reached ``url``,
    or gave up trying (a navigation off the dashboard fails here: no such host)."""
    from playwright.sync_api import Error

    with contextlib.suppress(Error):
        go()
        page.wait_for_url(url, timeout=5_000)
    return str(page.url)


def test_signing_in_with_a_hostile_next_stays_on_the_dashboard(page: Any, base: str) -> None:
    """The reported open redirect, through the sign-in form: the browser lands on the
    dashboard's home, on its origin."""
    asked = offsite(page, base)
    page.goto(base + HOSTILE_NEXT)
    page.fill("#token", TOKEN)
    where = settled_on(page, base, lambda: page.click("button[type=submit]"))
    assert asked == [] and where == base


def test_a_signed_in_visit_with_a_hostile_next_stays_on_the_dashboard(
    signed_in: Any, base: str
) -> None:
    """Signed in, the sign-in page redirects at once, on a plain GET (no form, so no
    form-action policy to stop it): still to the dashboard."""
    asked = offsite(signed_in, base)
    where = settled_on(signed_in, base, lambda: signed_in.goto(base + HOSTILE_NEXT))
    assert asked == [] and where == base


@pytest.mark.parametrize("root", ["", "/ops"])
def test_every_next_the_dashboard_accepts_stays_under_it_in_the_browser(
    page: Any, root: str
) -> None:
    """Each hostile ``next`` of the unit tests, as the dashboard puts it in a Location
    (its mount point, then what :func:`safe_next` gave back), parsed by Chromium's own
    URL parser: the same origin, a path under the mount point, and the very URL that
    safe_next said the browser would send."""
    from mongosched.dashboard.actions import safe_next

    page.set_content("<p>parser</p>")
    for target, _ in NEXT_TARGETS:
        location = root + safe_next(target)
        parsed = page.evaluate(
            "loc => { const u = new URL(loc, 'http://dashboard.test/'); "
            "return [u.origin, u.pathname, u.search, u.hash]; }",
            location,
        )
        assert parsed[0] == "http://dashboard.test", (target, location, parsed)
        assert parsed[1].startswith(root + "/"), (target, location, parsed)
        assert parsed[1] + parsed[2] == location and parsed[3] == "", (target, location, parsed)


def test_unauthenticated_requests_are_refused(chromium: Any, base: str) -> None:
    context = chromium.new_context()
    try:
        api = context.request
        for path in ("", "jobs", "metrics", "runners"):
            assert api.get(base + path).status == 401
        assert api.post(base + "pause", form={"kind": "queue", "name": "slow"}).status == 401
        assert api.get(base + "static/dashboard.css").status == 200
        page = context.new_page()
        page.goto(base + "runners")
        assert page.url.startswith(base + "login?next=")
        assert page.locator("#token").is_visible()
    finally:
        context.close()


# Django and Flask mounts ---------------------------------------------------------------------
def test_flask_blueprint_loads_for_staff_and_refuses_anonymous(page: Any, shared: App) -> None:
    pytest.importorskip("flask")
    from flask import Flask, session

    from mongosched.contrib.flask_dashboard import dashboard_blueprint

    site = Flask("browser-site")
    site.config["SECRET_KEY"] = "browser"

    @site.route("/staff-login")
    def staff_login() -> str:
        session["staff"] = True
        return "signed in"

    site.register_blueprint(
        dashboard_blueprint(shared, auth=lambda: session.get("staff") is True), url_prefix="/ops"
    )
    with serve(site) as url:
        assert page.goto(url + "ops/").status == 403
        page.goto(url + "staff-login")
        reply = page.goto(url + "ops/")
        assert reply.status == 200 and page.locator("h1").inner_text() == "Overview"
        page.click("nav >> text=Jobs")
        assert page.url == url + "ops/jobs"


def test_django_admin_mount_loads_for_staff_and_refuses_anonymous(
    page: Any, request: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("django")
    # Playwright's sync API runs an event loop in this thread; the ORM calls made here
    # (set-up only) are still synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    project = request.getfixturevalue("project")
    from django.contrib.auth import get_user_model
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    model = get_user_model()
    if not model.objects.filter(username="browser-staff").exists():
        model.objects.create_user("browser-staff", password="pw-browser", is_staff=True)
    assert project is not None
    with serve(WSGIHandler()) as url:
        page.goto(url + "admin/mongosched/")
        assert "/admin/login/" in page.url  # anonymous: the admin's login
        page.fill("#id_username", "browser-staff")
        page.fill("#id_password", "pw-browser")
        page.click("input[type=submit]")
        page.wait_for_url(url + "admin/mongosched/")
        assert page.locator("h1").inner_text() == "Overview"
        page.goto(url + "admin/")
        page.click("text=Job dashboard")
        assert page.locator("h1").inner_text() == "Overview"
