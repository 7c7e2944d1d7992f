"""Django integration, run on a real project (tests/djangoproject) with the test client.

Django is set up once in this process, on first use of the ``project`` fixture (so
collecting this file configures nothing); pytest-django is not used. The project's
store is this module's own (a unique database on the server when
``MONGOSCHED_TEST_URI`` is set, else a uniquely named ``memory://`` store), emptied
before each test through the public API. Process-level behaviour (management commands,
fork) runs in subprocesses; none of them needs to share jobs with this process, so
each has a ``memory://`` store of its own unless a server is given.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("django")
try:  # Django 6 has the tasks framework built in; 4.2 to 5.2 use the django-tasks package
    import django.tasks as tasks_framework  # type: ignore[import-not-found]
except ImportError:
    tasks_framework = pytest.importorskip("django_tasks")
FRAMEWORK = tasks_framework.__name__

from mongosched import App, JobStatus  # noqa: E402
from mongosched.contrib import app_from_settings, with_database  # noqa: E402
from mongosched.errors import ConfigurationError, MongoschedError, StoreUnavailable  # noqa: E402
from mongosched.store.memory import MemoryStore  # noqa: E402
from mongosched.testing import FakeClock, drain  # noqa: E402
from tests.djangoproject.fixtures import SETTINGS, drop, empty, project_uri  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402
from tests.support.web import gunicorn, recycle_workers  # noqa: E402

if TYPE_CHECKING:
    from tests.support.server_fixtures import SharedDatabase

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "tests" / "djangoproject" / "manage.py"
RUN_TASK = "mongosched.contrib.django.run_task"

# shared_db: SecantusDB; project, app: the test project (one per session)
pytest_plugins = ["tests.support.server_fixtures", "tests.djangoproject.fixtures"]


@pytest.fixture
def app(project: App) -> Iterator[App]:
    """The project's App, with no jobs; runners stopped afterwards."""
    from tests.djangoproject.testapp import tasks

    empty(project)
    tasks.ORDER.clear()
    yield project
    from mongosched.contrib.django import stop_runner

    stop_runner(graceful=False, timeout=5)
    for runner in list(project.runners):
        runner.stop(graceful=False, timeout=5)


@pytest.fixture
def client(project: App) -> Any:
    from django.test import Client

    return Client()


@pytest.fixture
def signals(project: App) -> Iterator[dict[str, list[Any]]]:
    """Task results received by the tasks framework's signals, by signal name."""
    signals_module = importlib.import_module(f"{FRAMEWORK}.signals")
    task_enqueued, task_started, task_finished = (
        signals_module.task_enqueued,
        signals_module.task_started,
        signals_module.task_finished,
    )

    got: dict[str, list[Any]] = {"enqueued": [], "started": [], "finished": []}
    receivers = {}
    for name, signal in (
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ):

        def receiver(sender: Any, task_result: Any, _name: str = name, **kw: Any) -> None:
            got[_name].append((sender, task_result))

        receivers[name] = (signal, receiver)
        signal.connect(receiver, weak=False)
    yield got
    for signal, receiver in receivers.values():
        signal.disconnect(receiver)


# The project, its App, autodiscovery ---------------------------------------------------------
def test_shared_app_has_the_discovered_tasks(app: App) -> None:
    import mongosched.contrib.django as contrib

    assert contrib.app is app
    assert "tests.djangoproject.testapp.tasks.add" in app.tasks  # the app's tasks.py
    assert "testapp.ping" in app.tasks  # TASK_MODULES
    assert RUN_TASK in app.tasks  # runs tasks-framework tasks
    assert app.lease_duration == 5.0 and app.poll_interval == 0.05  # other App options


def test_view_schedules_a_task_and_a_runner_runs_it(app: App, client: Any) -> None:
    response = client.get("/add/", {"x": 2, "y": 40})
    assert response.status_code == 202
    job_id = response.json()["id"]
    assert client.get(f"/jobs/{job_id}/").json()["status"] == "pending"

    runner = app.runner(workers=2).start()
    try:
        job = app.get_job(job_id)
        assert job is not None
        assert job.wait(timeout=10).status is JobStatus.COMPLETED
    finally:
        runner.stop()
    body = client.get(f"/jobs/{job_id}/").json()
    assert body == {
        "task": "tests.djangoproject.testapp.tasks.add",
        "status": "completed",
        "result": 42,
    }


