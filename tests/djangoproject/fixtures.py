"""Fixtures of the Django test project (tests/djangoproject), shared by the Django test
modules: a plugin of theirs (``pytest_plugins``), so that the project is set up once per
process (the shared App is made once, and closed at the end of the session). Each
module has its own ``app`` fixture (``empty(project)`` first), overriding the one of
tests/conftest.py.

The project's store is its own (a unique database on the server when
``MONGOSCHED_TEST_URI`` is set, else a uniquely named ``memory://`` store), emptied
before each test through the public API.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mongosched import App, JobStatus
from mongosched.contrib import with_database
from tests.conftest import TEST_URI

SETTINGS = "tests.djangoproject.settings"


def project_uri() -> str:
    name = f"mongosched_django_{uuid.uuid4().hex[:12]}"
    if TEST_URI:
        return with_database(TEST_URI, name)
    return f"memory://{name}"


def drop(uri: str) -> None:
    if TEST_URI and uri.startswith("mongodb"):
        import pymongo

        client: Any = pymongo.MongoClient(uri)
        try:
            client.drop_database(client.get_default_database().name)
        finally:
            client.close()


@pytest.fixture(scope="session")
def project() -> Iterator[App]:
    """The test project, set up (once per process); yields its shared App."""
    import django
    from django.conf import settings

    if settings.configured and os.environ.get("DJANGO_SETTINGS_MODULE") != SETTINGS:
        pytest.skip("Django is already configured with other settings in this process")
    uri = project_uri()
    saved = {k: os.environ.get(k) for k in ("DJANGO_SETTINGS_MODULE", "MONGOSCHED_DJANGO_URI")}
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    os.environ["MONGOSCHED_DJANGO_URI"] = uri
    try:
        django.setup()
        from mongosched.contrib.django import get_app

        app = get_app()
        yield app
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    from mongosched.contrib.django import stop_runner

    stop_runner(graceful=False, timeout=5)
    app.close()
    drop(app.uri or "")


def empty(app: App) -> None:
    """Delete every job of ``app`` (whose runners are stopped): cancel the unfinished
    ones, then purge every final status."""
    for job in app.get_jobs(limit=0):
        if not job.is_finished:
            app.cancel(job)
    app.purge(status=[status for status in JobStatus if status.is_final])
    assert app.count_jobs() == 0, [job.to_dict() for job in app.get_jobs(limit=0)]
