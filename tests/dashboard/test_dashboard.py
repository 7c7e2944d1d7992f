"""The web dashboard as a WSGI application, in-process: authentication of every route,
the login session, CSRF, escaping, pages, filters, pagination, actions and their
confirmations, the CLI verb. The browser tests are in test_dashboard_browser.py."""

from __future__ import annotations

import html
import re
import urllib.parse
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from mongosched import App, JobStatus, RetryPolicy, current_job
from mongosched.cli import main
from mongosched.dashboard import StandaloneDashboard
from mongosched.dashboard.actions import safe_next
from mongosched.dashboard.auth import COOKIE, TokenAuth
from mongosched.dashboard.http import Request, mounted_request
from mongosched.dashboard.views import runner_anchor
from mongosched.testing import FakeClock, drain
from tests.support.dashboard import (
    NEXT_TARGETS,
    TOKEN,
    XSS,
    Client,
    basic,
    bearer,
    hold,
    populate,
)
from tests.support.waiting import wait_for


@pytest.fixture
def sched(app: App) -> App:
    return app


@pytest.fixture
def jobs(sched: App) -> dict[str, Any]:
    return populate(sched)


@pytest.fixture
def wsgi(sched: App) -> StandaloneDashboard:
    return StandaloneDashboard(sched, TOKEN)


@pytest.fixture
def anonymous(wsgi: StandaloneDashboard) -> Client:
    return Client(wsgi)


@pytest.fixture
def browser(wsgi: StandaloneDashboard) -> Client:
    """A browser signed in through the login form."""
    client = Client(wsgi, headers={"Accept": "text/html"})
    form = client.get("/login")
    reply = client.post("/login", {"csrf_token": form.csrf(), "token": TOKEN, "next": "/"})
    assert reply.status == 303, reply.body
    return client


def first_failed(sched: App) -> Any:
    return sched.get_jobs(task="boom", status="failed", limit=1)[0]


# Authentication -------------------------------------------------------------------------------
def routes(sched: App, jobs: dict[str, Any]) -> list[tuple[str, str]]:
    job = jobs["failed"][0].id
    return [
        ("GET", "/"),
        ("GET", "/jobs"),
        ("GET", "/jobs?status=failed"),
        ("GET", f"/jobs/{job}"),
        ("GET", f"/jobs/{job}/retry"),
        ("POST", f"/jobs/{job}/retry"),
        ("POST", f"/jobs/{job}/cancel"),
        ("GET", "/schedules"),
        ("GET", "/runners"),
        ("GET", "/metrics"),
        ("GET", "/bulk/retry?task=boom"),
        ("POST", "/bulk/retry"),
        ("GET", "/pause?kind=queue&name=default"),
        ("POST", "/pause"),
        ("POST", "/resume"),
        ("POST", "/logout"),
        ("GET", "/static/nothing-here.css"),
        ("GET", "/no/such/page"),
    ]


def test_every_route_but_the_assets_needs_the_token(
    sched: App, jobs: dict[str, Any], anonymous: Client
) -> None:
    for method, path in routes(sched, jobs):
        # An API client: 401 with the challenges, and no data.
        reply = anonymous.request(method, path, form=[("csrf_token", "x")])
        assert reply.status == 401, (method, path, reply.status)
        assert 'Bearer realm="mongosched"' in reply.all("WWW-Authenticate")
        assert "boom" not in reply.body
        # Wrong credentials of each kind are refused alike.
        for headers in (
            {"Authorization": "Bearer nope"},
            basic(password="nope"),
            {"Authorization": "Basic !!!not-base64"},
            {"Authorization": f"Token {TOKEN}"},
        ):
            assert anonymous.request(method, path, headers=headers).status == 401
    # Nothing was changed by all those POSTs.
    assert first_failed(sched).status is JobStatus.FAILED
    assert sched.pauses() == []


def test_a_browser_without_the_token_is_sent_to_the_login_form(anonymous: Client) -> None:
    html = {"Accept": "text/html"}
    reply = anonymous.get("/jobs?status=failed", headers=html)
    assert reply.status == 303
    assert reply.header("Location") == "/login?next=%2Fjobs%3Fstatus%3Dfailed"
    # Every value of the query comes back after signing in (blank ones mean nothing).
    reply = anonymous.get("/jobs?status=failed&status=dead&task=&page=2", headers=html)
    assert reply.header("Location") == (
        "/login?next=%2Fjobs%3Fstatus%3Dfailed%26status%3Ddead%26page%3D2"
    )
    assert anonymous.get("/jobs?task=", headers=html).header("Location") == "/login?next=%2Fjobs"
    # A POST from a browser is refused outright (never redirected and replayed).
    assert anonymous.post("/pause", headers={"Accept": "text/html"}).status == 401


def test_assets_are_public_and_hold_no_data(anonymous: Client) -> None:
    css = anonymous.get("/static/dashboard.css")
    assert css.status == 200 and css.header(
        "Content-Type",
    ).startswith("text/css")  # type: ignore[union-attr]
    assert anonymous.get("/static/dashboard.js").status == 200
    etag = css.header("ETag")
    assert anonymous.get("/static/dashboard.css", headers={"If-None-Match": etag}).status == 304
    assert anonymous.get("/static/../routes.py").status == 401


def test_bearer_and_basic_with_any_user_name_are_accepted(
    jobs: dict[str, Any], anonymous: Client
) -> None:
    for headers in (bearer(), basic("alice"), basic("")):
        reply = anonymous.get("/jobs", headers=headers)
        assert reply.status == 200, headers
        assert "boom" in reply.body


def test_the_token_is_compared_in_constant_time_and_whole() -> None:
    auth = TokenAuth(TOKEN)
    assert auth.check_token(TOKEN)
    assert not auth.check_token(TOKEN[:-1])
    assert not auth.check_token(TOKEN + "x")
    assert not auth.check_token("")


def test_the_login_form_sets_a_signed_http_only_session_cookie(wsgi: StandaloneDashboard) -> None:
    client = Client(wsgi, headers={"Accept": "text/html"})
    form = client.get("/login?next=/runners")
    assert form.status == 200 and 'type="password"' in form.body
    assert 'name="next" value="/runners"' in form.body
    wrong = client.post("/login", {"csrf_token": form.csrf(), "token": "guess", "next": "/"})
    assert wrong.status == 401 and "not right" in wrong.body
    assert client.get("/").status == 303  # still signed out
    reply = client.post("/login", {"csrf_token": form.csrf(), "token": TOKEN, "next": "/runners"})
    assert reply.status == 303 and reply.header("Location") == "/runners"
    cookie = [c for c in reply.all("Set-Cookie") if c.startswith(COOKIE)][0]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie
    assert client.get("/runners").status == 200
    # The session is signed: any change to it signs out.
    good = client.cookies[COOKIE]
    for forged in (good[:-2] + "xx", good.replace("L.", "L.a", 1), "L.abc.99999999999.sig"):
        client.cookies[COOKIE] = forged
        assert client.get("/").status == 303, forged
    client.cookies[COOKIE] = good
    # Signing out ends it.
    page = client.get("/")
    out = client.post("/logout", {"csrf_token": page.csrf()})
    assert out.status == 303 and out.header("Location") == "/login"
    assert client.get("/").status == 303