def test_bad_settings_fail_clearly(project: App) -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.test import override_settings

    from mongosched.contrib.django import conf

    # The shared App follows the setting: bad settings fail at override_settings.
    with pytest.raises(ImproperlyConfigured, match="WORKERS"):
        with override_settings(MONGOSCHED={"URI": "memory://", "WORKERS": 0}):
            pass  # pragma: no cover
    assert conf.options()["WORKERS"] == 2  # and leave the settings as they were
    from mongosched.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="unknown setting.*LEASE"):
        app_from_settings({"URI": "memory://", "LEASE": 3}, where="settings.MONGOSCHED")
    with pytest.raises(ConfigurationError, match="settings.MONGOSCHED: set URI"):
        app_from_settings({}, where="settings.MONGOSCHED")
    with pytest.raises(ConfigurationError, match="mongomock:// is no longer supported.*memory://"):
        app_from_settings({"URI": "mongomock://x/y"}, where="settings.MONGOSCHED")
    with pytest.raises(ConfigurationError, match="settings.MONGOSCHED: .*unknown store URI"):
        app_from_settings({"URI": "sqlite://x"}, where="settings.MONGOSCHED")
    with pytest.raises(ImproperlyConfigured, match="MONGOSCHED is not set"):
        with override_settings(MONGOSCHED=None):
            pass  # pragma: no cover
    with pytest.raises(ImproperlyConfigured, match="URI mongomock:// is no longer supported"):
        with override_settings(MONGOSCHED={"URI": "mongomock://x/y"}):
            pass  # pragma: no cover
    assert project.uri == conf.options()["URI"]


def test_the_shared_app_follows_override_settings(app: App, client: Any) -> None:
    """Tests that override MONGOSCHED write where the override says, with the tasks
    registered at import (``@app.task`` in tasks.py), views and runners alike."""
    from django.conf import settings
    from django.test import override_settings

    from mongosched.contrib.django import get_app, start_runner
    from tests.djangoproject.testapp.tasks import add

    project_uri = app.uri
    name = f"override-{uuid.uuid4().hex[:8]}"
    try:
        with override_settings(MONGOSCHED={**settings.MONGOSCHED, "URI": f"memory://{name}"}):
            assert get_app() is app and app.uri == f"memory://{name}"
            viewed = client.get("/add/", {"x": 1, "y": 2}).json()["id"]
            direct = add.schedule(3, 4)
            assert app.count_jobs() == 2
            assert {str(job.id) for job in App(f"memory://{name}").get_jobs()} == {
                viewed,
                str(direct.id),
            }
            assert drain(app) == 2 and direct.refresh().result == 7
            runner = start_runner()  # runs on the overriding store too
            assert runner.store is app.store
            assert add.schedule(5, 6).wait(timeout=10).result == 11
        assert app.uri == project_uri and app.count_jobs() == 0  # nothing written there
        assert app.in_process_runner is not None and app.in_process_runner.store is app.store
    finally:
        app.stop_runner()  # the recipe below drains by hand: no runner may race it
        MemoryStore.forget(name)

    with override_settings(MONGOSCHED={**settings.MONGOSCHED, "EAGER": True}):
        assert add.schedule(20, 22).result == 42  # ran inline
    assert not app.eager

    # What the docs show: a fresh store per override, a fake clock, drain.
    clock = FakeClock()
    with override_settings(MONGOSCHED={"URI": "memory://", "CLOCK": clock}):
        assert app.count_jobs() == 0
        later = add.configure(delay=timedelta(days=1)).schedule(1, 1)
        assert drain(app) == 0
        clock.advance(days=1)
        assert drain(app) == 1 and later.refresh().result == 2
    with override_settings(MONGOSCHED={"URI": "memory://"}):
        assert app.count_jobs() == 0
    assert app.uri == project_uri


def test_database_setting_replaces_the_uri_database() -> None:
    assert with_database("mongodb://h1,h2/?replicaSet=rs", "shop") == (
        "mongodb://h1,h2/shop?replicaSet=rs"
    )
    assert with_database("mongodb://u:p@h/old?w=1", "new") == "mongodb://u:p@h/new?w=1"
    assert with_database("memory://srv", "db") == "memory://db"  # names the store
    assert with_database("memory://", "db") == "memory://db"
    name = f"shop-{uuid.uuid4().hex[:8]}"
    made = app_from_settings({"URI": "memory://x", "DATABASE": name}, where="settings")
    assert made.uri == f"memory://{name}"
    MemoryStore.forget(name)


