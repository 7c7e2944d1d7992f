"""The dashboard mounted in Flask as a blueprint: the application's auth hook decides,
no hook refuses everything, Flask's session holds the CSRF token."""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

import pytest

pytest.importorskip("flask")

from flask import Flask, redirect  # noqa: E402

from mongosched import JobStatus  # noqa: E402
from mongosched.contrib.flask import MongoSched  # noqa: E402
from mongosched.contrib.flask_dashboard import dashboard_blueprint  # noqa: E402
from mongosched.store.memory import MemoryStore  # noqa: E402
from mongosched.testing import drain  # noqa: E402

PREFIX = "/ops/jobs"


@pytest.fixture
def site(request: pytest.FixtureRequest) -> Any:
    """A Flask app with the extension; ``site.sched``, ``site.allowed`` (what the auth
    hook answers) and ``site.failed`` (a failed job)."""
    name = f"flask-dash-{uuid.uuid4().hex[:8]}"
    request.addfinalizer(lambda: MemoryStore.forget(name))
    flask_app = Flask(__name__)
    flask_app.config.update(MONGOSCHED_URI=f"memory://{name}", SECRET_KEY="s3cret")
    sched = MongoSched()

    @sched.task(name="flask.boom", retry=0)
    def boom() -> None:
        raise ValueError("<img src=x onerror=alert(1)>")

    sched.init_app(flask_app)
    answer: dict[str, Any] = {"value": True}
    flask_app.register_blueprint(
        dashboard_blueprint(sched, auth=lambda: answer["value"]), url_prefix=PREFIX
    )
    job = boom.schedule()
    drain(sched.get_app(flask_app))
    flask_app.allowed = answer  # type: ignore[attr-defined]
    flask_app.failed = sched.get_app(flask_app).get_job(job.id)  # type: ignore[attr-defined]
    return flask_app


def test_the_auth_hook_decides_every_request(site: Any) -> None:
    client = site.test_client()
    job = site.failed
    paths = ["/", "/jobs", f"/jobs/{job.id}", f"/jobs/{job.id}/retry", "/metrics", "/runners"]
    site.allowed["value"] = False
    for path in paths:
        assert client.get(PREFIX + path).status_code == 403, path
        assert client.post(PREFIX + path).status_code == 403, path
    site.allowed["value"] = redirect("/login")
    reply = client.get(PREFIX + "/")
    assert reply.status_code == 302 and reply.headers["Location"] == "/login"
    site.allowed["value"] = True
    reply = client.get(PREFIX + "/")
    body = reply.get_data(as_text=True)
    assert reply.status_code == 200 and "<h1>Overview</h1>" in body
    assert f'href="{PREFIX}/jobs?task=flask.boom&amp;status=failed"' in body
    detail = client.get(f"{PREFIX}/jobs/{job.id}").get_data(as_text=True)
    assert "&lt;img src=x" in detail and "<img src=x" not in detail


def test_without_a_hook_everything_is_refused(site: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mongosched")
    sched = site.extensions["mongosched"].app
    other = Flask("other")
    other.register_blueprint(dashboard_blueprint(sched), url_prefix="/d")
    assert "refuses every request" in caplog.text
    client = other.test_client()
    for path in ("/d/", "/d/jobs", "/d/metrics", "/d/static/dashboard.css"):
        assert client.get(path).status_code == 403
    trusting = Flask("trusting")
    trusting.register_blueprint(
        dashboard_blueprint(sched, allow_unauthenticated=True), url_prefix="/d"
    )
    assert trusting.test_client().get("/d/jobs").status_code == 200


def test_posts_need_the_sessions_csrf_token(site: Any) -> None:
    client = site.test_client()
    job = site.failed
    path = f"{PREFIX}/jobs/{job.id}/retry"
    assert client.post(path).status_code == 403
    assert client.post(path, data={"csrf_token": "forged"}).status_code == 403
    assert job.refresh().status is JobStatus.FAILED
    page = client.get(path).get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert token
    evil = client.post(
        path, data={"csrf_token": token[1]}, headers={"Origin": "http://evil.example"}
    )
    assert evil.status_code == 403
    reply = client.post(path, data={"csrf_token": token[1]})
    assert reply.status_code == 303
    assert reply.headers["Location"] == f"{PREFIX}/jobs/{job.id}?done=retried"
    assert job.refresh().status is JobStatus.PENDING


@pytest.mark.parametrize(
    ("hooks", "actor", "known_by"),
    [
        ({"auth": lambda: True, "user": lambda: "ann"}, "ann", "flask user"),
        ({"auth": lambda: True, "user": lambda: None}, "flask auth hook", "flask auth hook"),
        ({"allow_unauthenticated": True}, "unauthenticated", "unauthenticated"),
    ],
    ids=["user hook", "auth hook only", "no hook"],
)
def test_an_action_is_audited_as_the_way_flask_knew_the_actor(
    site: Any, hooks: dict[str, Any], actor: str, known_by: str
) -> None:
    """No token is involved in a mounted dashboard: the entry says how Flask let the
    request in (the user hook's name, else the auth hook, else nothing)."""
    sched = site.extensions["mongosched"].app
    mounted = Flask("mounted")
    mounted.config["SECRET_KEY"] = "s3cret"
    mounted.register_blueprint(dashboard_blueprint(sched, **hooks), url_prefix="/d")
    client = mounted.test_client()
    path = f"/d/jobs/{site.failed.id}/retry"
    token = re.search(r'name="csrf_token" value="([^"]+)"', client.get(path).get_data(True))
    assert token
    assert client.post(path, data={"csrf_token": token[1]}).status_code == 303
    [entry] = sched.audit.entries()
    assert (entry.action, entry.via, entry.actor, entry.known_by) == (
        "retry",
        "dashboard",
        actor,
        known_by,
    )