def test_the_login_form_is_protected_against_forgery(wsgi: StandaloneDashboard) -> None:
    client = Client(wsgi, headers={"Accept": "text/html"})
    client.get("/login")
    assert client.post("/login", {"token": TOKEN}).status == 403
    other = Client(wsgi)  # another browser's form token does not fit this session
    token = other.get("/login").csrf()
    assert client.post("/login", {"csrf_token": token, "token": TOKEN}).status == 403


def test_the_session_cookie_is_secure_behind_https(wsgi: StandaloneDashboard) -> None:
    client = Client(wsgi, headers={"Accept": "text/html", "X-Forwarded-Proto": "https"})
    form = client.get("/login")
    reply = client.post("/login", {"csrf_token": form.csrf(), "token": TOKEN})
    assert all("Secure" in c for c in reply.all("Set-Cookie"))


def test_sessions_expire_and_follow_the_token() -> None:
    now = [1_000_000.0]
    auth = TokenAuth(TOKEN, max_age=60, clock=lambda: now[0])
    session, cookie = auth.new_session(login=True)
    request = Request("GET", "/", cookies={COOKIE: cookie})
    assert auth.authenticate(request) is not None
    now[0] += 61
    assert auth.authenticate(request) is None
    now[0] -= 61
    assert TokenAuth("another token entirely").authenticate(request) is None
    # A cookie that only carries a CSRF session (Basic-auth browsers) does not sign in.
    _, csrf_only = auth.new_session(login=False)
    assert auth.authenticate(Request("GET", "/", cookies={COOKIE: csrf_only})) is None


def test_no_token_no_dashboard(app: App) -> None:
    with pytest.raises(Exception, match="token is required"):
        StandaloneDashboard(app, "")


@pytest.mark.parametrize("target, expected", NEXT_TARGETS)
def test_redirects_stay_on_the_dashboard(target: str, expected: str) -> None:
    assert safe_next(target) == expected
    assert safe_next(expected) == expected  # what it gives back passes as it is


@pytest.mark.parametrize(
    "target",
    ["/\t/other.host/x", "/\\/other.host/x", " //other.host/x", "/\r\n/other.host/x"],
)
def test_a_sign_in_never_sends_the_browser_off_the_dashboard(
    wsgi: StandaloneDashboard, target: str
) -> None:
    """The reported redirect: ``/login?next=/%09/other.host/x`` answered with a
    Location of ``/``, a tab, ``/other.host/x``, which a browser reads as
    ``//other.host/x``: another site."""
    client = Client(wsgi, headers={"Accept": "text/html"})
    form = client.get("/login?" + urllib.parse.urlencode({"next": target}))
    assert 'name="next" value="/"' in form.body
    reply = client.post("/login", {"csrf_token": form.csrf(), "token": TOKEN, "next": target})
    assert reply.status == 303 and reply.header("Location") == "/"
    again = client.get("/login?" + urllib.parse.urlencode({"next": target}))
    assert again.status == 303 and again.header("Location") == "/"  # signed in: at once


@pytest.mark.parametrize(
    "full_path, path, root, tail",
    [
        ("/ops/jobs/jobs/7", "jobs/7", "/ops/jobs", "/jobs/7"),
        ("/ops/jobs/", "", "/ops/jobs", "/"),
        ("/ops/jobs", "", "/ops/jobs", "/"),
        ("/jobs/7", "jobs/7", "", "/jobs/7"),
        ("/", "", "", "/"),
    ],
)
def test_a_framework_request_is_split_at_the_mount_point(
    full_path: str, path: str, root: str, tail: str
) -> None:
    """What the Flask and Django adapters build: links go under the mount point, the
    form is read for POSTs only, header names are lower case."""
    made = {
        method: mounted_request(
            method=method,
            full_path=full_path,
            path=path,
            query=[("status", ("failed", "dead"))],
            form=[("csrf_token", ["t"])],
            headers=[("X-Forwarded-For", "10.0.0.1")],
            scheme="https",
            host="example.com",
        )
        for method in ("GET", "POST")
    }
    for request in made.values():
        assert (request.root, request.path) == (root, tail)
        assert request.url("/jobs") == root + "/jobs"
        assert request.query == {"status": ["failed", "dead"]}
        assert request.header("x-forwarded-for") == "10.0.0.1"
        assert (request.scheme, request.host) == ("https", "example.com")
    assert made["GET"].form == {} and made["POST"].field("csrf_token") == "t"


def test_login_never_redirects_elsewhere(wsgi: StandaloneDashboard) -> None:
    client = Client(wsgi, headers={"Accept": "text/html"})
    form = client.get("/login?next=//evil.example/x")
    assert 'name="next" value="/"' in form.body
    reply = client.post("/login", {"csrf_token": form.csrf(), "token": TOKEN, "next": "//evil"})
    assert reply.header("Location") == "/"