# The tasks framework backend ----------------------------------------------------------------
def test_backend_enqueue_run_and_get_result(app: App, signals: dict[str, list[Any]]) -> None:
    TaskResultStatus = tasks_framework.TaskResultStatus
    default_task_backend, task_backends = (
        tasks_framework.default_task_backend,
        tasks_framework.task_backends,
    )

    from mongosched.contrib.django import TasksBackend
    from tests.djangoproject.testapp.tasks import multiply

    assert isinstance(task_backends["default"], TasksBackend)
    result = multiply.enqueue(6, 7)
    assert result.status == TaskResultStatus.READY
    assert result.args == [6, 7] and result.enqueued_at is not None
    job = app.get_job(result.id)
    assert job is not None and job.task == RUN_TASK
    assert (job.priority, job.queue, job.status) == (5, "default", JobStatus.PENDING)
    assert [r.id for _, r in signals["enqueued"]] == [result.id]
    assert signals["enqueued"][0][0] is TasksBackend

    assert drain(app) == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value == 42
    assert result.attempts == 1 and result.finished_at is not None
    again = multiply.get_result(result.id)
    assert again.return_value == 42 and again.task.func is multiply.func
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    assert [(r.id, r.status) for _, r in signals["started"]] == [
        (result.id, TaskResultStatus.RUNNING)
    ]
    assert [(r.id, r.status, r.return_value) for _, r in signals["finished"]] == [
        (result.id, TaskResultStatus.SUCCESSFUL, 42)
    ]


def test_backend_failure_is_recorded_not_retried(app: App, signals: dict[str, list[Any]]) -> None:
    TaskResultStatus = tasks_framework.TaskResultStatus

    from tests.djangoproject.testapp.tasks import explode

    result = explode.enqueue("no such thing")
    assert drain(app) == 1  # one attempt: Django's semantics, no retry on an exception
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 1
    assert result.errors[0].exception_class is LookupError
    assert "no such thing" in result.errors[0].traceback
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018
    job = app.get_job(result.id)
    assert job is not None and job.status is JobStatus.FAILED and job.attempts == 1
    finished = [r for _, r in signals["finished"]]
    assert [r.status for r in finished] == [TaskResultStatus.FAILED]
    assert finished[0].errors[0].exception_class is LookupError


@pytest.mark.parametrize(
    ("exponent_or_size", "error"),
    [("a\x00b", "SerializationError"), (2_000_000, "ResultTooLarge")],
    ids=["not-bson", "too-large"],
)
def test_backend_a_return_value_that_cannot_be_stored_finishes_failed(
    app: App, signals: dict[str, list[Any]], exponent_or_size: Any, error: str
) -> None:
    """task_finished says what is stored: FAILED, with the error, never SUCCESSFUL
    first (the value is valid JSON, which is all Django checks: a key holding a NUL
    character is, but BSON refuses it)."""
    TaskResultStatus = tasks_framework.TaskResultStatus

    from tests.djangoproject.testapp.tasks import keyed, text

    task = keyed if error == "SerializationError" else text
    result = task.enqueue(exponent_or_size)
    assert drain(app) == 1
    finished = [r for _, r in signals["finished"]]
    assert [r.status for r in finished] == [TaskResultStatus.FAILED]
    assert finished[0].errors[-1].exception_class.__name__ == error
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and len(result.errors) == 1
    assert result.errors[0].exception_class.__name__ == error
    assert "testapp.tasks" in result.errors[0].traceback  # names the Django task
    job = app.get_job(result.id)
    assert job is not None and job.attempts == 1 and job.error is not None
    assert job.error.type == error


def test_backend_an_argument_that_cannot_be_stored_names_the_django_task(app: App) -> None:
    from mongosched.errors import SerializationError
    from tests.djangoproject.testapp.tasks import multiply

    with pytest.raises(SerializationError) as caught:
        multiply.enqueue(2, {"a\x00b": 1})  # valid JSON; BSON keys hold no NUL
    message = str(caught.value)
    assert "tests.djangoproject.testapp.tasks.multiply" in message and "argument 1" in message
    assert "run_task" not in message and "'args'" not in message
    with pytest.raises(SerializationError, match="keyword argument 'b'.*multiply|multiply.*'b'"):
        multiply.enqueue(2, b={"a\x00b": 1})
    assert app.count_jobs() == 0


