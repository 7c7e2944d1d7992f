"""The dashboard mounted in Django (tests/djangoproject/urls.py): staff only, Django's
CSRF protection, linked from the admin index."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("django")

from mongosched import App, JobStatus  # noqa: E402
from mongosched.testing import drain  # noqa: E402
from tests.djangoproject.fixtures import empty  # noqa: E402

pytest_plugins = ["tests.djangoproject.fixtures"]

PREFIX = "/admin/mongosched/"
_migrated: list[bool] = []


@pytest.fixture
def app(project: App) -> Iterator[App]:
    """The project's App with no jobs, and the database of users ready."""
    from django.core.management import call_command

    if not _migrated:
        call_command("migrate", verbosity=0, interactive=False)
        _migrated.append(True)
    empty(project)
    yield project


def user(name: str, *, staff: bool) -> Any:
    from django.contrib.auth import get_user_model

    model = get_user_model()
    found = model.objects.filter(username=name).first()
    return found or model.objects.create_user(name, password="pw", is_staff=staff)


@pytest.fixture
def failed(app: App) -> Any:
    @app.task(name="dash.boom", retry=0)
    def boom() -> None:
        raise ValueError("<script>nope</script>")

    job = boom.schedule()
    drain(app)
    return app.get_job(job.id)


def test_anonymous_and_non_staff_users_are_sent_to_the_admin_login(failed: Any) -> None:
    from django.test import Client

    client = Client()
    for path in ("", "jobs", f"jobs/{failed.id}", "metrics", "runners"):
        reply = client.get(PREFIX + path)
        assert reply.status_code == 302, path
        assert reply["Location"].startswith("/admin/login/?next=")
    client.force_login(user("visitor", staff=False))
    assert client.get(PREFIX).status_code == 302
    reply = client.post(f"{PREFIX}jobs/{failed.id}/retry")
    assert reply.status_code == 302
    assert failed.refresh().status is JobStatus.FAILED


def test_staff_see_the_overview_with_links_under_the_mount_point(failed: Any) -> None:
    from django.test import Client

    client = Client()
    client.force_login(user("operator", staff=True))
    reply = client.get(PREFIX)
    body = reply.content.decode()
    assert reply.status_code == 200 and "<h1>Overview</h1>" in body
    assert f'href="{PREFIX}jobs?task=dash.boom&amp;status=failed"' in body
    assert f'href="{PREFIX}static/dashboard.css"' in body
    assert reply["Content-Security-Policy"].startswith("default-src 'none'")
    detail = client.get(f"{PREFIX}jobs/{failed.id}").content.decode()
    assert "&lt;script&gt;nope" in detail and "<script>nope" not in detail
    assert client.get(f"{PREFIX}static/dashboard.css").status_code == 200


def test_staff_actions_go_through_djangos_csrf_check(failed: Any) -> None:
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(user("operator", staff=True))
    path = f"{PREFIX}jobs/{failed.id}/retry"
    assert client.post(path).status_code == 403
    assert failed.refresh().status is JobStatus.FAILED
    page = client.get(path).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token, page
    reply = client.post(path, {"csrfmiddlewaretoken": token[1]})
    assert reply.status_code == 303
    assert reply["Location"] == f"{PREFIX}jobs/{failed.id}?done=retried"
    assert failed.refresh().status is JobStatus.PENDING


def test_the_admin_index_links_to_the_dashboard(app: App) -> None:
    from django.test import Client

    client = Client()
    client.force_login(user("admin", staff=True))
    body = client.get("/admin/").content.decode()
    assert f'href="{PREFIX}"' in body and "Job dashboard" in body


def test_a_django_task_shows_its_own_arguments_and_priority(app: App) -> None:
    """A Django task's job runs under mongosched's run_task, which passes on the task's
    arguments: the list and the page show the task's own (``6, b=7``, not the
    wrapper's ``path=..., args=[6]``) and its Django priority."""
    from django.test import Client

    from tests.djangoproject.testapp.tasks import multiply

    result = multiply.using(priority=10).enqueue(6, b=7)
    client = Client()
    client.force_login(user("operator", staff=True))
    listing = client.get(f"{PREFIX}jobs").content.decode()
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", listing) if result.id in r)
    args = re.search(r'<span class="args" title="([^"]*)">', row)
    assert args is not None and args[1] == "6, b=7"
    page = client.get(f"{PREFIX}jobs/{result.id}").content.decode()
    arguments = page[page.index("<h2>Arguments</h2>") :]
    assert re.search(r"<h3>args</h3><pre class=\"code\">\[\s*6\s*\]</pre>", arguments)
    assert re.search(r"<h3>kwargs</h3><pre class=\"code\">\{\s*&quot;b&quot;: 7\s*\}", arguments)
    assert "<details><summary>As stored</summary>" in arguments  # the wrapper's, folded
    priority = re.search(r"<dt>Priority</dt><dd>(.*?)</dd>", page)
    assert priority is not None
    assert priority[1].startswith("10 <span") and "mongosched priority 4.6" in priority[1]


def test_an_action_is_audited_as_the_django_user_who_did_it(app: App, failed: Any) -> None:
    """No token is involved: the entry names the signed-in staff user, known as the
    Django user."""
    from django.test import Client

    client = Client()
    client.force_login(user("operator", staff=True))
    reply = client.post(f"{PREFIX}jobs/{failed.id}/retry")
    assert reply.status_code == 303
    [entry] = app.audit.entries(job=failed.id)  # the project's trail is kept across tests
    assert (entry.action, entry.via, entry.actor, entry.known_by) == (
        "retry",
        "dashboard",
        "operator",
        "django user",
    )


def test_the_view_mounted_without_the_staff_guard_audits_no_user_as_unauthenticated(
    app: App, failed: Any
) -> None:
    from django.contrib.auth.models import AnonymousUser
    from django.test import RequestFactory

    from mongosched.contrib.django.dashboard import page

    request = RequestFactory().post(f"{PREFIX}jobs/{failed.id}/retry")
    request.user = AnonymousUser()
    request._dont_enforce_csrf_checks = True  # type: ignore[attr-defined]
    assert page(request, f"jobs/{failed.id}/retry").status_code == 303
    [entry] = app.audit.entries(job=failed.id)
    assert (entry.actor, entry.known_by) == ("anonymous", "unauthenticated")