# CSRF -----------------------------------------------------------------------------------------
def test_a_post_without_the_sessions_token_changes_nothing(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    job = first_failed(sched)
    path = f"/jobs/{job.id}/retry"
    token = browser.get(path).csrf()
    assert browser.post(path, {}).status == 403
    assert browser.post(path, {"csrf_token": "forged"}).status == 403
    assert (
        browser.post(path, {"csrf_token": token}, headers={"Origin": "https://evil.example"}).status
        == 403
    )
    assert (
        browser.post(
            path, {"csrf_token": token}, headers={"Referer": "https://evil.example/x"}
        ).status
        == 403
    )
    assert browser.post(path, {"csrf_token": token}, headers={"Origin": "null"}).status == 403
    assert sched.get_job(job.id).status is JobStatus.FAILED  # type: ignore[union-attr]
    # With it (and from this site), the retry happens.
    reply = browser.post(path, {"csrf_token": token}, headers={"Origin": "http://dash.test"})
    assert reply.status == 303
    assert sched.get_job(job.id).status is JobStatus.PENDING  # type: ignore[union-attr]
    assert "done=retried" in (reply.header("Location") or "")


def test_basic_auth_browsers_need_the_token_too_but_bearer_clients_do_not(
    sched: App, jobs: dict[str, Any], wsgi: StandaloneDashboard
) -> None:
    job = first_failed(sched)
    path = f"/jobs/{job.id}/retry"
    client = Client(wsgi, headers=basic())
    assert client.post(path, {}).status == 403  # a browser replays Basic credentials
    token = client.get(path).csrf()  # its first page set a CSRF session cookie
    assert client.post(path, {"csrf_token": token}).status == 303
    assert sched.get_job(job.id).status is JobStatus.PENDING  # type: ignore[union-attr]
    drain(sched)
    # A Bearer header is never sent by a browser on its own: no form token needed.
    assert Client(wsgi).post(path, {}, headers=bearer()).status == 303


# Escaping -------------------------------------------------------------------------------------
def test_nothing_from_jobs_is_rendered_as_html(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    hostile = sched.get_jobs(task=XSS, limit=1)[0]
    pages = [
        "/",
        "/jobs",
        f"/jobs?task={html.escape(XSS)}",
        f"/jobs/{hostile.id}",
        f"/jobs/{hostile.id}/retry",
        "/jobs?queue=hostile",
        "/schedules",
        f"/bulk/retry?task={XSS}",
        f"/pause?kind=task&name={XSS}",
    ]
    for path in pages:
        reply = browser.get(path.replace("<", "%3C").replace(">", "%3E"))
        assert reply.status == 200, (path, reply.status)
        assert "<script>alert" not in reply.body, path
        assert "<b>" not in reply.body, path
    detail = browser.get(f"/jobs/{hostile.id}").body
    assert html.escape(XSS) in detail  # the task name, the argument, the error: as text
    assert detail.count("&lt;script&gt;") >= 3
    boom = browser.get(f"/jobs/{first_failed(sched).id}").body
    assert "&lt;b&gt;" in boom and "Traceback (most recent call last)" in boom


def test_pages_carry_security_headers(jobs: dict[str, Any], browser: Client) -> None:
    reply = browser.get("/")
    policy = reply.header("Content-Security-Policy") or ""
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert reply.header("X-Frame-Options") == "DENY"
    assert reply.header("X-Content-Type-Options") == "nosniff"
    assert "https://" not in reply.body  # nothing loaded from elsewhere


def test_head_answers_without_a_body(jobs: dict[str, Any], browser: Client) -> None:
    reply = browser.request("HEAD", "/")
    assert reply.status == 200 and reply.body == ""


# Pages ----------------------------------------------------------------------------------------
def test_overview_counts_per_queue_and_task_and_draws_the_chart(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    body = browser.get("/").body
    assert "<svg" in body and "4 failed" in body and "1 completed" in body
    for name in ("boom", "add", "later", "tick", "default", "slow", "hostile"):
        assert f">{name}</a>" in body, name
    assert '/jobs?task=boom&amp;status=failed">3</a>' in body
    assert '/jobs?queue=hostile&amp;status=failed">1</a>' in body


def test_a_page_reads_the_live_runners_and_the_pauses_once(
    sched: App, jobs: dict[str, Any], browser: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    for name in ("live_runners", "pauses"):
        real = getattr(sched, name)
        monkeypatch.setattr(sched, name, lambda real=real, name=name: reads.append(name) or real())
    for path in ("/", "/jobs"):
        reads.clear()
        assert browser.get(path).status == 200
        assert reads.count("live_runners") == 1 and reads.count("pauses") == 1, (path, reads)


def test_the_jobs_page_reads_the_task_names_and_labels_once(
    sched: App, jobs: dict[str, Any], browser: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolving a label typed in the task box and the box's suggestions share one read
    of each index."""
    sched.task(name="run")(lambda: None).configure(label="app.tasks.mail").schedule()
    reads: list[str] = []
    for name in ("task_names", "labels"):
        real = getattr(sched.store.admin, name)
        monkeypatch.setattr(
            sched.store.admin, name, lambda real=real, name=name: reads.append(name) or real()
        )
    for path in ("/jobs", "/jobs?task=boom", "/jobs?task=app.tasks.mail"):
        reads.clear()
        assert browser.get(path).status == 200
        assert sorted(reads) == ["labels", "task_names"], (path, reads)


def test_the_overview_reads_no_running_jobs(
    sched: App, jobs: dict[str, Any], browser: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The overview shows counts; the running jobs (up to 1,000 of them read) have a page
    of their own."""
    reads: list[str] = []
    real = sched.store.jobs.running

    def running(*args: Any, **kwargs: Any) -> Any:
        reads.append("running")
        return real(*args, **kwargs)

    monkeypatch.setattr(sched.store.jobs, "running", running)
    assert browser.get("/").status == 200
    assert reads == []


def test_overview_shows_how_late_the_oldest_due_job_is(make_app: Callable[..., App]) -> None:
    from mongosched.testing import FakeClock

    clock = FakeClock()
    app = make_app(clock=clock)

    @app.task(name="slowpoke")
    def slowpoke() -> None: ...

    slowpoke.schedule()
    clock.advance(minutes=7)
    client = Client(StandaloneDashboard(app, TOKEN), headers=bearer())
    body = client.get("/").body
    assert "7 min" in body
    row = re.search(r"<tr><td><a[^>]*>slowpoke</a>.*?</tr>", body)
    assert row and "7 min" in row[0] and ">1</a>" in row[0]


def test_overview_cards_count_over_a_chosen_window_and_jobs_due_later(
    make_app: Callable[..., App],
) -> None:
    """Completed and failed count the jobs finished in the window (1 h, 24 h, 7 d;
    24 h unless chosen), as the chart beneath draws them; Due later counts the
    pending jobs not yet due."""
    from mongosched.testing import FakeClock

    clock = FakeClock()
    app = make_app(clock=clock)
    app.task(name="ok")(lambda: None)

    @app.task(name="bad", retry=0)
    def bad() -> None:
        raise ValueError("no")

    bad.schedule()
    app.schedule("ok")
    drain(app)  # both finished 3 days ago
    clock.advance(days=2)
    app.schedule("ok")
    drain(app)  # one finished 1 day ago
    clock.advance(days=1)
    app.schedule("ok")
    drain(app)  # one finished now
    app.schedule("ok")  # due now
    for hours in (1, 30):
        app.get_task("ok").configure(delay=hours * 3600).schedule()
    client = Client(StandaloneDashboard(app, TOKEN), headers=bearer())

    def cards(path: str) -> dict[str, str]:
        body = client.get(path).body
        found = re.findall(r'<span class="label">([^<]*)</span><span class="value">([^<]*)<', body)
        return dict(found)

    default = cards("/")
    assert (default["Completed, 24 h"], default["Failed, 24 h"]) == ("1", "0")
    assert (default["Due"], default["Due later"]) == ("1", "2")
    assert cards("/?window=1h")["Completed, 1 h"] == "1"
    week = cards("/?window=7d")
    assert (week["Completed, 7 d"], week["Failed, 7 d"]) == ("3", "1")
    assert cards("/?window=bogus") == default
    body = client.get("/?window=7d").body
    assert '<a href="/?window=7d" aria-current="page">7 d</a>' in body
    assert "<h2>Throughput, last 7 d</h2>" in body
    assert 'aria-label="Throughput: 3 completed, 1 failed"' in body
    assert re.search(r'<text class="axis"[^>]*>(Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d\d:\d\d<', body)
    assert 'href="/jobs?status=pending&amp;sort=run_at"' in body  # Due later: soonest first


def test_overview_warns_of_due_jobs_no_live_runner_serves(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    from datetime import timedelta

    from mongosched._core.records import RunnerInfo

    @sched.task(name="rush", queue="urgent")
    def rush() -> None: ...

    rush.schedule()
    rush.schedule()
    now = sched.now()

    def register(name: str, queues: tuple[str, ...] | None, tasks: tuple[str, ...]) -> None:
        info = RunnerInfo(name, name, "host", 1, queues, tasks, 1, 0, now, now, "test")
        sched.store.admin.save_runner(info, now + timedelta(minutes=5))

    def warnings() -> list[str]:
        body = browser.get("/").body
        found = re.findall(r'<div class="warning">(.*?)</div>', body)
        return [html.unescape(re.sub("<[^>]+>", "", w)) for w in found]

    # No runner at all: the queue is named (a link to its due jobs), with how many.
    assert '<a href="/jobs?queue=urgent&amp;status=pending">urgent</a>' in browser.get("/").body
    assert "No live runner serves queue urgent: 2 jobs are due there." in warnings()
    # A paused queue is meant not to be served: no warning.
    sched.pause(queue="urgent")
    assert not any("queue urgent" in w for w in warnings())
    sched.resume(queue="urgent")
    # A runner on the other queues only: still unserved.
    register("w1", ("default", "slow"), ("rush", "boom"))
    assert "No live runner serves queue urgent: 2 jobs are due there." in warnings()
    # A runner on that queue, but without the task: the task is named.
    register("w2", ("urgent",), ("boom",))
    found = warnings()
    assert not any("queue urgent" in w for w in found)
    assert "No live runner serves task rush: 2 jobs are due." in found
    # Served (every queue, this task): no warning.
    register("w3", None, ("rush",))
    assert not any("No live runner" in w for w in warnings())


def test_jobs_filter_by_task_queue_and_status(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    def ids(reply: Any) -> set[str]:
        return set(re.findall(r'href="/jobs/([0-9a-f]{24})"', reply.body))

    failed = {str(j.id) for j in jobs["failed"]}
    assert ids(browser.get("/jobs?task=boom")) == failed
    assert ids(browser.get("/jobs?task=boom&status=completed")) == set()
    assert ids(browser.get("/jobs?status=completed")) == {str(jobs["done"].id)}
    assert ids(browser.get("/jobs?queue=slow")) == {str(jobs["pending"].id)}
    assert ids(browser.get("/jobs?status=completed&status=pending&queue=slow")) == {
        str(jobs["pending"].id)
    }
    assert ids(browser.get("/jobs?status=completed,pending&queue=default&task=add")) == {
        str(jobs["done"].id)
    }
    assert "0 jobs match" in browser.get("/jobs?task=nothing").body
    page = browser.get("/jobs?task=boom&status=failed").body
    assert 'value="failed" checked' in page and 'value="boom"' in page
    assert browser.get("/jobs?status=bogus&sort=-nonsense").status == 200
    assert browser.get("/jobs?status=bogus&sort=-nonsense&page=x").status == 400


def test_jobs_list_shows_arguments_run_time_and_the_error_message(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    body = browser.get("/jobs?task=boom").body
    headers = re.findall(r'<th scope="col">([^<]*)</th>', body)
    assert headers[:2] == ["Job", "Task"] and "Arguments" in headers and "Run time" in headers
    rows = re.findall(r"<tr><td>.*?</tr>", body)
    assert len(rows) == 3
    row = rows[0]
    # The arguments, escaped and shortened; the error's type and message.
    assert "&lt;b&gt;" in row and "<b>" not in row
    assert "ValueError: bad input &lt;b&gt;" in row
    # The link names the job readably (the end of its id), the whole id its tooltip.
    link = re.search(
        r'<a class="mono" href="/jobs/([0-9a-f]{24})" title="Job ([0-9a-f]{24})">…([0-9a-f]+)</a>',
        row,
    )
    assert link and link[1] == link[2] and link[2].endswith(link[3]) and len(link[3]) == 8
    # A finished job's run time is a duration (the drain runs them in milliseconds).
    assert re.search(r"<td>\d+ ms</td>", row)

    # Long arguments are cut, saying so; nothing of them becomes HTML.
    @sched.task(name="wordy")
    def wordy(text: str) -> None: ...

    wordy.schedule("x" * 500 + XSS)
    listing = browser.get("/jobs?task=wordy").body
    cell = re.search(r'<td><span class="args" title="([^"]*)">([^<]*)</span></td>', listing)
    assert cell and cell[2].endswith("…") and len(html.unescape(cell[2])) <= 81
    assert XSS not in listing


def test_the_task_filter_offers_registered_and_stored_task_names(
    make_app: Callable[..., App], sched: App, jobs: dict[str, Any]
) -> None:
    # Another app (a web process) that registers no task still offers the stored ones.
    other = make_app()
    client = Client(StandaloneDashboard(other, TOKEN), headers=bearer())
    body = client.get("/jobs").body
    names = re.search(r'<datalist id="task-names">(.*?)</datalist>', body)
    assert names is not None
    offered = set(re.findall(r'<option value="([^"]*)">', names[1]))
    assert {"boom", "add", "later", "tick", html.escape(XSS)} <= offered


def test_labelled_jobs_show_filter_and_pause_by_their_label(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    """Jobs of one task labelled with another name (Django tasks-framework jobs, by
    their Django task's path) are listed, offered, filtered and paused by the label."""
    run = sched.task(name="run")(lambda text: text)
    mail = run.configure(label="app.tasks.mail").schedule("m")
    other = run.configure(label="app.tasks.other").schedule("o")

    def ids(path: str) -> set[str]:
        return set(re.findall(r'href="/jobs/([0-9a-f]{24})"', browser.get(path).body))

    listing = browser.get("/jobs?task=run").body
    row = next(r for r in re.findall(r"<tr><td>.*?</tr>", listing) if str(mail.id) in r)
    assert '<a href="/jobs?label=app.tasks.mail">app.tasks.mail</a>' in row
    assert '<span class="muted small cut" title="run">run</span>' in row
    names = re.search(r'<datalist id="task-names">(.*?)</datalist>', listing)
    assert names and {"app.tasks.mail", "run"} <= set(re.findall(r'value="([^"]*)"', names[1]))
    # Typed in the task box, or followed from a link: the label's jobs alone.
    assert ids("/jobs?task=app.tasks.mail") == ids("/jobs?label=app.tasks.mail") == {str(mail.id)}
    assert (
        'name="task" list="task-names" value="app.tasks.mail"'
        in browser.get("/jobs?label=app.tasks.mail").body
    )
    assert ids("/jobs?task=run") == {str(mail.id), str(other.id)}
    page = browser.get(f"/jobs/{mail.id}").body
    assert '<dt>Task</dt><dd><a href="/jobs?label=app.tasks.mail">app.tasks.mail</a>' in page
    assert 'runs as <a href="/jobs?task=run">run</a>' in page
    pause = re.search(r'href="(/pause\?kind=task&amp;name=app.tasks.mail[^"]*)"', page)
    assert pause is not None
    form = browser.get(html.unescape(pause[1]))
    reply = browser.post(
        "/pause",
        {"csrf_token": form.csrf(), "kind": "task", "name": "app.tasks.mail", "next": "/"},
    )
    assert reply.status == 303
    assert mail.refresh().status is JobStatus.PAUSED
    assert other.refresh().status is JobStatus.PENDING
    assert "Resume" in browser.get(f"/jobs/{mail.id}").body
    # The overview counts the label's jobs under it, paused, with its Resume button.
    overview = browser.get("/").body
    tasks = overview[overview.index("<h2>Tasks</h2>") :]
    row = re.search(r'<tr><td><a href="/jobs\?task=app.tasks.other">.*?</tr>', tasks)
    assert row and '<a href="/jobs?task=app.tasks.other&amp;status=pending">1</a>' in row[0]
    paused = re.search(r'<tr><td><a href="/jobs\?task=app.tasks.mail">.*?</tr>', tasks)
    assert paused and "s-paused" in paused[0] and "Resume" in paused[0]


def test_jobs_filter_by_error_type_where_the_app_can(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    reply = browser.get("/jobs?error=ValueError")
    found = set(re.findall(r'href="/jobs/([0-9a-f]{24})"', reply.body))
    assert found == {str(j.id) for j in jobs["failed"]}


def test_jobs_page_through_the_index_in_stable_pages(sched: App, browser: Client) -> None:
    @sched.task(name="many")
    def many(i: int) -> None: ...

    for i in range(120):
        many.configure(delay=3600).schedule(i)
    seen: list[str] = []
    for page in (1, 2, 3):
        reply = browser.get(f"/jobs?task=many&sort=created_at&page={page}")
        found = re.findall(r'href="/jobs/([0-9a-f]{24})"', reply.body)
        assert len(found) == (50 if page < 3 else 20)
        assert f"Page {page} of 3" in reply.body
        seen += found
        assert ('rel="next"' in reply.body) == (page < 3)
        assert ('rel="prev"' in reply.body) == (page > 1)
    assert len(set(seen)) == 120
    assert (
        "task=many&amp;sort=created_at&amp;page=2"
        in browser.get("/jobs?task=many&sort=created_at").body
    )
    # A page past the end is an empty page, not an error.
    assert "No jobs match" in browser.get("/jobs?task=many&page=9").body


def test_a_job_shows_arguments_result_attempts_and_traceback(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    done = browser.get(f"/jobs/{jobs['done'].id}").body
    assert "Arguments" in done and "Result" in done and '<pre class="code">5</pre>' in done
    assert "1 of" in done  # attempts
    failed = browser.get(f"/jobs/{first_failed(sched).id}").body
    assert "ValueError" in failed and "bad input" in failed and 'class="traceback"' in failed
    assert "Retry…" in failed
    assert browser.get("/jobs/0123456789abcdef01234567").status == 404
    assert browser.get("/jobs/not-an-id").status == 404


def test_a_job_shows_the_error_of_each_attempt(sched: App, browser: Client) -> None:
    @sched.task(name="flaky", retry=RetryPolicy(retries=2, delay=0))
    def flaky(n: int) -> None:
        attempt = current_job().attempt  # type: ignore[union-attr]
        raise (KeyError if attempt == 2 else ValueError)(f"attempt {attempt} <of {n}>")

    job = flaky.schedule(3)
    drain(sched)
    body = browser.get(f"/jobs/{job.id}").body
    assert "<h2>Failed attempts</h2>" not in body  # each told with its attempt, in its run
    panel = body[body.index("<h2>Runs") :]
    found = re.findall(r"Attempt (\d)\b.*?<strong class=\"mono\">([\w.]+)</strong>: ([^<]*)", panel)
    assert found == [
        ("1", "builtins.ValueError", "attempt 1 &lt;of 3&gt;"),
        ("2", "builtins.KeyError", "&#x27;attempt 2 &lt;of 3&gt;&#x27;"),
        ("3", "builtins.ValueError", "attempt 3 &lt;of 3&gt;"),
    ]
    assert panel.count('class="traceback"') == 3 and "<h2>Error</h2>" not in body


def test_a_running_job_shows_its_lease_owner_and_progress(sched: App, browser: Client) -> None:
    @sched.task(name="slow")
    def slow() -> None: ...

    job = slow.schedule()
    claimed = sched.store.claims.claim(
        owner="host-1:4242:runner", tasks=["slow"], queues=None, now=sched.now(), lease_duration=30
    )
    assert claimed is not None and claimed.lease is not None
    sched.store.leases.write_progress(
        job.id, claimed.lease.token, 0.25, "a quarter <done>", sched.now()
    )
    body = browser.get(f"/jobs/{job.id}").body
    assert "host-1:4242:runner" in body and "Lease until" in body
    assert '<progress max="1" value="0.2500">' in body and "a quarter &lt;done&gt;" in body
    assert "Cancel…" in body and "Retry…" not in body


def test_the_job_page_shows_run_time_links_the_lease_holder_and_refreshes_while_running(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    @sched.task(name="slow")
    def slow() -> None: ...

    job = slow.schedule()
    hold(sched, "slow", "host-1:4242:runner")
    body = browser.get(f"/jobs/{job.id}").body
    owner = '<a class="mono" href="/runners#runner-host-1%3A4242%3Arunner">host-1:4242:runner</a>'
    assert owner in body
    assert "<dt>Run time</dt>" in body and 'data-refresh="running"' in body
    done = browser.get(f"/jobs/{jobs['done'].id}").body
    assert re.search(r"<dt>Run time</dt><dd>\d+ ms</dd>", done) and "data-refresh" not in done


def test_the_job_page_shows_the_log_records_kept_with_the_job(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    hostile = sched.get_jobs(task=XSS, limit=1)[0]
    body = browser.get(f"/jobs/{hostile.id}").body
    assert "<h2>Logs</h2>" in body and '<table class="logs">' in body
    assert "<td>WARNING</td><td>hostile</td><td>1</td>" in body
    assert f"about to fail: {html.escape(XSS, quote=False)}" in body and XSS not in body
    done = browser.get(f"/jobs/{jobs['done'].id}").body
    assert "<h2>Logs</h2>" not in done  # it logged nothing


def test_a_schedule_reads_as_a_schedule(sched: App, jobs: dict[str, Any], browser: Client) -> None:
    tick = next(s for s in sched.schedules() if s["task"] == "tick")
    body = browser.get(f"/jobs/{tick['id']}").body
    assert "<dt>Next run</dt>" in body and "<dt>Due</dt>" not in body
    assert '<dt>Status</dt><dd><span class="badge s-scheduled">scheduled</span>' in body
    assert "<dt>Repeats</dt><dd>every 1 h</dd>" in body
    assert "<dt>Last run</dt><dd>not yet</dd>" in body  # its first slot is an hour away


def test_runners_lists_the_live_runners(sched: App, browser: Client) -> None:
    assert "No runner is registered." in browser.get("/runners").body
    runner = sched.runner(workers=3, queues=["q1", "q2"], name="runner-<x>").start()
    try:
        body = wait_for(lambda: (b := browser.get("/runners").body) and "runner-" in b and b)
        assert "runner-&lt;x&gt;" in body and "q1, q2" in body and "live" in body
        assert "<td>3</td>" in body  # threads
    finally:
        runner.stop(graceful=True, timeout=5)


def test_schedules_show_rule_next_and_last_run(jobs: dict[str, Any], browser: Client) -> None:
    body = browser.get("/schedules").body
    assert "tick" in body and "every 1 h<" in body and "Next run" in body


def test_metrics_parse_with_prometheus_clients_parser(
    jobs: dict[str, Any], browser: Client
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    reply = browser.get("/metrics")
    assert reply.status == 200
    assert (reply.header("Content-Type") or "").startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(reply.body)}
    depth = {
        (s.labels["queue"], s.labels["task"], s.labels["status"]): s.value
        for s in families["mongosched_jobs"].samples
    }
    assert depth[("slow", "later", "pending")] == 1


def test_unknown_pages_and_methods(browser: Client) -> None:
    assert browser.get("/nope").status == 404
    assert browser.post("/jobs", {"csrf_token": browser.get("/").csrf()}).status == 405
    assert browser.request("PUT", "/").status == 405


# Actions --------------------------------------------------------------------------------------
def test_retry_and_cancel_one_job_after_confirming(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    job = first_failed(sched)
    confirm = browser.get(f"/jobs/{job.id}/retry")
    assert confirm.status == 200 and "again now?" in confirm.body
    assert sched.get_job(job.id).status is JobStatus.FAILED  # type: ignore[union-attr]  # GET changes nothing
    done = browser.post(f"/jobs/{job.id}/retry", {"csrf_token": confirm.csrf()})
    assert browser.get(done.header("Location") or "").body.count("Job queued to run again.") == 1
    page = browser.get(f"/jobs/{job.id}/cancel")
    reply = browser.post(f"/jobs/{job.id}/cancel", {"csrf_token": page.csrf()})
    assert "done=cancelled" in (reply.header("Location") or "")
    assert sched.get_job(job.id).status is JobStatus.CANCELLED  # type: ignore[union-attr]
    # Retrying what cannot be retried says why, on the confirmation page.
    completed = jobs["done"]
    wrong = browser.post(f"/jobs/{completed.id}/retry", {"csrf_token": page.csrf()})
    assert wrong.status == 409 and "only failed, cancelled or expired" in wrong.body


def test_the_audit_page_lists_actions_with_who_did_them(
    sched: App, jobs: dict[str, Any], browser: Client, anonymous: Client
) -> None:
    job = first_failed(sched)
    confirm = browser.get(f"/jobs/{job.id}/retry")
    browser.post(f"/jobs/{job.id}/retry", {"csrf_token": confirm.csrf()})
    confirm = browser.get("/bulk/cancel?task=boom")
    browser.post("/bulk/cancel", [("csrf_token", confirm.csrf()), ("task", "boom")])
    anonymous.post("/pause", {"kind": "queue", "name": "slow"}, headers=bearer())
    sched.pause(queue="other", actor="api-user <b>")
    got = [(e.actor, e.via, e.action, e.count) for e in reversed(sched.audit.entries())]
    assert got == [
        ("dashboard token", "dashboard", "retry", 1),
        ("dashboard token", "dashboard", "cancel", 1),
        ("API token", "dashboard", "pause", None),
        ("api-user <b>", "api", "pause", None),
    ]
    body = browser.get("/audit").body
    assert "<h1>Audit trail</h1>" in body and 'href="/audit"' in body  # in the navigation
    rows = re.findall(r"<tr>(.*?)</tr>", body.split("<tbody>", 1)[1])
    assert len(rows) == 4
    assert "api-user &lt;b&gt;" in rows[0] and "<td>queue other</td>" in rows[0]
    assert f'<a href="/jobs/{job.id}">job {job.id} (boom)</a>' in rows[3]
    assert "<td>retry</td>" in rows[3]


def test_a_job_page_groups_attempts_into_runs_by_who_retried_and_links_the_audit(
    sched: App, browser: Client
) -> None:
    """Each operator's retry starts a run, headed by who did it, through what and when;
    each attempt says which runner, host and process ran it, and its error. The job
    links to its audit entries, which link back to it."""

    @sched.task(name="twice", retry=RetryPolicy(retries=1, delay=0))
    def twice() -> None:
        raise ValueError(f"attempt {current_job().attempt}")  # type: ignore[union-attr]

    job = twice.schedule()
    drain(sched)
    with sched.audit.acting("alice@laptop", "cli"):
        sched.retry_job(job.id)
    drain(sched)
    confirm = browser.get(f"/jobs/{job.id}/retry")
    browser.post(f"/jobs/{job.id}/retry", {"csrf_token": confirm.csrf()})
    body = browser.get(f"/jobs/{job.id}").body
    panel = body[body.index("<h2>Runs") : body.index("</section>", body.index("<h2>Runs"))]
    heads = re.findall(r'<p class="run-head">(.*?)</p>', panel)
    text = [re.sub(r"<[^>]+>", "", h) for h in heads]
    assert len(text) == 3
    assert text[0].startswith("Run 1 · as scheduled ")
    assert text[1].startswith("Run 2 · retried by alice@laptop via cli ")
    assert text[2].startswith("Run 3 · retried by dashboard token via dashboard ")
    runs = panel.split('<p class="run-head">')[1:]
    assert [re.findall(r"Attempt (\d) <span class=\"badge s-(\w+)\"", r) for r in runs] == [
        [("1", "retried"), ("2", "failed")],
        [("1", "retried"), ("2", "failed")],
        [],
    ]
    assert "Not run yet." in runs[2]
    history = sched.get_job(job.id).history  # type: ignore[union-attr]
    assert len(history) == 4 and all(a.pid is not None and a.host for a in history)
    first = history[0]
    assert f"on <strong>{first.host}</strong> pid {first.pid}" in runs[0]
    assert f"#{runner_anchor(first.runner)}" in runs[0]
    assert runs[1].count('<strong class="mono">builtins.ValueError</strong>') == 2
    audit = f'href="/audit?job={job.id}"'
    assert audit in heads[1] and audit in heads[2] and "its audit trail" in panel
    trail = browser.get(f"/audit?job={job.id}").body
    rows = re.findall(r"<tr>(.*?)</tr>", trail.split("<tbody>", 1)[1])
    assert len(rows) == 2 and "alice@laptop" in rows[1] and "dashboard token" in rows[0]
    assert all(f'<a href="/jobs/{job.id}">' in row for row in rows)
    assert f'href="/jobs/{job.id}">its page</a>' in trail
    # A retry of many jobs by a filter keeps no job's id: the run says where to look.
    drain(sched)
    sched.retry_jobs(task="twice")
    drain(sched)
    heads = re.findall(r'<p class="run-head">(.*?)</p>', browser.get(f"/jobs/{job.id}").body)
    assert len(heads) == 4
    assert re.sub(r"<[^>]+>", "", heads[3]) == "Run 4 · retried · the audit trail says by whom"


def test_bulk_retry_by_the_filter_shows_the_dry_run_count_first(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    listing = browser.get("/jobs?task=boom&status=failed")
    assert "/bulk/retry?task=boom&amp;status=failed" in listing.body
    confirm = browser.get("/bulk/retry?task=boom&status=failed")
    assert "Retry <strong>3</strong> failed, cancelled or expired jobs" in confirm.body
    assert all(j.status is JobStatus.FAILED for j in sched.get_jobs(task="boom"))
    reply = browser.post(
        "/bulk/retry",
        [("csrf_token", confirm.csrf()), ("task", "boom"), ("status", "failed")],
    )
    assert reply.status == 303
    assert "done=bulk-retry&n=3" in (reply.header("Location") or "")
    assert {j.status for j in sched.get_jobs(task="boom")} == {JobStatus.PENDING}
    # The other failed job (another task) was left alone.
    assert sched.get_jobs(task=XSS)[0].status is JobStatus.FAILED
    nothing = browser.get("/bulk/retry?task=boom&status=failed")
    assert "nothing to do" in nothing.body


def test_bulk_buttons_offer_only_what_applies_with_the_count_they_touch(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    def buttons(path: str) -> dict[str, str]:
        body = browser.get(path).body
        found = re.findall(r'href="/bulk/(\w+)\?[^"]*">([^<]*)</a>', body)
        found += re.findall(r'href="/bulk/(\w+)">([^<]*)</a>', body)
        return dict(found)

    # On failed jobs: retry and delete them (4), never cancel them.
    assert buttons("/jobs?status=failed") == {"retry": "Retry 4 jobs…", "purge": "Delete 4 jobs…"}
    # Unfiltered: each button counts what its action touches, not every match.
    everything = buttons("/jobs")
    assert everything["retry"] == "Retry 4 jobs…"
    assert everything["cancel"] == "Cancel 2 jobs…"  # the pending one and the schedule
    assert everything["purge"] == "Delete 5 jobs…"
    # The confirmation says the same count and the same action.
    confirm = browser.get("/bulk/retry").body
    assert "Retry <strong>4</strong>" in confirm and "Retry 4 jobs</button>" in confirm
    # Nothing that applies: no button at all.
    assert buttons("/jobs?status=pending&queue=hostile") == {}
    assert buttons("/jobs?status=completed") == {"purge": "Delete 1 job…"}


def test_delete_one_finished_job(sched: App, jobs: dict[str, Any], browser: Client) -> None:
    done = jobs["done"]
    page = browser.get(f"/jobs/{done.id}")
    assert "Delete…" in page.body
    confirm = browser.get(f"/jobs/{done.id}/purge")
    assert "for good?" in confirm.body
    reply = browser.post(f"/jobs/{done.id}/purge", {"csrf_token": confirm.csrf()})
    assert reply.header("Location") == "/jobs?done=purged"
    assert sched.get_job(done.id) is None
    pending = jobs["pending"]
    assert "Delete…" not in browser.get(f"/jobs/{pending.id}").body
    refused = browser.post(f"/jobs/{pending.id}/purge", {"csrf_token": confirm.csrf()})
    assert refused.status == 409 and "only finished jobs" in refused.body
    assert sched.get_job(pending.id) is not None


def test_bulk_cancel_and_purge(sched: App, jobs: dict[str, Any], browser: Client) -> None:
    confirm = browser.get("/bulk/cancel?queue=slow")
    assert "<strong>1</strong>" in confirm.body
    browser.post("/bulk/cancel", [("csrf_token", confirm.csrf()), ("queue", "slow")])
    assert sched.get_job(jobs["pending"].id).status is JobStatus.CANCELLED  # type: ignore[union-attr]
    confirm = browser.get("/bulk/purge?task=add&status=completed")
    assert "<strong>1</strong>" in confirm.body
    browser.post(
        "/bulk/purge", [("csrf_token", confirm.csrf()), ("task", "add"), ("status", "completed")]
    )
    assert sched.get_job(jobs["done"].id) is None


def test_pause_and_resume_a_queue(sched: App, jobs: dict[str, Any], browser: Client) -> None:
    overview = browser.get("/")
    assert "/pause?kind=queue&amp;name=slow" in overview.body
    confirm = browser.get("/pause?kind=queue&name=slow&next=/")
    assert "stop claiming jobs of queue <strong>slow</strong>" in confirm.body
    assert sched.pauses() == []
    reply = browser.post(
        "/pause",
        [("csrf_token", confirm.csrf()), ("kind", "queue"), ("name", "slow"), ("next", "/")],
    )
    assert reply.header("Location") == "/?done=paused"
    assert [(p.kind, p.name) for p in sched.pauses()] == [("queue", "slow")]
    overview = browser.get("/?done=paused")
    assert "Paused." in overview.body and "/resume?kind=queue&amp;name=slow" in overview.body
    confirm = browser.get("/resume?kind=queue&name=slow")
    browser.post("/resume", [("csrf_token", confirm.csrf()), ("kind", "queue"), ("name", "slow")])
    assert sched.pauses() == []
    assert browser.get("/pause?kind=nonsense&name=x").status == 400


def test_notices_come_from_codes_never_from_the_url(jobs: dict[str, Any], browser: Client) -> None:
    body = browser.get("/?done=<b>owned</b>&n=<i>").body
    assert "owned" not in body
    assert "3 job(s) queued" in browser.get("/jobs?done=bulk-retry&n=3").body


def test_database_errors_are_a_page_not_a_crash(
    sched: App, browser: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mongosched.errors import StoreUnavailable

    def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("no server answered")

    monkeypatch.setattr(sched, "stats", down)
    reply = browser.get("/")
    assert reply.status == 503 and "no server answered" in reply.body


# The command ----------------------------------------------------------------------------------
def test_the_command_refuses_to_start_without_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("MONGOSCHED_DASHBOARD_TOKEN", raising=False)
    assert main(["dashboard", "--uri", "memory://dash-cli"]) == 2
    assert "needs a token" in capsys.readouterr().err
    assert main(["dashboard", "--uri", "memory://dash-cli", "--port", "70000", "--token", "t"]) == 2


def test_the_command_serves_with_the_token_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import threading
    import urllib.request

    from mongosched.dashboard import standalone

    monkeypatch.setenv("MONGOSCHED_DASHBOARD_TOKEN", TOKEN)
    started: list[Any] = []
    real = standalone.make_server_for

    def recording(*args: Any, **kwargs: Any) -> Any:
        server = real(*args, **kwargs)
        started.append(server)
        return server

    monkeypatch.setattr(standalone, "make_server_for", recording)
    import mongosched.dashboard as package

    monkeypatch.setattr(package, "make_server_for", recording)
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(
            main(["dashboard", "--uri", "memory://dash-cli", "--port", "0", "--server", "wsgiref"])
        )
    )
    caplog.set_level("INFO", logger="mongosched")
    thread.start()
    from tests.support.waiting import wait_for

    server = wait_for(lambda: started and started[0])
    assert server.host == "127.0.0.1"
    request = urllib.request.Request(
        server.url + "jobs", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200
    server.shutdown()
    thread.join(timeout=5)
    assert result == [0]
    assert "with wsgiref" in caplog.text


def test_the_command_is_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "dashboard" in capsys.readouterr().out
    assert main(["dashboard", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--token" in out and "127.0.0.1" in out


def test_edit_a_schedule_at_runtime(sched: App, jobs: dict[str, Any], browser: Client) -> None:
    listing = browser.get("/schedules")
    assert "/schedules/edit?id=schedule%3Atick" in listing.body
    form = browser.get("/schedules/edit?id=schedule:tick")
    assert form.status == 200
    assert 'name="every" value="3600"' in form.body and 'name="cron" value=""' in form.body
    fields = {"csrf_token": form.csrf(), "id": "schedule:tick", "every": "3600", "priority": "5"}
    # Nothing changed, a bad rule, a missing CSRF token: the schedule stays as it is.
    same = browser.post("/schedules/edit", {**fields, "queue": "default"})
    assert same.status == 400 and "Nothing was changed." in same.body
    bad = browser.post("/schedules/edit", {**fields, "every": "", "cron": "61 * * * *"})
    assert bad.status == 400 and 'value="61 * * * *"' in bad.body
    word = browser.post("/schedules/edit", {**fields, "priority": "high"})
    assert word.status == 400 and "priority a whole number" in word.body
    assert (
        browser.post("/schedules/edit", {"id": "schedule:tick", "cron": "5 * * * *"}).status == 403
    )
    assert [r["rule"] for r in sched.schedules() if r["task"] == "tick"] == ["every 3600.0s"]
    # A new rule and priority land, and the next run is recomputed.
    done = browser.post(
        "/schedules/edit",
        {
            **fields,
            "every": "",
            "cron": "*/10 * * * *",
            "timezone": "Europe/Berlin",
            "priority": "2",
        },
    )
    assert done.status == 303 and done.header("Location") == "/schedules?done=edited"
    (row,) = [r for r in sched.schedules() if r["task"] == "tick"]
    assert row["rule"] == "*/10 * * * *" and row["timezone"] == "Europe/Berlin"
    assert row["priority"] == 2 and row["next_run"].minute % 10 == 0
    page = browser.get("/schedules?done=edited").body
    assert "Schedule changed" in page and "edited" in page
    assert browser.get("/schedules/edit?id=schedule:nothing").status == 404


def test_run_a_schedule_now_and_backfill_it(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    listing = browser.get("/schedules").body
    assert "/schedules/trigger?id=schedule%3Atick" in listing
    assert "/schedules/backfill?id=schedule%3Atick" in listing
    form = browser.get("/schedules/trigger?id=schedule:tick")
    assert form.status == 200 and "Run now" in form.body
    assert browser.post("/schedules/trigger", {"id": "schedule:tick"}).status == 403  # CSRF
    done = browser.post("/schedules/trigger", {"csrf_token": form.csrf(), "id": "schedule:tick"})
    assert done.status == 303 and done.header("Location") == "/schedules?done=triggered"
    assert sched.count_jobs(task="tick") == 2  # the schedule, and its run now
    form = browser.get("/schedules/backfill?id=schedule:tick")
    slot = sched.get_job("schedule:tick").scheduled_for
    start, end = (slot - timedelta(hours=h) for h in (5, 1))
    fields = {"csrf_token": form.csrf(), "id": "schedule:tick", "at_once": "2"}
    bad = browser.post("/schedules/backfill", {**fields, "start": "yesterday", "end": "now"})
    assert bad.status == 400 and "give a time as ISO 8601" in bad.body
    times = {"start": start.isoformat(), "end": end.isoformat()}
    many = browser.post("/schedules/backfill", {**fields, **times, "at_once": "two"})
    assert many.status == 400 and "at most at once must be a whole number" in many.body
    backwards = {**fields, "start": end.isoformat(), "end": start.isoformat()}
    assert "is before start" in browser.post("/schedules/backfill", backwards).body
    ok = {**fields, "start": start.isoformat(), "end": end.isoformat()}
    done = browser.post("/schedules/backfill", ok)
    assert done.status == 303 and done.header("Location") == "/schedules?done=backfilled&n=2"
    assert "Backfill started: 2 job(s)" in browser.get("/schedules?done=backfilled&n=2").body
    assert browser.get("/schedules/backfill?id=schedule:nothing").status == 404


def test_a_finished_schedule_is_refused_with_the_reason_not_a_crash(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    form = browser.get("/schedules/trigger?id=schedule:tick")
    sched.pause(schedule="tick")
    sched.cancel("schedule:tick")  # it finishes while the form is open
    listed = browser.get("/schedules").body  # listed, switched off: only its resume
    assert "/schedules/trigger?id=schedule%3Atick" not in listed
    assert "/schedules/edit?id=schedule%3Atick" not in listed
    assert "/resume?kind=schedule&amp;name=schedule%3Atick" in listed
    why = "schedule schedule:tick (tick) was cancelled, which stops it for good"
    fields = {"csrf_token": form.csrf(), "id": "schedule:tick"}
    slot = sched.get_job("schedule:tick").scheduled_for
    times = {"start": (slot - timedelta(hours=5)).isoformat(), "end": slot.isoformat()}
    posts = [
        ("/schedules/trigger", fields, 400),
        ("/schedules/edit", {**fields, "every": "60"}, 400),
        ("/schedules/backfill", {**fields, **times}, 400),
        ("/pause", {**fields, "kind": "schedule", "name": "tick"}, 409),
        ("/resume", {**fields, "kind": "schedule", "name": "tick"}, 409),  # its pause goes
    ]
    for path, form_fields, status in posts:
        reply = browser.post(path, form_fields)
        assert reply.status == status, (path, reply.body)
        assert why in html.unescape(reply.body), path
    assert sched.count_jobs(task="tick") == 1 and sched.pauses() == []


OUT_OF_BOUNDS_QUERIES = [
    ("/jobs?page=" + "9" * 5000, "page must be a whole number from 1 to 1000000, not a 5000"),
    ("/jobs?page=1000001", "page must be an int from 1 to 1000000, not 1000001"),
    # Digits other than ASCII's, which int() and str.isdigit() take: refused too.
    ("/jobs?page=²", "page must be a whole number, not"),
    ("/jobs?page=١", "page must be a whole number, not"),
    ("/jobs?page=two", "page must be a whole number, not"),
    ("/schedules?done=backfilled&n=²", "n must be a whole number, not"),
]
OUT_OF_BOUNDS_BACKFILLS = [
    ({"start": "9999-12-30T00:00", "end": "9999-12-31T00:00"}, "start must be from 1900-01-01"),
    ({"start": "2030-01-01T00:00", "end": "9999-12-31T23:59"}, "end must be from 1900-01-01"),
    ({"start": "0001-01-01T00:00", "end": "2030-01-01T00:00"}, "start must be from 1900-01-01"),
    ({"start": "2030-01-01", "end": "2030-01-02", "at_once": "9" * 5000}, "at most at once must"),
    ({"start": "2030-01-01", "end": "2030-01-02", "at_once": "²"}, "at most at once must be a"),
]


def test_input_beyond_its_bound_answers_400_saying_so(
    sched: App, jobs: dict[str, Any], browser: Client
) -> None:
    for path, said in OUT_OF_BOUNDS_QUERIES:
        reply = browser.get(path)
        assert reply.status == 400 and said in reply.body, path
        assert len(reply.body) < 20_000  # the value itself is not repeated whole
    done = jobs["done"].id
    for position, said in [
        ("²", "from must be a whole number"),
        ("١", "from must be a whole number"),
        ("-1", "from must be a whole number"),
        ("9" * 30, "from"),  # past the bound: refused as a malformed number is
    ]:  # a workflow's fork, from a step's position
        form = browser.get(f"/jobs/{done}/fork?from=1")
        reply = browser.post(f"/jobs/{done}/fork", {"csrf_token": form.csrf(), "from": position})
        assert reply.status == 400 and said in reply.body, position
    form = browser.get("/schedules/edit?id=schedule:tick")
    edited = {"csrf_token": form.csrf(), "id": "schedule:tick", "priority": "²"}
    reply = browser.post("/schedules/edit", edited)
    assert reply.status == 400 and "priority a whole number" in reply.body
    assert sched.get_job("schedule:tick").priority == 5
    form = browser.get("/schedules/backfill?id=schedule:tick")
    before = sched.count_jobs(task="tick")
    for fields, said in OUT_OF_BOUNDS_BACKFILLS:
        posted = {"csrf_token": form.csrf(), "id": "schedule:tick", "at_once": "1", **fields}
        reply = browser.post("/schedules/backfill", posted)
        assert reply.status == 400 and said in html.unescape(reply.body), fields
    assert sched.count_jobs(task="tick") == before  # nothing was stored


def test_the_schedules_page_says_why_a_schedule_paused_and_what_it_missed(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    app.task(name="tick", every=60, misfire="skip")(lambda: None)
    app.ensure_schedules()
    clock.advance(minutes=10, seconds=30)  # 9 slots missed; the 10th is on time
    assert drain(app) == 1
    app.pause(schedule="tick", reason="paused after 3 failed runs in a row")
    browser = Client(StandaloneDashboard(app, TOKEN), headers={"Accept": "text/html"})
    form = browser.get("/login")
    browser.post("/login", {"csrf_token": form.csrf(), "token": TOKEN, "next": "/"})
    page = browser.get("/schedules").body
    assert "paused after 3 failed runs in a row" in page
    assert "Missed slots" in page and "by misfire policy" in page
    assert "<td>9 <div" in page


def test_browser_tests_fail_in_ci_instead_of_skipping(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support import browser

    monkeypatch.setenv("MONGOSCHED_CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setenv("MONGOSCHED_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="Chromium is not installed"):
        browser.require_browser()
    monkeypatch.delenv("MONGOSCHED_REQUIRE_BROWSER")
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        browser.require_browser()