def test_backend_arguments_the_django_task_cannot_take_are_refused_at_enqueue(
    app: App,
) -> None:
    from mongosched import ArgumentError
    from tests.djangoproject.testapp.tasks import multiply, with_context

    name = "task 'tests.djangoproject.testapp.tasks.multiply'"
    with pytest.raises(ArgumentError, match=f"{name}: too many positional arguments"):
        multiply.enqueue(1, 2, 3)
    with pytest.raises(ArgumentError, match=f"{name}: got an unexpected keyword argument 'c'"):
        multiply.enqueue(1, 2, c=3)
    with pytest.raises(ArgumentError, match="with_context': missing a required argument: 'tag'"):
        with_context.enqueue()  # the framework passes the context; tag is missing
    assert app.count_jobs() == 0
    assert with_context.enqueue("x").args == ["x"]


def test_backend_a_cancelled_task_reads_failed_with_an_error(
    app: App, signals: dict[str, list[Any]]
) -> None:
    TaskResultStatus = tasks_framework.TaskResultStatus

    from mongosched.contrib.django.backend import TaskCancelled
    from tests.djangoproject.testapp.tasks import multiply

    result = multiply.enqueue(2, 3)
    app.cancel(result.id)
    cancelled = multiply.get_result(result.id)
    assert cancelled.status == TaskResultStatus.FAILED and cancelled.is_finished
    assert [e.exception_class for e in cancelled.errors] == [TaskCancelled]
    assert "cancelled" in cancelled.errors[-1].traceback
    with pytest.raises(ValueError, match="failed"):
        cancelled.return_value  # noqa: B018

    # Cancelled while it runs: task_finished says FAILED with the same error.
    from tests.djangoproject.testapp.tasks import wait_for_cancel

    running = wait_for_cancel.enqueue()
    runner = app.runner(workers=1).start()
    try:
        wait_for(
            lambda: (
                (job := app.get_job(running.id)) is not None and job.status is JobStatus.RUNNING
            ),
            message="the task to run",
        )
        app.cancel(running.id)
        job = app.get_job(running.id)
        assert job is not None and job.wait(timeout=10).status is JobStatus.CANCELLED
    finally:
        runner.stop(timeout=5)
    finished = [r for _, r in signals["finished"] if r.id == running.id]
    assert [r.status for r in finished] == [TaskResultStatus.FAILED]
    assert [e.exception_class for e in finished[0].errors] == [TaskCancelled]
    assert [e.exception_class for e in wait_for_cancel.get_result(running.id).errors] == [
        TaskCancelled
    ]


def test_backend_eager_mode_sends_the_signals_in_order(
    app: App, signals: dict[str, list[Any]]
) -> None:
    from django.conf import settings
    from django.test import override_settings

    from tests.djangoproject.testapp.tasks import multiply

    order: list[str] = []
    for name in ("enqueued", "started", "finished"):
        signals[name] = _Recording(order, name)
    with override_settings(MONGOSCHED={**settings.MONGOSCHED, "EAGER": True}):
        result = multiply.enqueue(6, 7)
    assert result.return_value == 42
    assert order == ["enqueued", "started", "finished"]


class _Recording(list):  # type: ignore[type-arg]
    """A signal's list of received results that also notes the order of signals."""

    def __init__(self, order: list[str], name: str) -> None:
        super().__init__()
        self.order, self.name = order, name

    def append(self, item: Any) -> None:
        self.order.append(self.name)
        super().append(item)


def test_backend_priority_orders_runs(app: App) -> None:
    from mongosched.contrib.django.backend import to_mongosched_priority
    from tests.djangoproject.testapp.tasks import ORDER, record

    low = record.using(priority=-50).enqueue("low")
    high = record.using(priority=80).enqueue("high")
    mid = record.enqueue("mid")
    top = record.using(priority=100).enqueue("top")
    priorities = {r.id: app.get_job(r.id).priority for r in (low, high, mid, top)}  # type: ignore[union-attr]
    assert priorities == {low.id: 7.5, high.id: 1.8, mid.id: 5, top.id: 1}
    assert drain(app) == 4
    assert ORDER == ["top", "high", "mid", "low"]

    mapped = [to_mongosched_priority(p) for p in range(100, -101, -1)]
    assert mapped[0] == 1 and mapped[-1] == 10 and to_mongosched_priority(0) == 5
    assert mapped == sorted(set(mapped))  # each in a place of its own
    assert [type(to_mongosched_priority(p)) for p in (100, 25, 0, -20, -100)] == [int] * 5


def test_backend_jobs_are_labelled_filtered_and_paused_by_the_django_task(app: App) -> None:
    """Every Django task runs under RUN_TASK, but each job is labelled with its Django
    task's path: found by it, and pausing that path holds that task's jobs alone."""
    from tests.djangoproject.testapp.tasks import ORDER, multiply, record

    path = record.module_path
    assert path == "tests.djangoproject.testapp.tasks.record"
    held = record.enqueue("held")
    product = multiply.enqueue(2, 3)
    job = app.get_job(held.id)
    assert job is not None and job.task == RUN_TASK and job.label == path
    assert [j.id for j in app.get_jobs(label=path)] == [job.id]
    assert app.count_jobs(task=RUN_TASK) == 2
    app.pause(task=path)
    late = record.enqueue("late")
    assert drain(app) == 1 and ORDER == []  # multiply ran; record's jobs wait
    assert product.refresh() is None and product.return_value == 6
    assert {app.get_job(r.id).status for r in (held, late)} == {JobStatus.PAUSED}  # type: ignore[union-attr]
    app.resume(task=path)
    assert drain(app) == 2 and sorted(ORDER) == ["held", "late"]


def test_backend_run_after_defers(app: App) -> None:
    TaskResultStatus = tasks_framework.TaskResultStatus

    from tests.djangoproject.testapp.tasks import multiply

    later = (datetime.now(timezone.utc) + timedelta(hours=1)).replace(microsecond=123456)
    deferred = multiply.using(run_after=later).enqueue(2, 2)
    job = app.get_job(deferred.id)
    assert job is not None and job.run_at is not None
    assert abs((job.run_at - later).total_seconds()) < 0.01
    past = multiply.using(run_after=datetime.now(timezone.utc) - timedelta(seconds=1)).enqueue(3, 3)
    assert drain(app) == 1
    assert multiply.get_result(past.id).return_value == 9
    deferred_now = multiply.get_result(deferred.id)
    assert deferred_now.status == TaskResultStatus.READY
    assert deferred_now.task.run_after == later  # as given, to the microsecond
    assert deferred_now.task.run_after.tzinfo is not None


def test_backend_context_queue_and_async(app: App) -> None:
    from tests.djangoproject.testapp.tasks import async_double, with_context

    result = with_context.enqueue(tag="x")
    doubled = async_double.enqueue(21)
    job = app.get_job(result.id)
    assert job is not None and job.queue == "emails"
    assert drain(app) == 2
    assert with_context.get_result(result.id).return_value == {
        "attempt": 1,
        "id": result.id,
        "tag": "x",
    }
    assert async_double.get_result(doubled.id).return_value == 42


def test_backend_unknown_results(app: App) -> None:
    default_task_backend = tasks_framework.default_task_backend
    TaskResultDoesNotExist = importlib.import_module(
        f"{FRAMEWORK}.exceptions"
    ).TaskResultDoesNotExist

    plain = app.get_task("tests.djangoproject.testapp.tasks.add").schedule(1, 2)
    unknown = "0123456789abcdef01234567"  # a job id's form, of no job
    assert app.get_job(unknown) is None
    for result_id in (unknown, "not-an-id", "", str(plain.id)):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(result_id)


def test_run_task_runs_only_in_a_job_through_a_mongosched_backend(app: App) -> None:
    from django.conf import settings
    from django.test import override_settings

    from mongosched.contrib.django.taskrun import run_task

    payload: dict[str, Any] = {
        "path": "tests.djangoproject.testapp.tasks.multiply",
        "args": [2, 3],
        "kwargs": {},
    }
    with pytest.raises(ConfigurationError, match="only inside a mongosched job"):
        run_task(**payload, backend="default")

    other = {"BACKEND": f"{FRAMEWORK}.backends.dummy.DummyBackend"}
    with override_settings(TASKS={**settings.TASKS, "other": other}):
        job = app.get_task(RUN_TASK).schedule(**payload, backend="other")
        assert drain(app) == 1
    job.refresh()
    assert job.status is JobStatus.FAILED and job.attempts == 1  # Fail: no retry
    assert job.error is not None and job.error.type == "Fail"
    assert "'other' is DummyBackend, not TasksBackend" in job.error.message

    ran = app.get_task(RUN_TASK).schedule(**payload, backend="default")
    assert drain(app) == 1
    assert ran.refresh().result == 6


def test_backend_through_views_and_a_runner(app: App, client: Any) -> None:
    response = client.get("/multiply/", {"a": 3, "b": 5})
    assert response.status_code == 202 and response.json()["status"] == "READY"
    result_id = response.json()["id"]
    runner = app.runner(workers=2).start()
    try:
        wait_for(
            lambda: client.get(f"/results/{result_id}/").json()["status"] == "SUCCESSFUL",
            timeout=10,
            message="the runner to run the enqueued task",
        )
    finally:
        runner.stop()
    assert client.get(f"/results/{result_id}/").json() == {"status": "SUCCESSFUL", "value": 15}


# The in-process runner -----------------------------------------------------------------------
def _runner_starts(app: App) -> list[Any]:
    starts: list[Any] = []
    app.on("runner:start", lambda event: starts.append(event.runner))
    return starts


def test_run_in_process_starts_one_runner_on_first_request(app: App, client: Any) -> None:
    from django.conf import settings
    from django.test import override_settings

    starts = _runner_starts(app)
    assert client.get("/ping/").status_code == 200
    assert starts == []  # RUN_IN_PROCESS is off in the project's settings

    with override_settings(MONGOSCHED={**settings.MONGOSCHED, "RUN_IN_PROCESS": True}):
        job_id = client.get("/add/", {"x": 1, "y": 1}).json()["id"]
        assert len(starts) == 1 and starts[0].is_running
        assert starts[0].workers == 2  # MONGOSCHED["WORKERS"]
        for _ in range(3):
            client.get("/ping/")
        assert len(starts) == 1
        job = app.get_job(job_id)
        assert job is not None and job.wait(timeout=10).result == 2  # run in this process

        from mongosched.contrib.django import stop_runner

        assert stop_runner() is True
        assert not starts[0].is_running
        client.get("/ping/")  # a later request starts a new one
        assert len(starts) == 2 and starts[1].is_running


def test_loading_the_wsgi_or_asgi_application_starts_the_runner(app: App) -> None:
    """What a server does at start: with RUN_IN_PROCESS, the runner runs before any
    request (a worker recycled by --max-requests may never get one)."""
    from django.conf import settings
    from django.test import override_settings

    from mongosched.contrib.django import stop_runner
    from mongosched.contrib.django.asgi import get_asgi_application
    from mongosched.contrib.django.wsgi import get_wsgi_application

    starts = _runner_starts(app)
    assert callable(get_wsgi_application()) and starts == []  # RUN_IN_PROCESS is off
    with override_settings(MONGOSCHED={**settings.MONGOSCHED, "RUN_IN_PROCESS": True}):
        for load in (get_wsgi_application, get_asgi_application):
            assert callable(load())
            runner = app.in_process_runner
            assert runner is not None and runner.workers == 2  # MONGOSCHED["WORKERS"]
            assert starts == [runner]
            job = app.get_task("tests.djangoproject.testapp.tasks.add").schedule(2, 3)
            assert job.wait(timeout=10).result == 5
            assert stop_runner() is True
            starts.clear()


def test_a_database_outage_costs_only_the_pages_that_schedule(
    app: App, client: Any, shared_db: SharedDatabase
) -> None:
    """MongoDB down, RUN_IN_PROCESS on: pages that do not schedule answer at once (the
    runner starts and waits for the database in its own thread); a page that schedules
    gets a StoreUnavailable after about CONNECT_TIMEOUT, not a 500 after minutes."""
    from django.conf import settings
    from django.test import override_settings

    server = shared_db.server
    if server is None:
        pytest.skip("needs the SecantusDB server to take the database away")
    down = {
        **settings.MONGOSCHED,
        "URI": shared_db.uri(),
        "CONNECT_TIMEOUT": 0.5,
        "RUN_IN_PROCESS": True,
    }
    server.kill()
    with override_settings(MONGOSCHED=down):
        pages = []
        for _ in range(3):
            started = time.monotonic()
            assert client.get("/ping/").status_code == 200
            pages.append(time.monotonic() - started)
        runner = app.in_process_runner
        assert runner is not None and not runner.ready  # started; waits for the database
        schedules = []
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as caught:
                client.get("/add/", {"x": 1, "y": 2})
            schedules.append(time.monotonic() - started)
            assert isinstance(caught.value, MongoschedError)
        print(f"database down: /ping/ {pages}, /add/ {schedules}")
        assert max(pages) < 0.25, pages
        assert max(schedules) < 1.5, schedules  # about CONNECT_TIMEOUT (0.5 s)
        assert runner.is_running and runner.health()["last_error"] is not None


def _run(
    args: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def subprocess_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    uri = project_uri()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "MONGOSCHED_DJANGO_URI": uri,
        "MONGOSCHED_DJANGO_RUN_IN_PROCESS": "1",
        "MONGOSCHED_DJANGO_RUNNER_LOG": str(tmp_path / "runners.log"),
        "PYTHONPATH": str(ROOT),
    }
    yield env
    drop(uri)


def test_management_commands_start_no_runner(
    subprocess_env: dict[str, str], shared_db: SharedDatabase
) -> None:
    log = Path(subprocess_env["MONGOSCHED_DJANGO_RUNNER_LOG"])
    env = {**subprocess_env, "MONGOSCHED_DJANGO_URI": shared_db.uri()}  # shared by processes
    commands = (
        ["migrate", "-v", "0"],
        ["check"],
        ["shell", "-c", "import tests.djangoproject.views"],
        ["mongosched", "stats", "--json"],
    )
    for command in commands:
        done = _run([sys.executable, str(MANAGE), *command], env)
        assert done.returncode == 0, done.stderr
        assert not log.exists(), f"manage.py {command[0]} started a runner"
    assert json.loads(done.stdout)["totals"]["pending"] == 0


FORK_SCRIPT = r"""
import os, sys, time
import django
django.setup()
from django.test import Client
from mongosched.contrib.django import get_app
from tests.support.waiting import wait_child

client = Client()
client.get("/ping/")
client.get("/ping/")
parent_runner = get_app().in_process_runner
assert parent_runner is not None and parent_runner.is_running

# Fork while the parent's runner polls (the App reconnects a real server's client in
# the child; a memory:// store's locks are made afresh there, and its jobs are the
# child's own: only the child's runner can run the job the child schedules).
pid = os.fork()
if pid == 0:
    # The child runs a runner of its own from the fork on, before any request.
    runner = get_app().in_process_runner
    ok = runner is not None and runner is not parent_runner and runner.is_running
    Client().get("/ping/")
    ok = ok and get_app().in_process_runner is runner  # a request starts no other
    job = get_app().get_task("tests.djangoproject.testapp.tasks.add").schedule(20, 22)
    ok = ok and job.wait(timeout=20).result == 42
    os._exit(0 if ok else 1)
client.get("/ping/")
code = wait_child(pid)
if code is None:
    sys.exit("child hung")
print(os.getpid(), pid, code)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_run_in_process_once_per_process_and_after_fork(subprocess_env: dict[str, str]) -> None:
    done = _run([sys.executable, "-c", FORK_SCRIPT], subprocess_env)
    assert done.returncode == 0, done.stderr
    parent, child, child_code = (int(v) for v in done.stdout.split())
    assert child_code == 0, "the child did not start its own runner or run a job with it"
    lines = Path(subprocess_env["MONGOSCHED_DJANGO_RUNNER_LOG"]).read_text().split()
    assert sorted(map(int, lines)) == sorted([parent, child])


# Real server processes: gunicorn -------------------------------------------------------------
def _runner_pids(log: Path) -> list[int]:
    return [int(line) for line in log.read_text().split()] if log.exists() else []


@pytest.mark.processes
@pytest.mark.parametrize("preload", [False, True], ids=["wsgi-py", "preload"])
def test_gunicorn_workers_recycled_without_traffic_run_the_jobs(
    shared_db: SharedDatabase, tmp_path: Path, preload: bool
) -> None:
    """gunicorn, 2 workers, --max-requests 5: a burst of requests recycles the workers
    until the ones alive have served nothing; then jobs scheduled from here, with no
    more requests, all run, in those workers. The master runs no runner: the project's
    wsgi.py starts one in each process that loads the application; with --preload the
    master loads Django's own application and each worker starts its runner in
    post_worker_init (the recipe of the docs)."""
    pytest.importorskip("gunicorn")
    if sys.platform == "win32":  # pragma: no cover
        pytest.skip("gunicorn runs on POSIX")
    log = tmp_path / "runners.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "MONGOSCHED_DJANGO_URI": shared_db.uri(),
        "MONGOSCHED_DJANGO_RUN_IN_PROCESS": "1",
        "MONGOSCHED_DJANGO_RUNNER_LOG": str(log),
    }
    if preload:
        served_app = ["-c", "python:tests.djangoproject.gunicorn_preload"]
        served_app.append("django.core.wsgi:get_wsgi_application()")
    else:
        served_app = ["tests.djangoproject.wsgi:application"]
    started = time.monotonic()
    output = tmp_path / "gunicorn.log"
    with gunicorn(served_app, env, output, "--workers", "2", "--max-requests", "5") as (
        server,
        url,
    ):
        served = recycle_workers(f"{url}/pid/", max_requests=5)
        app = App(shared_db.uri(), poll_interval=0.05)
        app.task(name="testapp.where")(os.getpid)  # by name: the workers run the real one
        jobs = [app.schedule("testapp.where") for _ in range(10)]
        finished = [job.wait(timeout=15) for job in jobs]
        app.close()
    assert [job.status for job in finished] == [JobStatus.COMPLETED] * 10
    ran = {job.result for job in finished}
    starts = _runner_pids(log)
    print(
        f"gunicorn {'--preload' if preload else 'wsgi.py'}: {sum(served.values())} "
        f"requests, {len(served)} workers recycled, runners started in {len(starts)} "
        f"processes; 10 jobs run by {sorted(ran)} (served no request) in "
        f"{time.monotonic() - started:.1f} s"
    )
    assert not ran & set(served)  # by workers that served no request
    assert ran <= set(starts) and len(starts) == len(set(starts))  # one per process
    assert server.pid not in starts  # never in the master


# manage.py mongosched ------------------------------------------------------------------------
def test_management_command_forwards_to_the_cli(app: App) -> None:
    from django.core.management import call_command

    job = app.get_task("tests.djangoproject.testapp.tasks.add").schedule(1, 2)
    out = io.StringIO()
    call_command("mongosched", "jobs", "list", "--json", stdout=out)
    rows = json.loads(out.getvalue())
    assert [row["id"] for row in rows] == [str(job.id)]

    with pytest.raises(SystemExit) as exc:
        call_command("mongosched", "jobs", "show", "0123456789abcdef01234567", stderr=io.StringIO())
    assert exc.value.code == 3  # not found


def test_manage_py_mongosched_refuses_memory_from_the_command_line(app: App) -> None:
    """``manage.py mongosched ...`` runs in a process of its own: on memory:// it would
    see a store of its own, empty. Refused there; call_command (in this process) works."""
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings

    from mongosched.contrib.django.management.commands.mongosched import Command

    name = f"manage-{uuid.uuid4().hex[:8]}"
    with override_settings(MONGOSCHED={**settings.MONGOSCHED, "URI": f"memory://{name}"}):
        for verb in (["worker"], ["ping"]):
            err = io.StringIO()
            with pytest.raises(SystemExit) as exc:
                Command(stderr=err).run_from_argv(["manage.py", "mongosched", *verb])
            assert exc.value.code == 4
            assert f"'manage.py mongosched {verb[0]}'" in err.getvalue()
            assert "memory:// is the in-process store" in err.getvalue()
        call_command("mongosched", "ping", stdout=io.StringIO())  # in this process: works
    MemoryStore.forget(name)


def test_management_command_help_shows_the_project_defaults(app: App) -> None:
    """``manage.py mongosched worker --help`` shows what applies here: this project's
    WORKERS as the default of --workers, no option to choose another app."""
    from django.core.management import call_command

    from mongosched.contrib.django.management.commands.mongosched import Command

    out = io.StringIO()
    call_command("mongosched", "worker", "--help", stdout=out)
    text = out.getvalue()
    assert text.startswith("usage: manage.py mongosched worker")
    assert "threads (default 2)" in text  # MONGOSCHED["WORKERS"], not the CLI's 4
    assert "--queues" in text and "--lease-duration" in text and "--timeout" in text
    assert "MODULE:APP" not in text and "--app" not in text and "--uri" not in text
    top = Command().create_parser("manage.py", "mongosched").format_help()
    for verb in ("worker", "jobs", "schedules", "stats", "ping"):
        assert f"\n  {verb} " in top, verb
    assert "MONGOSCHED['WORKERS'] (2)" in top and "exit codes:" in top
    run = io.StringIO()
    call_command("mongosched", "worker", "--workers", "3", "--help", stdout=run)
    assert "--workers N" in run.getvalue()


def test_management_command_runs_a_worker(app: App) -> None:
    from django.core.management import call_command

    starts = _runner_starts(app)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            call_command("mongosched", "worker", stdout=io.StringIO(), stderr=io.StringIO())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    runner = wait_for(lambda: starts and starts[0], timeout=10, message="the worker to start")
    assert runner.workers == 2  # MONGOSCHED["WORKERS"] is the default of --workers
    try:
        job = app.get_task("tests.djangoproject.testapp.tasks.add").schedule(5, 6)
        assert job.wait(timeout=10).result == 11
    finally:
        runner.stop(timeout=5)
        thread.join(timeout=10)
    assert not thread.is_alive() and errors == []
